"""Acknowledging GitHub webhooks under load.

GitHub's published `pull_request` `synchronize` example, serialized as GitHub delivers it
(compact JSON, 23.7 KB; `--indent 2` gives the pretty-printed 28.1 KB), signed once;
every request gets its own `X-GitHub-Delivery`. wrk (`-t2 -c16 -d10s`,
`bench/webhook_ack.lua`) drives `POST /webhooks/github` on
`gunicorn -c python:bot.gunicorn_conf -w 2 -k bot.serving.GeventWorker
'bot.web.app:create_app()'` (the Procfile's server, worker and settings; `--worker-class
gthread` for threads) backed by a fresh
PostgreSQL database and a dedicated Redis DB, and, served by the same gunicorn command
line, a bare Flask endpoint that only reads the body (`webhook_ack:bare_app()` below).
Runs are interleaved bare, app, app, bare after a short warm-up of each, and the medians
are compared. Each
run also says where the machine's CPU went (server, PostgreSQL, Redis, wrk, anything
else) per response, and how the kernel spread wrk's connections over the two workers.

Then `rsi-bot worker` drains the queue and the deliveries are counted: every acknowledged
delivery stored (0 lost), every delivery queued (in batches, `bot.batcher`), and every job run once
(`attempts == 1`, and one `process_delivery` execution per delivery in the worker's log).

    .venv/bin/python bench/webhook_ack.py

Targets: throughput ≥ 0.4× bare, app p99 ≤ 50 ms, 0 lost. Exit 0 on pass, 1 on fail,
2 when wrk is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import hmac
import json
import os
import platform
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Flask, request

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
LUA = BENCH / "webhook_ack.lua"
BIN = Path(sys.executable).parent
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
WEBHOOK_SECRET = "webhook-ack-bench-secret"
TARGET_THROUGHPUT = 0.4
TARGET_P99_MS = 50.0
PRODUCTION_WORKER = "bot.serving.GeventWorker"
"""bot.gunicorn_conf's worker class, passed explicitly: gunicorn's own `-k gevent` does not
read the body before the application, as the App's worker does."""


def bare_app() -> Flask:
    """The reference: a POST handler that only reads the body and answers 202."""
    app = Flask("bare")

    @app.post("/webhooks/github")
    def webhook() -> tuple[str, int]:
        request.get_data(cache=False)
        return "", 202

    @app.get("/healthz")
    def healthz() -> tuple[str, int]:
        return "ok", 200

    return app


@dataclass(frozen=True)
class Cpu:
    """CPU seconds used during one wrk run, by whom (from /proc)."""

    server: float  # the gunicorn master and its workers
    postgres: float  # every PostgreSQL process (backends, WAL writer, checkpointer, …)
    redis: float
    wrk: float
    others: float  # everything else busy: other work on the machine, kernel threads
    capacity: float  # cores × wall seconds


