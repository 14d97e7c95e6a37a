"""The whole App under a flood and a hostile `.github/rsi.yml`: signed webhooks into the
Flask app, its queue, its database and its worker, against the GitHub stand-in the tests
use (a real HTTP server speaking GitHub's REST API, every request checked against
GitHub's OpenAPI description, and `assert_clean` at the end of each run). What is timed
is the time from POSTing a webhook until the App dispatches the GPU workflow (the
stand-in stamps each dispatch as it takes it).

    python bench/app_flood.py [--seed 1] [--requests 20] [--seconds 30] [--shape deployed]

About two minutes on the project's 2-core machine with the defaults (five runs of the
App, each from an empty database). Prints markdown tables; each ratio is against the
reference run of the same process.

1. **A hostile config does not delay other repositories.** `flood/repo` has the
   11-level billion laughs of tests/hostile_configs.py as its `.github/rsi.yml` (a new
   blob at each push to its main branch) and sends, as fast as the App takes them (two
   of its deliveries unprocessed at most), a writer's `/rsi verify` on a new PR, a push
   to that PR, a push to main. Meanwhile `team1/repo` sends `--requests` webhooks, one
   every 0.5 s: a writer's `/rsi verify` on a new PR, then a push to it, in turn. Its
   times are compared with the same requests alone (the usual time) and with the same
   traffic from `flood/repo` without a `.github/rsi.yml` (what the traffic alone costs).
   Nothing caps `team1/repo` here (`budget.max_running: 50`) and no run ends while it is
   measured (no evidence is built meanwhile): the time is the App's own path.

2. **Fair share through the App.** Ten repositories of two installations (`one/flood`
   and `one/repo1`-`4`; `two/repo5`-`9`), each with its own `.github/rsi.yml`, PRs and a
   writer; a pool of 6 H100s (`RSI_POOL_MAX_RUNNING=H100=6`), 4 a installation
   (`RSI_INSTALLATION_MAX_RUNNING`), 2 a repository (`budget.max_running`), 20 queued a
   repository (`RSI_REPO_MAX_QUEUED`). `one/flood` floods for `--seconds` (a writer's
   `/rsi verify` on a new PR or a push to one of its PRs, as fast as the App takes them);
   the nine others send `--requests` requests in all at random times. The reference is
   the same nine without the flood. Printed: each group's and class's times, the
   flooder's requests by outcome (dispatched, refused `queue-full`, superseded, still
   queued), its share of the dispatches and of the runner-time, and the most runners it,
   all ten and each installation held at once (the App's own count, sampled).

Time is compressed 60×: the reconciler (how queued work waiting for a slot starts) is
queued every second, as huey queues it every minute in production; a GPU run lasts 2-6 s
(2-6 minutes), after which the bench uploads a real bundle as the run's artifact and
delivers `workflow_run` completed (a run the App cancelled is delivered completed,
cancelled); GitHub's request spacing (`GITHUB_READ_INTERVAL_S`,
`GITHUB_WRITE_INTERVAL_S`) and the App's retry backoffs are divided by 60 too. The App's
and the stand-in's CPU time is not: a reconciler pass or a publish costs 60 times more,
relative to a minute, than in production.

The deployed shape (the default): PostgreSQL and Redis (tests/services.py), the webhook
acknowledged in this process by the Flask app, and the queue's consumer `rsi-bot worker
--workers 2` in its own process, as deployed, logging at the App's default level (INFO):
huey's line for each job says where the worker's time went. `--shape embedded` (SQLite,
the in-process immediate queue: a webhook is processed inside its POST) is used when
PostgreSQL or Redis cannot be reached. Exits 1, saying why, when a request of a
repository other than the flooder is not dispatched within 120 s, a delivery of one
fails, or the stand-in saw a request GitHub would refuse.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import hashlib
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
from flask import Flask  # noqa: E402
from flask.testing import FlaskClient  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from bot import runtime, services  # noqa: E402
from bot.models import ACTIVE_STATES, Delivery, RunnerJob, Verification  # noqa: E402
from bot.verification import machine as M  # noqa: E402
from bot.verification.reasons import Reason  # noqa: E402
from bot.verification.store import aware  # noqa: E402
from bot.web.app import create_app  # noqa: E402
from tests import appkit  # noqa: E402
from tests.hostile_configs import laughs  # noqa: E402
from tests.services import postgres_database, redis_db  # noqa: E402
from tests.standin import GitHubStandIn, example  # noqa: E402
from tests.worlds import world  # noqa: E402

JSON = dict[str, Any]
Key = tuple[str, int, str]  # (repository, PR, head sha): one request's verification

WRITER = "maintainer-mia"
CONFIG = "gpus: [H100]\nrounds: 3\nmodes: [streaming]\nwatch:\n  tasks: [cosyvoice3]\n"
CONFIG_PATH = ".github/rsi.yml"
SCALE = 60.0  # production seconds a bench second stands for
TICK_S = 60.0 / SCALE  # the reconciler's period: a minute in production
RUN_S = (2.0, 6.0)  # a GPU run: 2-6 minutes in production
GAP_S = 0.5  # between the measured repository's requests in part 1
IN_FLIGHT = 2  # the flooder's deliveries not yet processed, at most
SAMPLE_S = 0.1  # how often the runners held are counted
TIMEOUT_S = 120.0  # a request of a repository that does not flood is dispatched by then
LIVE = (M.JobState.DISPATCHING.value, M.JobState.DISPATCHED.value, M.JobState.RUNNING.value)
BIN = Path(sys.executable).parent
JOB_LINE = re.compile(  # huey's repr of a task: name, id, eta, priority, retries
    r"bot\.queue\.(\w+): \S+ (?:@\S+ )?(?:p=\S+ )?(?:\d+ retries )?executed in ([0-9.]+)s"
)

APP_SETTINGS: dict[str, Any] = {
    "METRICS_PORT": 0,
    "GITHUB_READ_INTERVAL_S": 0.25 / SCALE,
    "GITHUB_WRITE_INTERVAL_S": 1.0 / SCALE,
    "GITHUB_RETRY_BACKOFF_S": 0.5 / SCALE,
    "RSI_EFFECT_BACKOFF_S": 5.0 / SCALE,
}


class BenchFailed(Exception):
    """What the bench cannot measure (a request never dispatched, a failed delivery)."""


# --------------------------------------------------------------------------- the App


@dataclass
class App:
    """The App as the bench drives it: signed webhooks in, the reconciler's tick."""

    shape: str
    svc: services.Services
    flask: Flask
    tick: Callable[[], None]
    _local: threading.local = field(default_factory=threading.local)

    def deliver(self, event: str, payload: JSON, delivery: str) -> int:
        client: FlaskClient | None = getattr(self._local, "client", None)
        if client is None:  # one test client a thread
            client = self._local.client = self.flask.test_client()
        body = orjson.dumps(payload)
        headers = appkit.webhook_headers(body, event, delivery)
        return client.post("/webhooks/github", data=body, headers=headers).status_code