def _proc_cpu() -> dict[int, tuple[str, int, float]]:
    """pid → (command, parent pid, CPU seconds) for every process."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry)] = (comm, int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return out


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as fh:
        values = [int(x) for x in fh.readline().split()[1:]]
    total = sum(values[:8])  # guest time is already inside user time
    return (total - values[3] - values[4]) / tick, total / tick


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


@contextlib.contextmanager
def cpu_accounting(master: int) -> Iterator[list[Cpu]]:
    """Attribute the machine's CPU during the block to the server, PostgreSQL, Redis and
    wrk (a child we wait for, so it is read from our own rusage); the rest is noise."""
    box: list[Cpu] = []
    before, (busy0, total0), kids0 = _proc_cpu(), _machine_cpu(), _children_cpu()
    yield box
    after, (busy1, total1), kids1 = _proc_cpu(), _machine_cpu(), _children_cpu()
    used = {"server": 0.0, "postgres": 0.0, "redis": 0.0}
    for pid, (comm, ppid, cpu) in after.items():
        delta = cpu - before.get(pid, (comm, ppid, 0.0))[2]
        if pid == master or ppid == master:
            used["server"] += delta
        elif comm.startswith("postgres"):
            used["postgres"] += delta
        elif comm.startswith("redis-server"):
            used["redis"] += delta
    wrk = kids1 - kids0
    busy = busy1 - busy0
    others = max(0.0, busy - sum(used.values()) - wrk)
    box.append(Cpu(**used, wrk=wrk, others=others, capacity=total1 - total0))


@dataclass(frozen=True)
class WrkResult:
    server: str
    requests: int  # responses received
    sent: int  # requests generated (incl. those in flight when wrk stopped)
    duration_s: float
    non2xx: int  # wrk counts status >= 400
    socket_errors: int  # connect + read + write + timeout
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    cpu: Cpu
    spread: str  # wrk's connections per gunicorn worker, mid-run, e.g. "10/6"

    def cpu_ms(self, who: str) -> float:
        """CPU milliseconds per response spent by `who` (server, postgres, redis, wrk)."""
        return 1000 * float(getattr(self.cpu, who)) / max(1, self.requests)

    @property
    def others_pct(self) -> float:
        """Share of the machine's CPU taken by processes unrelated to this run."""
        return 100 * self.cpu.others / self.cpu.capacity

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s

    @property
    def acknowledged(self) -> int:
        return self.requests - self.non2xx

    @property
    def in_flight(self) -> int:
        return self.sent - self.requests


def payload_body(indent: int | None) -> bytes:
    """GitHub's `pull_request.synchronize` example as the bytes GitHub would deliver."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests import fetch_github_fixtures

    if not fetch_github_fixtures.WEBHOOKS_PATH.exists():
        fetch_github_fixtures.ensure()
    from tests.standin.payloads import example

    doc = example("pull_request", "synchronize")
    if indent is None:
        # GitHub delivers compact JSON (no whitespace), non-ASCII as \u escapes.
        return json.dumps(doc, separators=(",", ":")).encode()
    return json.dumps(doc, indent=indent).encode()


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def private_key_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def database() -> Iterator[str]:
    """A fresh PostgreSQL database for this run, dropped at the end."""
    import psycopg

    name = f"rsi_bench_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Proc:
    """A child process we started, logging to a file; stopped by its own id."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.log_path = cwd / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.popen = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, sig: signal.Signals, timeout: float = 30.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"  {self.name} did not stop within {timeout:.0f} s; killing it")
                os.killpg(self.popen.pid, signal.SIGKILL)  # the group we created for it
                self.popen.wait()
        self._log.close()
        return self.popen.returncode


def server_flags(args: argparse.Namespace) -> list[str]:
    flags = ["-k", args.worker_class]
    if args.worker_class == "gthread":
        flags += ["--threads", str(args.server_threads)]
    return flags


def gunicorn(
    name: str, target: str, port: int, env: dict[str, str], cwd: Path, flags: list[str]
) -> Proc:
    """Both servers are started by this same command line; only the target differs."""
    argv = [str(BIN / "gunicorn"), "-c", "python:bot.gunicorn_conf"]
    argv += ["-w", "2", *flags, "-b", f"127.0.0.1:{port}"]
    argv += ["--pythonpath", str(BENCH), target]
    return Proc(name, argv, env, cwd)