def services_up() -> str | None:
    """Why the deployed shape cannot run here (None: it can)."""
    import psycopg
    import redis

    from tests.services import PG_ADMIN, REDIS

    try:
        with psycopg.connect(PG_ADMIN, connect_timeout=3):
            pass
        redis.Redis.from_url(f"{REDIS}/0", socket_connect_timeout=3).ping()
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
    return None


def _worker_env(values: dict[str, Any], api_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    every = {
        "APP_ID": appkit.APP_ID,
        "PRIVATE_KEY": appkit.private_key_pem(),
        "WEBHOOK_SECRET": appkit.WEBHOOK_SECRET,
        "RSI_INTAKE_SECRET": appkit.INTAKE_SECRET,
        "RSI_RUNNER_REPO": appkit.RUNNER,
        "GITHUB_API_URL": api_url,
        "GITHUB_WEB_URL": "https://github.com",
        "PUBLIC_URL": "https://rsi.example.com",
        "RSI_TRUSTED_PUSHERS": "openrsi-bot",
        **values,
    }
    env.update({k: str(v) for k, v in every.items()})
    return env


@contextlib.contextmanager
def deployed(gh: GitHubStandIn, tmp: Path, overrides: dict[str, Any]) -> Iterator[App]:
    """PostgreSQL, Redis, the Flask app here and `rsi-bot worker --workers 2` apart."""
    with postgres_database(migrated=True) as db_url, redis_db() as redis_url:
        values = {
            **APP_SETTINGS,
            **overrides,
            "DATABASE_URL": db_url,
            "REDIS_URL": redis_url,
            "ARTIFACT_STORE": str(tmp / "artifacts"),
        }
        svc = runtime.build(appkit.settings(tmp, gh.url, **values))
        log_path = tmp / "worker.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [str(BIN / "rsi-bot"), "worker", "--workers", "2"],
                env=_worker_env(values, gh.url),
                cwd=tmp,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        app = App("deployed", svc, create_app(svc=svc), lambda: svc.queue.reconcile_task())
        try:
            app.tick()  # ready when the worker has taken it off the queue
            deadline = time.monotonic() + 60
            while svc.huey.pending_count():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise BenchFailed(f"the worker did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.05)
            yield app
            if proc.poll() is not None:
                raise BenchFailed(f"the worker died:\n{log_path.read_text()[-3000:]}")
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            svc.db.dispose()
            svc.huey.storage.conn.close()


@contextlib.contextmanager
def embedded(gh: GitHubStandIn, tmp: Path, overrides: dict[str, Any]) -> Iterator[App]:
    """SQLite and the in-process immediate queue (tests/worlds.py)."""
    with world("embedded", tmp, gh, **{**APP_SETTINGS, **overrides}) as w:
        yield App("embedded", w.svc, w.app, w.svc.queue.reconcile)


# --------------------------------------------------------------------------- payloads


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _about(payload: JSON, repo: str, installation: int | None, sender: str) -> JSON:
    owner, name = repo.split("/")
    payload["repository"].update(
        full_name=repo, name=name, default_branch="main", master_branch="main"
    )
    payload["repository"]["owner"]["login"] = owner
    if installation is not None:
        payload["installation"] = {**payload.get("installation", {}), "id": installation}
    payload["sender"].update(login=sender, type="User")
    return payload


# --------------------------------------------------------------------------- one run


@dataclass
class Req:
    """A webhook the bench sent: whose (`who`: measured, flooder, others), which `cls`
    (command, push, main), and when it was posted."""

    key: Key
    who: str
    cls: str
    posted: float  # monotonic
    delivery: str
    wall: float = 0.0  # the same instant, epoch seconds (the database's clock)


@dataclass
class Measured:
    """What one run of the App measured."""

    name: str
    shape: str
    reqs: list[Req]
    dispatched: dict[Key, float]  # first dispatch of each request's verification
    dispatch_log: list[tuple[float, str]]  # (when, repository) of every dispatch
    ended: dict[Key, tuple[str, str, float]]  # state, end reason, creation of its verification
    held: list[tuple[float, dict[str, int]]]  # runners each repository held, sampled
    queue: list[tuple[float, int]]  # jobs waiting on the queue, sampled
    installation_of: dict[str, int]
    window: tuple[float, float]  # the traffic's start and end
    config_reads: dict[int, int]  # flood/repo's `.github/rsi.yml` reads by status
    failed_deliveries: list[tuple[str, str]]  # (delivery, error)
    installations_recorded: tuple[int, int]  # dispatched verifications with one, of all
    github_requests: int  # the App's requests to the stand-in
    standin_busy_s: float  # the stand-in's time answering them
    deliveries: int  # webhooks the App stored
    elapsed: float  # seconds from the App's start to this result
    jobs: dict[str, tuple[int, float]]  # the worker's jobs by task: how many, seconds


class Stamped(list[JSON]):
    """The stand-in's dispatch record, with when each was taken."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def append(self, item: JSON, /) -> None:
        self.at.append(time.monotonic())
        super().append(item)


class Harness:
    """The stand-in, the App and the bench's threads around them: the reconciler's tick,
    the GPU runners (a run completes 2-6 s after its dispatch) and a sampler of the
    runners each repository holds (the App's own count: a verification with a run
    dispatched or running, as bot/pool.py counts it)."""

    def __init__(
        self,
        name: str,
        shape: str,
        seed: int,
        repos: dict[str, str | None],
        overrides: dict[str, Any],
        runs_end: bool = True,
    ) -> None:
        self.name, self.shape, self.repos, self.overrides = name, shape, repos, overrides
        self.runs_end = runs_end  # False: no run ends while the bench measures
        self.run_rnd = random.Random(seed + 1)
        self.lock = threading.Lock()
        self.reqs: list[Req] = []
        self.heads: dict[tuple[str, int], str] = {}  # a PR's head
        self.prs: dict[str, list[int]] = {repo: [] for repo in repos}
        self.stop_all = threading.Event()
        self.threads: list[threading.Thread] = []
        self.held: list[tuple[float, dict[str, int]]] = []
        self.queue: list[tuple[float, int]] = []
        self.n = 0
        self.window = (0.0, 0.0)
        self.failure: BaseException | None = None
        self.taken: set[tuple[str, int]] = set()  # PRs whose last request was processed
        self.busy_s = 0.0  # the stand-in's time answering requests (one at a time)

    # ------------------------------------------------------------------ setting up

    def __enter__(self) -> Harness:
        self.stack = contextlib.ExitStack()
        tmp = Path(self.stack.enter_context(tempfile.TemporaryDirectory(prefix="app-flood-")))
        self.tmp = tmp
        gh = GitHubStandIn(app_id=appkit.APP_ID).start()
        self.stack.callback(gh.stop)
        self.gh = gh
        appkit.populate(gh)
        self.stamped = Stamped()
        gh.dispatches = self.stamped
        handle = gh._handle

        def timed(request: Any) -> Any:  # called under the stand-in's lock
            t = time.perf_counter()
            try:
                return handle(request)
            finally:
                self.busy_s += time.perf_counter() - t

        setattr(gh, "_handle", timed)  # noqa: B010
        for repo, text in self.repos.items():
            gh.add_repo(repo)
            if text is not None:
                gh.set_file(repo, CONFIG_PATH, text)
            gh.set_permission(repo, WRITER, "write")
        make = deployed if self.shape == "deployed" else embedded
        self.app = self.stack.enter_context(make(gh, tmp, self.overrides))
        threads = [self._ticker, self._sampler] + ([self._runner] if self.runs_end else [])
        for target in threads:
            t = threading.Thread(target=self._guard(target), daemon=True)
            t.start()
            self.threads.append(t)
        self.began = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all.set()
        for t in self.threads:
            t.join(30)
        self.stack.close()

    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # a thread's failure ends the run, loudly
                self.failure = exc
                self.stop_all.set()

        return run

    def check(self) -> None:
        if self.failure is not None:
            raise BenchFailed(f"a bench thread failed: {self.failure!r}") from self.failure

    def installation(self, repo: str) -> int | None:
        return self.gh.repo(repo).installation_id

    def _sha(self, repo: str) -> str:
        with self.lock:
            self.n += 1
            n = self.n
        return hashlib.sha1(f"{self.name}/{repo}/{n}".encode()).hexdigest()

    # ------------------------------------------------------------------ acting

    def post(self, event: str, payload: JSON, req: Req) -> Req:
        with self.lock:
            self.reqs.append(req)
        req.posted, req.wall = time.monotonic(), time.time()
        code = self.app.deliver(event, payload, req.delivery)
        if code != 202:
            raise BenchFailed(f"{req.delivery}: the App answered {code}")
        return req

    def _compares(self, repo: str, before: str, sha: str) -> None:
        main = self.gh.repo(repo).branches["main"]
        for base in {before, main, "main"}:
            self.gh.set_compare(repo, base, sha, commits=[sha], authors={sha: WRITER})

    def verify(self, repo: str, who: str) -> Req:
        """A writer's `/rsi verify` on a new PR."""
        sha = self._sha(repo)
        pull = self.gh.add_pull(repo, head=f"change-{sha[:12]}", head_sha=sha, title="A change")
        number = int(pull["number"])
        self._compares(repo, sha, sha)
        with self.lock:
            self.heads[(repo, number)] = sha
            self.prs[repo].append(number)
        [cid] = self.gh.add_comments(repo, number, 1, body="/rsi verify", user=WRITER)
        written = self.gh.comments[cid]
        p = _about(
            copy.deepcopy(example("issue_comment", "created")),
            repo,
            self.installation(repo),
            WRITER,
        )
        p["issue"]["number"] = number
        p["issue"]["pull_request"] = {"url": f"{self.gh.url}/repos/{repo}/pulls/{number}"}
        p["comment"].update(
            id=cid,
            body="/rsi verify",
            created_at=_iso(written.created_at),
            updated_at=_iso(written.updated_at),
        )
        p["comment"]["user"].update(login=WRITER, type="User")
        req = Req((repo, number, sha), who, "command", 0.0, f"{who}-c-{sha[:16]}")
        return self.post("issue_comment", p, req)

    def push(self, repo: str, number: int, who: str) -> Req:
        """The writer pushes a commit of theirs onto the PR's branch."""
        sha = self._sha(repo)
        pull = self.gh.pulls[repo.lower()][number]
        before = self.gh.repo(repo).branches[pull.head_ref]
        self._compares(repo, before, sha)
        self.gh.add_branch(repo, pull.head_ref, sha)
        with self.lock:
            self.heads[(repo, number)] = sha
        p = _about(
            copy.deepcopy(example("pull_request", "synchronize")),
            repo,
            self.installation(repo),
            WRITER,
        )
        p["number"] = number
        p["before"], p["after"] = before, sha
        p["pull_request"]["number"] = number
        p["pull_request"]["head"]["sha"] = sha
        p["pull_request"]["head"]["ref"] = pull.head_ref
        p["pull_request"]["base"]["ref"] = "main"
        p["pull_request"]["updated_at"] = _iso(dt.datetime.now(dt.UTC))
        req = Req((repo, number, sha), who, "push", 0.0, f"{who}-p-{sha[:16]}")
        return self.post("pull_request", p, req)

    def push_main(self, repo: str, who: str, config: str | None) -> Req:
        """A push to the default branch, with `config` as its `.github/rsi.yml`."""
        before, after = self.gh.repo(repo).branches["main"], self._sha(repo)
        if config is not None:
            self.gh.set_file(repo, CONFIG_PATH, config)
        self.gh.add_branch(repo, "main", after)
        p = _about(copy.deepcopy(example("push")), repo, self.installation(repo), WRITER)
        p.update(ref="refs/heads/main", before=before, after=after, created=False, deleted=False)
        p["pusher"] = {"name": WRITER, "email": f"{WRITER}@example.com"}
        req = Req((repo, 0, after), who, "main", 0.0, f"{who}-m-{after[:16]}")
        return self.post("push", p, req)

    def dispatched_prs(self, repo: str) -> list[int]:
        """The repository's PRs whose latest request has been dispatched."""
        done = self.dispatched()
        with self.lock:
            return [n for n in self.prs[repo] if (repo, n, self.heads[(repo, n)]) in done]

    def unprocessed(self, deliveries: list[str]) -> list[str]:
        if not deliveries:
            return []
        with self.app.svc.db.session() as s:
            return list(
                s.scalars(
                    select(Delivery.id).where(
                        Delivery.id.in_(deliveries), Delivery.status == "queued"
                    )
                )
            )

    def flood(self, action: Callable[[int], Req], until: threading.Event) -> threading.Thread:
        """Call `action(n)` again and again, as fast as the App takes the deliveries: at
        most `IN_FLIGHT` of them sent and not yet processed."""

        def loop() -> None:
            pending: dict[str, Req] = {}
            n = 0
            while not until.is_set() and not self.stop_all.is_set():
                if len(pending) >= IN_FLIGHT:
                    left = set(self.unprocessed(list(pending)))
                    for d in [d for d in pending if d not in left]:
                        self.taken.add(pending.pop(d).key[:2])
                    if len(pending) >= IN_FLIGHT:
                        until.wait(0.01)
                        continue
                req = action(n)
                self.taken.discard(req.key[:2])
                pending[req.delivery] = req
                n += 1

        t = threading.Thread(target=self._guard(loop), daemon=True)
        t.start()
        return t

    # ------------------------------------------------------------------ looking

    def dispatched(self) -> dict[Key, float]:
        out: dict[Key, float] = {}
        for d, at in zip(list(self.stamped), list(self.stamped.at), strict=False):
            i = d["inputs"]
            out.setdefault((str(i["repo"]), int(i["pr"]), str(i["head_sha"])), at)
        return out

    def wait_dispatched(self, keys: list[Key], timeout: float = TIMEOUT_S) -> None:
        """Every request in `keys` dispatched (the bench fails loudly otherwise)."""
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            left = [k for k in keys if k not in self.dispatched()]
            if not left:
                return
            if time.monotonic() > deadline:
                raise BenchFailed(
                    f"{self.name}: {len(left)} of {len(keys)} requests not dispatched within "
                    f"{timeout:.0f} s: {self._why(left[:5])}"
                )
            time.sleep(0.05)

    def _why(self, keys: list[Key]) -> str:
        said = []
        ended = self.ended()
        for k in keys:
            state, reason, _ = ended.get(k, ("no verification", "", 0.0))
            said.append(f"{k[0]}#{k[1]} {k[2][:8]}: {state} {reason}".strip())
        return "; ".join(said)

    def ended(self) -> dict[Key, tuple[str, str, float]]:
        """State, end reason and creation (epoch seconds) of each request's verification."""
        out: dict[Key, tuple[str, str, float]] = {}
        with self.app.svc.db.session() as s:
            rows = s.execute(
                select(
                    Verification.repo,
                    Verification.pr_number,
                    Verification.head_sha,
                    Verification.state,
                    Verification.end_reason,
                    Verification.created_at,
                ).order_by(Verification.created_at)
            ).all()
        for repo, number, sha, state, reason, created in rows:
            why = Reason.from_json(reason)
            made = aware(created).timestamp()
            out[(repo, number or 0, sha)] = (state, why.code if why else "", made)
        return out

    def failed_deliveries(self) -> list[tuple[str, str]]:
        with self.app.svc.db.session() as s:
            rows = s.execute(
                select(Delivery.id, Delivery.error).where(Delivery.status == "failed")
            ).all()
        return [(d, e or "") for d, e in rows]

    def result(self) -> Measured:
        try:
            self.gh.assert_clean()
        except AssertionError as exc:  # the App sent what GitHub would refuse
            raise BenchFailed(f"{self.name}: {exc}") from None
        reads: dict[int, int] = {}
        for r in self.gh.matching("GET", r"/repos/flood/repo/contents/\.github/rsi\.yml$"):
            reads[r.status] = reads.get(r.status, 0) + 1
        with self.lock:
            reqs = list(self.reqs)
            held = list(self.held)
            queue = list(self.queue)
        stamps = list(zip(list(self.stamped), list(self.stamped.at), strict=False))
        with self.app.svc.db.session() as s:
            recorded = s.execute(
                select(func.count(Verification.installation_id), func.count(Verification.id)).where(
                    Verification.dispatched_at.is_not(None)
                )
            ).one()
            deliveries = s.scalar(select(func.count(Delivery.id))) or 0
        return Measured(
            name=self.name,
            shape=self.app.shape,
            reqs=reqs,
            dispatched=self.dispatched(),
            dispatch_log=[(at, str(d["inputs"]["repo"])) for d, at in stamps],
            ended=self.ended(),
            held=held,
            queue=queue,
            installation_of={r: self.installation(r) or 0 for r in self.repos},
            window=self.window,
            config_reads=reads,
            failed_deliveries=self.failed_deliveries(),
            installations_recorded=(int(recorded[0]), int(recorded[1])),
            github_requests=len(self.gh.requests),
            standin_busy_s=self.busy_s,
            deliveries=int(deliveries),
            elapsed=time.monotonic() - self.began,
            jobs=self.jobs(),
        )

    def jobs(self) -> dict[str, tuple[int, float]]:
        """What the worker spent its threads on, from huey's log lines (deployed only)."""
        log = self.tmp / "worker.log"
        out: dict[str, tuple[int, float]] = {}
        if not log.exists():
            return out
        for match in JOB_LINE.finditer(log.read_text(errors="replace")):
            n, took = out.get(match[1], (0, 0.0))
            out[match[1]] = (n + 1, took + float(match[2]))
        return out

    # ------------------------------------------------------------------ threads

    def _ticker(self) -> None:
        """The reconciler, queued every tick (huey's periodic task, every minute)."""
        while not self.stop_all.wait(TICK_S):
            self.app.tick()

    def _runner(self) -> None:
        """The GPU runners: each dispatched run starts, then completes 2-6 s later with a
        real bundle; a run the App cancelled meanwhile is told completed, cancelled."""
        seen = 0
        due: list[tuple[float, JSON]] = []
        while not self.stop_all.wait(0.05):
            now = time.monotonic()
            while seen < len(self.stamped):
                due.append((now + self.run_rnd.uniform(*RUN_S), self.stamped[seen]))
                seen += 1
            due.sort(key=lambda x: x[0])
            while due and due[0][0] <= time.monotonic() and not self.stop_all.is_set():
                _, d = due.pop(0)
                self._complete(d)

    def _complete(self, d: JSON) -> None:
        run_id, inputs = int(d["run_id"]), d["inputs"]
        vid, gpu = str(inputs["verification_id"]), str(inputs["gpu"]).upper()
        with self.gh._lock:
            cancelled = self.gh.runs[run_id].status == "completed"
        if cancelled:
            payload = self.gh.run_event(appkit.RUNNER, run_id, "completed")
        else:
            bundle = appkit.bundle_zip(
                self.tmp / f"{vid}-{gpu}",
                vid,
                gpu,
                repo=str(inputs["repo"]),
                base_sha=str(inputs["base_sha"]),
                head_sha=str(inputs["head_sha"]),
                modes=("streaming",),
            )
            self.gh.add_artifact(appkit.RUNNER, run_id, f"rsi-bundle-{vid}-{gpu.lower()}", bundle)
            payload = self.gh.complete_run(appkit.RUNNER, run_id, "success")
        code = self.app.deliver("workflow_run", payload, f"done-{run_id}")
        if code != 202:
            raise BenchFailed(f"workflow_run completed of {vid}: the App answered {code}")

    def _sampler(self) -> None:
        while not self.stop_all.wait(SAMPLE_S):
            with self.app.svc.db.session() as s:
                rows = s.execute(
                    select(Verification.repo, func.count(func.distinct(Verification.id)))
                    .join(RunnerJob)
                    .where(Verification.state.in_(ACTIVE_STATES), RunnerJob.state.in_(LIVE))
                    .group_by(Verification.repo)
                ).all()
            waiting = int(self.app.svc.huey.pending_count())
            with self.lock:
                now = time.monotonic()
                self.held.append((now, {repo: int(n) for repo, n in rows}))
                self.queue.append((now, waiting))


# --------------------------------------------------------------------------- part 1

MEASURED = "team1/repo"
HOSTILE = "flood/repo"


def part1(shape: str, seed: int, requests: int, flood: str | None) -> Measured:
    """`team1/repo`'s requests, alone (`flood` None) or beside `flood/repo`'s traffic with
    the billion laughs (`hostile`) or without a `.github/rsi.yml` (`absent`)."""
    name = {None: "usual", "absent": "same traffic, no config", "hostile": "billion laughs"}
    repos: dict[str, str | None] = {MEASURED: CONFIG + "budget:\n  max_running: 50\n"}
    if flood is not None:
        repos[HOSTILE] = laughs(11) if flood == "hostile" else None
    overrides = {"RSI_INSTALLATION_MAX_RUNNING": 1000}
    with Harness(name[flood], shape, seed, repos, overrides, runs_end=False) as h:
        stop = threading.Event()
        flooder = None
        if flood is not None:

            def act(n: int) -> Req:
                kind = n % 3
                mine = sorted(number for repo, number in h.taken if repo == HOSTILE and number)
                if kind == 1 and mine:
                    return h.push(HOSTILE, mine[-1], "flooder")
                if kind == 2:
                    text = laughs(11) + f"# {n}\n" if flood == "hostile" else None
                    return h.push_main(HOSTILE, "flooder", text)
                return h.verify(HOSTILE, "flooder")

            flooder = h.flood(act, stop)
            time.sleep(1.0)  # the flood under way
        start = time.monotonic()
        h.window = (start, start)
        keys: list[Key] = []
        for i in range(requests):
            time.sleep(max(0.0, start + i * GAP_S - time.monotonic()))
            h.check()
            ready = h.dispatched_prs(MEASURED)
            if i % 2 == 1 and ready:
                keys.append(h.push(MEASURED, ready[-1], "measured").key)
            else:
                keys.append(h.verify(MEASURED, "measured").key)
        h.wait_dispatched(keys)
        h.window = (start, time.monotonic())
        stop.set()
        if flooder is not None:
            flooder.join(30)
        h.check()
        return h.result()


# --------------------------------------------------------------------------- part 2

FLOODER = "one/flood"
OTHERS = [f"one/repo{i}" for i in range(1, 5)] + [f"two/repo{i}" for i in range(5, 10)]
POOL = "H100=6"
PER_INSTALLATION = 4


def part2(shape: str, seed: int, requests: int, seconds: float, flood: bool) -> Measured:
    repos: dict[str, str | None] = dict.fromkeys([FLOODER, *OTHERS], CONFIG)
    overrides = {"RSI_POOL_MAX_RUNNING": POOL, "RSI_INSTALLATION_MAX_RUNNING": PER_INSTALLATION}
    schedule_rnd = random.Random(seed)
    schedule = sorted(
        (schedule_rnd.uniform(0, seconds), schedule_rnd.choice(OTHERS), schedule_rnd.random())
        for _ in range(requests)
    )
    with Harness("flood" if flood else "no flood", shape, seed, repos, overrides) as h:
        stop = threading.Event()
        flood_rnd = random.Random(seed + 2)
        start = time.monotonic()
        flooder = None
        if flood:

            def act(n: int) -> Req:
                mine = sorted(number for repo, number in h.taken if repo == FLOODER and number)
                if mine and flood_rnd.random() < 0.5:
                    return h.push(FLOODER, flood_rnd.choice(mine), "flooder")
                return h.verify(FLOODER, "flooder")

            flooder = h.flood(act, stop)
        keys: list[Key] = []
        for at, repo, coin in schedule:
            time.sleep(max(0.0, start + at - time.monotonic()))
            h.check()
            ready = h.dispatched_prs(repo)
            if ready and coin < 0.5:
                keys.append(h.push(repo, schedule_rnd.choice(ready), "others").key)
            else:
                keys.append(h.verify(repo, "others").key)
        time.sleep(max(0.0, start + seconds - time.monotonic()))
        stop.set()
        if flooder is not None:
            flooder.join(30)
        h.window = (start, time.monotonic())
        h.wait_dispatched(keys)
        h.check()
        return h.result()


# --------------------------------------------------------------------------- figures


def pct(xs: list[float], q: int) -> float:
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


def waits(m: Measured, who: str, cls: str) -> list[float]:
    """Seconds from each webhook to its dispatch (of the requests dispatched)."""
    return [
        m.dispatched[r.key] - r.posted
        for r in m.reqs
        if r.who == who and r.cls == cls and r.key in m.dispatched
    ]


def figures(xs: list[float]) -> tuple[float, float, float]:
    return pct(xs, 50), pct(xs, 95), max(xs)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "–"


def require(m: Measured, who: str) -> None:
    """Every request of `who` dispatched, and no delivery of theirs failed."""
    mine = {r.delivery for r in m.reqs if r.who == who}
    failed = [(d, e) for d, e in m.failed_deliveries if d in mine]
    if failed:
        raise BenchFailed(f"{m.name}: deliveries of {who} failed: {failed[:3]}")
    missing = [r for r in m.reqs if r.who == who and r.key not in m.dispatched]
    if missing:
        raise BenchFailed(f"{m.name}: {len(missing)} requests of {who} never dispatched")


def split(m: Measured, who: str, cls: str) -> str:
    """p50 / max of the webhook → queued and queued → dispatched parts."""
    total = {id(r): m.dispatched[r.key] - r.posted for r in m.reqs if r.key in m.dispatched}
    first, rest = [], []
    for r in m.reqs:
        if r.who == who and r.cls == cls and id(r) in total and r.key in m.ended:
            first.append(m.ended[r.key][2] - r.wall)
            rest.append(total[id(r)] - first[-1])
    if not first:
        return "– | –"
    return f"{pct(first, 50):.2f} / {max(first):.2f} | {pct(rest, 50):.2f} / {max(rest):.2f}"


def print_load(runs: list[Measured]) -> None:
    """What each run asked of the App and of the stand-in, and how long the queue was."""
    print(
        "\n| run | seconds | webhooks | GitHub requests | stand-in busy | queued jobs, "
        "median / max | worker threads busy | worker seconds by job |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for m in runs:
        start, end = m.window
        xs = [n for t, n in m.queue if start <= t <= end] or [0]
        busy = sum(took for _, took in m.jobs.values())
        by_job = ", ".join(
            f"{name} {took:.1f} ({n})"
            for name, (n, took) in sorted(m.jobs.items(), key=lambda x: -x[1][1])
            if took >= 0.05
        )
        print(
            f"| {m.name} | {m.elapsed:.0f} | {m.deliveries} | {m.github_requests} | "
            f"{m.standin_busy_s / m.elapsed:.0%} | {statistics.median(xs):.0f} / {max(xs)} | "
            f"{f'{busy / (2 * m.elapsed):.0%}' if m.jobs else '–'} | {by_job or '–'} |"
        )


def print_part1(runs: list[Measured]) -> None:
    usual = runs[0]
    print("\n## 1. Another repository's webhook beside a hostile `.github/rsi.yml`\n")
    print(
        "| run | class | requests | p50 s | p95 s | max s | × usual p50 | × usual p95 "
        "| × usual max | webhook → queued, p50 / max s | queued → dispatched, p50 / max s |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for m in runs:
        require(m, "measured")
        for cls in ("command", "push"):
            xs = waits(m, "measured", cls)
            p50, p95, top = figures(xs)
            u50, u95, utop = figures(waits(usual, "measured", cls))
            print(
                f"| {m.name} | {cls} | {len(xs)} | {p50:.3f} | {p95:.3f} | {top:.3f} | "
                f"{ratio(p50, u50)} | {ratio(p95, u95)} | {ratio(top, utop)} | "
                f"{split(m, 'measured', cls)} |"
            )
    for m in runs[1:]:
        start, end = m.window
        sent = [r for r in m.reqs if r.who == "flooder" and start <= r.posted <= end]
        kinds = ", ".join(
            f"{sum(1 for r in sent if r.cls == c)} {c}" for c in ("command", "push", "main")
        )
        reads = ", ".join(f"{n} × {status}" for status, n in sorted(m.config_reads.items()))
        failed = [d for d, _ in m.failed_deliveries if d.startswith("flooder")]
        print(
            f"\n{m.name}: flood/repo sent {len(sent)} webhooks in the {end - start:.1f} s "
            f"measured ({len(sent) / (end - start):.1f}/s: {kinds}); the App read its "
            f"{CONFIG_PATH} {reads or 'never'} times (200: a new blob, parsed; 404: none); "
            f"{len(failed)} of its deliveries failed"
        )
    print_load(runs)


def print_part2(runs: list[Measured], requests: int, seconds: float) -> None:
    quiet, flood = runs
    print("\n## 2. Fair share through the App\n")
    print(
        f"10 repositories, 2 installations; pool {POOL}, {PER_INSTALLATION} a installation, "
        f"2 a repository, 20 queued a repository; the nine others: {requests} requests in "
        f"{seconds:.0f} s\n"
    )
    print(
        "| flood | who | class | requests | dispatched | p50 s | p95 s | max s "
        "| webhook → queued, p50 / max s | queued → dispatched, p50 / max s |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for m in runs:
        require(m, "others")
        for who in ("flooder", "others"):
            for cls in ("command", "push"):
                sent = [r for r in m.reqs if r.who == who and r.cls == cls]
                xs = waits(m, who, cls)
                if not sent:
                    continue
                p50, p95, top = figures(xs) if xs else (float("nan"),) * 3
                print(
                    f"| {'yes' if m is flood else 'no'} | {who} | {cls} | {len(sent)} | "
                    f"{len(xs)} | {p50:.2f} | {p95:.2f} | {top:.2f} | {split(m, who, cls)} |"
                )
    print("\n(the flooder's times are those of its requests that were dispatched)")
    print("\nThe others' times with the flood against without it:\n")
    print("| class | × p50 | × p95 | × max |")
    print("| --- | ---: | ---: | ---: |")
    for cls in ("command", "push"):
        a, b = waits(flood, "others", cls), waits(quiet, "others", cls)
        if a and b:
            (a50, a95, amax), (b50, b95, bmax) = figures(a), figures(b)
            print(f"| {cls} | {ratio(a50, b50)} | {ratio(a95, b95)} | {ratio(amax, bmax)} |")
    start, end = flood.window
    mine = [r for r in flood.reqs if r.who == "flooder"]
    outcomes: dict[str, int] = {}
    for r in mine:
        if r.key in flood.dispatched:
            what = "dispatched"
        else:
            state, reason, _ = flood.ended.get(r.key, ("no verification", "", 0.0))
            what = f"{state} ({reason})" if reason else state
            if state == "queued":
                what = "still queued when it stopped"
            elif state == "superseded":
                what = "superseded by a later push to its PR"
        outcomes[what] = outcomes.get(what, 0) + 1
    in_window = [repo for at, repo in flood.dispatch_log if start <= at <= end]
    share = sum(1 for repo in in_window if repo == FLOODER) / max(len(in_window), 1)
    inst = flood.installation_of
    names = {inst[FLOODER]: "one", inst[OTHERS[-1]]: "two"}
    samples = [h for t, h in flood.held if start <= t <= end]
    mine_held = [h.get(FLOODER, 0) for h in samples]
    all_held = [sum(h.values()) for h in samples]
    by_inst = {
        i: max((sum(n for r, n in h.items() if inst.get(r) == i) for h in samples), default=0)
        for i in names
    }
    print(
        f"\nThe flooder, {end - start:.0f} s: {len(mine)} requests: "
        + ", ".join(f"{n} {what}" for what, n in sorted(outcomes.items(), key=lambda x: -x[1]))
    )
    print(
        f"its share of the dispatches: {share:.0%} ({len(in_window)} in all); runners it held "
        f"at once: {max(mine_held, default=0)} at most (its cap 2), "
        f"{sum(mine_held) / max(sum(all_held), 1):.0%} of the runner-time held; all ten at "
        f"once: {max(all_held, default=0)} at most (the pool's cap 6)"
    )
    print(
        "runners held at once per installation, at most: "
        + ", ".join(f"{names[i]} {n}" for i, n in sorted(by_inst.items()))
        + f" (the cap is {PER_INSTALLATION}); dispatched verifications that record their "
        f"installation: {flood.installations_recorded[0]} of {flood.installations_recorded[1]}"
    )
    print(f"(runners held: the App's own count, as bot/pool.py counts them, every {SAMPLE_S:g} s)")
    print_load(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--requests", type=int, default=20, help="requests of the others a run")
    ap.add_argument("--seconds", type=float, default=30.0, help="how long part 2 floods")
    ap.add_argument("--shape", choices=("deployed", "embedded"), default="deployed")
    a = ap.parse_args()
    shape = a.shape
    why = services_up() if shape == "deployed" else None
    if why is not None:
        print(f"PostgreSQL or Redis cannot be reached ({why}): the embedded shape instead")
        shape = "embedded"
    began = time.monotonic()
    print(
        f"shape: {shape}"
        + (
            " (PostgreSQL, Redis, `rsi-bot worker --workers 2` in its own process)"
            if shape == "deployed"
            else " (SQLite, in-process immediate queue)"
        )
        + f"; seed {a.seed}; {os.cpu_count()} cores; time compressed {SCALE:.0f}×: "
        f"reconciler every {TICK_S:g} s, GPU runs {RUN_S[0]:g}-{RUN_S[1]:g} s"
    )
    try:
        one = [part1(shape, a.seed, a.requests, f) for f in (None, "absent", "hostile")]
        print_part1(one)
        two = [part2(shape, a.seed, a.requests, a.seconds, f) for f in (False, True)]
        print_part2(two, a.requests, a.seconds)
    except BenchFailed as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    print(f"\n{time.monotonic() - began:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