def wait_ready(proc: Proc, url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{proc.name} not ready at {url} after {timeout:.0f} s:\n{proc.tail()}")


def connections_per_worker(port: int) -> str:
    """How the kernel spread the keep-alive connections over the gunicorn workers."""
    out = subprocess.run(
        ["ss", "-tnpH", "state", "established", f"( sport = :{port} )"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    counts: dict[str, int] = {}
    for line in out.stdout.splitlines():
        pid = line.rpartition("pid=")[2].split(",")[0]
        if pid:
            counts[pid] = counts.get(pid, 0) + 1
    return "/".join(str(n) for n in sorted(counts.values(), reverse=True)) or "?"


def run_wrk(
    wrk: str, server: Proc, url: str, body_path: Path, signature: str, args: argparse.Namespace,
    duration_s: int,
) -> WrkResult:  # fmt: skip
    prefix = f"{secrets.token_hex(4)}-{secrets.token_hex(2)}-{secrets.token_hex(2)}"
    env = {
        **os.environ,
        "WEBHOOK_ACK_BODY": str(body_path),
        "WEBHOOK_ACK_SIGNATURE": signature,
        "WEBHOOK_ACK_PREFIX": prefix,
    }
    argv = [wrk, f"-t{args.threads}", f"-c{args.connections}", f"-d{duration_s}s"]
    argv += ["-s", str(LUA), url]
    port = int(url.split(":")[2].split("/")[0])
    with cpu_accounting(server.popen.pid) as cpu:
        wrk_proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        time.sleep(duration_s / 2)
        spread = connections_per_worker(port)
        stdout, stderr = wrk_proc.communicate()
    out = subprocess.CompletedProcess(argv, wrk_proc.returncode, stdout, stderr)
    line = next((x for x in out.stdout.splitlines() if x.startswith("WEBHOOK_ACK ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    return WrkResult(
        server=server.name,
        requests=int(f["requests"]),
        sent=int(f["sent"]),
        duration_s=int(f["duration_us"]) / 1e6,
        non2xx=int(f["non2xx"]),
        socket_errors=sum(int(f[k]) for k in ("connect", "read", "write", "timeout")),
        p50_ms=float(f["p50_ms"]),
        p90_ms=float(f["p90_ms"]),
        p99_ms=float(f["p99_ms"]),
        max_ms=float(f["max_ms"]),
        mean_ms=float(f["mean_ms"]),
        cpu=cpu[0],
        spread=spread,
    )


def queued_deliveries(huey: Any) -> tuple[int, int]:
    """(jobs, deliveries) waiting in the queue: the web process queues one
    `process_deliveries` job per batch of acknowledged deliveries (`bot.batcher`)."""
    jobs = deliveries = 0
    for data in huey.storage.enqueued_items():
        message = huey.serializer.deserialize(data)
        jobs += 1
        if message.name.endswith("process_deliveries"):
            deliveries += len(message.args[0])
        elif message.name.endswith("process_delivery"):
            deliveries += 1
    return jobs, deliveries


def query(db_url: str, sql: str) -> tuple[Any, ...]:
    import psycopg

    with psycopg.connect(db_url) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return tuple(row)


def drain(db_url: str, worker: Proc, stall_s: float) -> float:
    """Seconds until every delivery row is `done` (the worker keeps running); gives up
    when no delivery was done for `stall_s` (a burst of 100,000 takes minutes)."""
    start = last_progress = time.monotonic()
    last_done = -1
    while True:
        total, done = query(
            db_url, "SELECT count(*), count(*) FILTER (WHERE status = 'done') FROM deliveries"
        )
        now = time.monotonic()
        if done == total:
            return now - start
        if worker.popen.poll() is not None:
            raise RuntimeError(f"worker exited ({worker.popen.returncode}):\n{worker.tail()}")
        if done != last_done:
            last_done, last_progress = done, now
        elif now - last_progress > stall_s:
            raise RuntimeError(
                f"queue not drained: {done}/{total} done, none in the last {stall_s:.0f} s"
            )
        time.sleep(0.5)


@dataclass(frozen=True)
class Executions:
    """What the worker's log says it did (huey logs each job at INFO; `bot.deliveries`
    logs `delivery <id> (…) of <repo> done: …` once a delivery's handlers ran)."""

    jobs: int  # process_delivery jobs executed, no-ops included
    processed: int  # deliveries whose handlers ran
    most: int  # the most times one delivery's handlers ran (1 = each once)
    reconciles: int


def executions(worker_log: Path) -> Executions | None:
    """None when the worker does not log executions (LOG_LEVEL above INFO)."""
    jobs = reconciles = 0
    done: dict[str, int] = {}
    logged = False
    for line in worker_log.read_text(errors="replace").splitlines():
        if "Executing " in line:
            logged = True
            if ".process_delivery: " in line:
                jobs += 1
            elif ".reconcile: " in line:
                reconciles += 1
        elif " bot.deliveries" in line and " done: " in line:
            delivery = line.split(": delivery ", 1)[-1].split(" ", 1)[0]
            done[delivery] = done.get(delivery, 0) + 1
    if not logged:
        return None
    return Executions(jobs, len(done), max(done.values(), default=0), reconciles)


def med(values: list[float]) -> float:
    return statistics.median(values)


def code_version() -> str:
    """The commit measured, and whether the App's code differs from it (read-only git)."""

    def git(*a: str) -> str:
        out = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False)
        return out.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "bot")
    return head + (" + uncommitted changes in bot/" if dirty else "")


def versions() -> str:
    from importlib.metadata import version

    import psycopg

    with psycopg.connect(ADMIN_URL) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    pg = row[0] if row else "?"
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"gunicorn {version('gunicorn')}, PostgreSQL {pg}"
    )


ROW = (
    "{run:>3}  {name:<5} {rps:>7.0f} {p50:>7.2f} {p90:>7.2f} {p99:>7.2f} {max:>7.1f} {bad:>5}"
    " | {srv:>6.3f} {pg:>6.3f} {rd:>6.3f} {wk:>6.3f} | {oth:>5.0f}% | {spread}"
)


def row(run: str, r: WrkResult) -> str:
    return ROW.format(
        run=run, name=r.server, rps=r.rps, p50=r.p50_ms, p90=r.p90_ms, p99=r.p99_ms,
        max=r.max_ms, bad=r.non2xx + r.socket_errors, srv=r.cpu_ms("server"),
        pg=r.cpu_ms("postgres"), rd=r.cpu_ms("redis"), wk=r.cpu_ms("wrk"), oth=r.others_pct,
        spread=r.spread,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk run (10)")
    ap.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per server (2)")
    ap.add_argument("--rounds", type=int, default=1, help="bare, app, app, bare blocks (1)")
    ap.add_argument("--connections", type=int, default=16, help="wrk connections (16)")
    ap.add_argument("--threads", type=int, default=2, help="wrk threads (2)")
    ap.add_argument(
        "--worker-class", default=PRODUCTION_WORKER,
        help=f"gunicorn -k for both servers ({PRODUCTION_WORKER}, as bot.gunicorn_conf; "
        "gevent for gunicorn's own gevent worker; or gthread)",
    )  # fmt: skip
    ap.add_argument(
        "--server-threads", type=int, default=4,
        help="gunicorn --threads per worker with -k gthread (4, as bot.gunicorn_conf)",
    )  # fmt: skip
    ap.add_argument("--redis-db", type=int, default=13, help="Redis DB number, flushed (13)")
    ap.add_argument(
        "--indent", type=int, default=None, help="pretty-print the body (GitHub sends compact)"
    )
    ap.add_argument(
        "--drain-stall", type=float, default=120.0,
        help="give up draining after this many seconds without progress (120)",
    )  # fmt: skip
    ap.add_argument("--logs", type=Path, help="copy the gunicorn and worker logs to this folder")
    args = ap.parse_args(argv)

    wrk = shutil.which("wrk")
    if wrk is None:
        print(
            "wrk is not on PATH. Install it (Debian/Ubuntu: apt-get install -y wrk) "
            "and run this again.",
            file=sys.stderr,
        )
        return 2

    import redis
    from huey import PriorityRedisHuey

    body = payload_body(args.indent)
    signature = sign(body, WEBHOOK_SECRET)
    kind = "compact JSON, as GitHub delivers it" if args.indent is None else f"indent={args.indent}"
    print(f"machine: {versions()}")
    print(f"date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; code: {code_version()}")
    print(
        f"payload: GitHub's pull_request.synchronize example, {len(body):,} bytes "
        f"({len(body) / 1000:.1f} KB, {kind}, not padded); signed {signature[:19]}…"
    )
    print(
        f"load: wrk -t{args.threads} -c{args.connections} -d{args.duration}s, a unique "
        f"X-GitHub-Delivery per request, against gunicorn -c python:bot.gunicorn_conf -w 2 "
        f"{' '.join(server_flags(args))}; "
        f"{args.rounds} × (bare, app, app, bare) after {args.warmup} s of warm-up each"
    )

    redis_url = f"redis://127.0.0.1:6379/{args.redis_db}"
    redis.Redis.from_url(redis_url).flushdb()
    runs: list[WrkResult] = []
    warm: list[WrkResult] = []
    stopped: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="webhook-ack-") as tmp_s, database() as db_url:
        tmp = Path(tmp_s)
        body_path = tmp / "body.json"
        body_path.write_bytes(body)
        env = {
            **os.environ,
            "APP_ID": "424242",
            "PRIVATE_KEY": private_key_pem(),
            "WEBHOOK_SECRET": WEBHOOK_SECRET,
            "RSI_INTAKE_SECRET": "webhook-ack-bench-intake-secret",
            "RSI_RUNNER_REPO": "openrsi-bot/rsi-runners",
            "DATABASE_URL": db_url,
            "REDIS_URL": redis_url,
            "ARTIFACT_STORE": str(tmp / "artifacts"),
            "GITHUB_API_URL": "http://127.0.0.1:9",  # unused: acknowledging calls no GitHub
            "PUBLIC_URL": "http://127.0.0.1:8000",
        }
        subprocess.run(
            [str(BIN / "rsi-bot"), "db", "upgrade"], env=env, cwd=tmp, check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip

        ports = {"bare": free_port(), "app": free_port()}
        servers = {
            "bare": gunicorn(
                "bare", "webhook_ack:bare_app()", ports["bare"], env, tmp, server_flags(args)
            ),
            "app": gunicorn(
                "app", "bot.web.app:create_app()", ports["app"], env, tmp, server_flags(args)
            ),
        }
        try:
            for name, proc in servers.items():
                wait_ready(proc, f"http://127.0.0.1:{ports[name]}/healthz")

            def load(name: str, seconds: int) -> WrkResult:
                url = f"http://127.0.0.1:{ports[name]}/webhooks/github"
                return run_wrk(wrk, servers[name], url, body_path, signature, args, seconds)

            print()
            print(
                "                                                       "
                "|   CPU ms per response        | others'| connections"
            )
            print(
                "run  server  req/s  p50 ms  p90 ms  p99 ms  max ms  fail "
                "| server     pg  redis    wrk |   CPU  | per worker"
            )
            for name in ("bare", "app"):
                warm.append(load(name, args.warmup))
                print(row("w", warm[-1]))
            for i in range(args.rounds):
                for j, name in enumerate(("bare", "app", "app", "bare"), 1):
                    runs.append(load(name, args.duration))
                    print(row(str(4 * i + j), runs[-1]))
        finally:
            for name, proc in servers.items():
                stopped[name] = proc.stop(signal.SIGTERM)  # gunicorn: graceful shutdown

        app_runs = [r for r in (*warm, *runs) if r.server == "app"]
        sent = sum(r.sent for r in app_runs)
        acked = sum(r.acknowledged for r in app_runs)
        in_flight = sum(r.in_flight for r in app_runs)
        failed = sum(r.non2xx + r.socket_errors for r in app_runs)
        (stored,) = query(db_url, "SELECT count(*) FROM deliveries")
        huey = PriorityRedisHuey("rsi-bot", url=redis_url)
        jobs, queued = queued_deliveries(huey)

        worker = Proc("worker", [str(BIN / "rsi-bot"), "worker"], env, tmp)
        try:
            drain_s = drain(db_url, worker, args.drain_stall)
            deadline = time.monotonic() + 30
            while huey.pending_count() and time.monotonic() < deadline:
                time.sleep(0.2)  # leave no job behind (e.g. one the reconciler re-queued)
            leftover = huey.pending_count()
        finally:
            stopped["worker"] = worker.stop(signal.SIGINT)  # huey: graceful shutdown
        executed = executions(worker.log_path)
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
            for log in tmp.glob("*.log"):
                shutil.copy(log, args.logs / log.name)
        total, done, once, max_attempts, errors, intact = query(
            db_url,
            "SELECT count(*), count(*) FILTER (WHERE status = 'done'),"
            " count(*) FILTER (WHERE attempts = 1), coalesce(max(attempts), 0),"
            " count(*) FILTER (WHERE error IS NOT NULL),"
            " count(*) FILTER (WHERE event = 'pull_request' AND action = 'synchronize'"
            f" AND octet_length(payload) = {len(body)})"
            " FROM deliveries",
        )

    bare = [r for r in runs if r.server == "bare"]
    app = [r for r in runs if r.server == "app"]

    def m(rs: list[WrkResult], what: str) -> float:
        if what in ("server", "postgres", "redis", "wrk"):
            return med([r.cpu_ms(what) for r in rs])
        return med([float(getattr(r, what)) for r in rs])

    b_rps, a_rps = m(bare, "rps"), m(app, "rps")
    b_p50, a_p50 = m(bare, "p50_ms"), m(app, "p50_ms")
    b_p99, a_p99 = m(bare, "p99_ms"), m(app, "p99_ms")
    ratio = a_rps / b_rps
    lost = max(0, acked - stored)
    n = len(app)
    print()
    print(f"medians of {n} runs   req/s  p50 ms  p99 ms | CPU ms/response: server     pg  redis")
    for label, rs in (("bare Flask       ", bare), ("rsi-bot webhook  ", app)):
        print(
            f"{label}  {m(rs, 'rps'):>7.0f} {m(rs, 'p50_ms'):>7.2f} {m(rs, 'p99_ms'):>7.2f} | "
            f"                 {m(rs, 'server'):>6.3f} {m(rs, 'postgres'):>6.3f} "
            f"{m(rs, 'redis'):>6.3f}"
        )
    print(
        f"app/bare            {ratio:>6.2f}× {a_p50 / b_p50:>6.2f}× {a_p99 / b_p99:>6.2f}× "
        f"({a_p50 - b_p50:+.2f} ms p50, {a_p99 - b_p99:+.2f} ms p99)"
    )
    print()
    print(
        f"deliveries: {sent:,} sent to the app (warm-up included), {acked:,} acknowledged "
        f"(2xx), {failed:,} failed (non-2xx or socket errors), {in_flight} in flight when wrk "
        f"stopped (no reply seen)"
    )
    print(
        f"  stored {stored:,} (= acknowledged + {stored - acked} of those in flight); "
        f"{queued:,} queued in {jobs:,} jobs before the worker started; lost {lost}"
    )
    print(
        f"  worker drained them in {drain_s:.1f} s: {done:,} done, {once:,} with attempts == 1 "
        f"(max {max_attempts}), {errors} with an error, {intact:,} intact payloads, "
        f"{leftover} jobs left in the queue"
    )
    if executed is None:
        print("  the worker did not log its executions (LOG_LEVEL above INFO?)")
    else:
        print(
            f"  worker log: {executed.processed:,} deliveries processed, each at most "
            f"{executed.most} time(s); {executed.jobs:,} process_delivery jobs "
            f"({executed.jobs - executed.processed:+,}: re-queued by the reconciler while the "
            f"first was still waiting, found the delivery done and did nothing); reconcile ran "
            f"{executed.reconciles} times"
        )
    print(
        "  stopped: "
        + ", ".join(f"{k} exit {v}" for k, v in stopped.items())
        + "; database dropped"
    )

    checks = {
        f"throughput {ratio:.2f}× bare ≥ {TARGET_THROUGHPUT}×": ratio >= TARGET_THROUGHPUT,
        f"p99 {a_p99:.1f} ms ≤ {TARGET_P99_MS:.0f} ms": a_p99 <= TARGET_P99_MS,
        f"{lost} lost, {failed} failed": lost == 0 and failed == 0 and acked <= stored <= sent,
        "every delivery stored, queued, done, run once": (
            stored == total == queued == done == once == intact
            and errors == 0
            and not leftover
            and (executed is None or (executed.processed == stored and executed.most == 1))
        ),
    }
    ok = all(checks.values())
    print()
    print(
        ("PASS: " if ok else "FAIL: ")
        + "; ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in checks.items())
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
