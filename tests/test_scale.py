"""Two app processes and two workers on one PostgreSQL + Redis take the same stream of
deliveries (redeliveries to either instance, duplicates at once): every verification is
published exactly once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import requests
from sqlalchemy import func, select

from bot.db import Database, upgrade
from bot.models import Effect, Verification
from evidence.render import COMMENT_MARKER
from tests import appkit
from tests.services import postgres_database, redis_db
from tests.standin import GitHubStandIn

BIN = Path(sys.executable).parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(github: GitHubStandIn, db_url: str, redis_url: str, store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(
        {
            "APP_ID": str(appkit.APP_ID),
            "PRIVATE_KEY": appkit.private_key_pem(),
            "WEBHOOK_SECRET": appkit.WEBHOOK_SECRET,
            "RSI_INTAKE_SECRET": appkit.INTAKE_SECRET,
            "RSI_RUNNER_REPO": appkit.RUNNER,
            "GITHUB_API_URL": github.url,
            "GITHUB_WEB_URL": "https://github.com",
            "PUBLIC_URL": "https://rsi.example.com",
            "DATABASE_URL": db_url,
            "REDIS_URL": redis_url,
            "ARTIFACT_STORE": str(store),
            "GITHUB_READ_INTERVAL_S": "0",
            "GITHUB_WRITE_INTERVAL_S": "0",
            "RSI_TRUSTED_PUSHERS": "openrsi-bot",
        }
    )
    return env


@pytest.fixture
def cluster(github: GitHubStandIn, tmp_path: Path) -> Iterator[tuple[list[str], str]]:
    with postgres_database() as db_url, redis_db() as redis_url:
        upgrade(db_url)
        env = _env(github, db_url, redis_url, tmp_path / "store")
        procs: list[subprocess.Popen[bytes]] = []
        urls = []
        log = (tmp_path / "cluster.log").open("wb")
        try:
            for _ in range(2):
                port = _port()
                procs.append(
                    subprocess.Popen(
                        [
                            str(BIN / "gunicorn"),
                            "-c",  # the Procfile's settings: gevent workers
                            "python:bot.gunicorn_conf",
                            "-w",
                            "1",
                            "-b",
                            f"127.0.0.1:{port}",
                            "bot.web.app:create_app()",
                        ],
                        env=env,
                        cwd=tmp_path,
                        stdout=log,
                        stderr=log,
                    )
                )
                urls.append(f"http://127.0.0.1:{port}")
            for _ in range(2):
                procs.append(
                    subprocess.Popen(
                        [str(BIN / "rsi-bot"), "worker", "--workers", "2"],
                        env=env,
                        cwd=tmp_path,
                        stdout=log,
                        stderr=log,
                    )
                )
            for url in urls:
                deadline = time.monotonic() + 30
                while True:
                    try:
                        if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                            break
                    except requests.RequestException:
                        pass
                    assert time.monotonic() < deadline, (tmp_path / "cluster.log").read_text()
                    time.sleep(0.2)
            yield urls, db_url
        finally:
            for p in procs:
                p.send_signal(signal.SIGINT if p.args[0].endswith("rsi-bot") else signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            log.close()


def _state(db: Database, vid: str) -> Verification:
    with db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        _ = list(v.jobs)
        return v


def _wait(db: Database, vid: str, state: str, timeout: float = 60) -> Verification:
    """Until the verification is in `state` with every effect of it carried out."""
    deadline = time.monotonic() + timeout
    while True:
        v = _state(db, vid)
        with db.session() as s:
            pending = s.scalar(
                select(func.count())
                .select_from(Effect)
                .where(Effect.verification_id == vid, Effect.done_at.is_(None))
            )
        if v.state == state and not pending:
            return v
        assert time.monotonic() < deadline, f"{vid} is {v.state} ({v.reason})"
        time.sleep(0.2)


@pytest.mark.long
def test_two_apps_two_workers_publish_each_verification_once(
    cluster: tuple[list[str], str], github: GitHubStandIn, tmp_path: Path
) -> None:
    urls, db_url = cluster
    db = Database(db_url)
    vids = []
    for i in range(len(urls)):  # two candidates, each sent to both instances
        ref = f"rsi/change-{i}"
        github.add_branch(appkit.FORK, ref, appkit.candidate()["head"]["sha"])
        body = appkit.dumps(
            appkit.candidate(
                candidate_id=f"c-{i}",
                head={"repo": appkit.FORK, "ref": ref, "sha": appkit.candidate()["head"]["sha"]},
            )
        )
        headers = appkit.intake_headers(body, f"intake-{i}")
        answers = {
            requests.post(f"{u}/api/v1/candidates", data=body, headers=headers, timeout=10).json()[
                "verification_id"
            ]
            for u in urls
        }
        assert len(answers) == 1  # the same intake delivery to both instances: one answer
        vids.append(answers.pop())
    for vid in vids:
        v = _wait(db, vid, "dispatched")
        run_id = v.jobs[0].workflow_run_id
        assert run_id is not None
        github.add_artifact(
            appkit.RUNNER, run_id, f"rsi-bundle-{vid}-h200", appkit.bundle_zip(tmp_path, vid)
        )
        payload = orjson.dumps(github.complete_run(appkit.RUNNER, run_id))
        # GitHub redelivers to whichever instance; a second event for the same completion
        # (another delivery id) races the first.
        for delivery, url in (
            (f"done-{vid}", urls[0]),
            (f"done-{vid}", urls[1]),
            (f"again-{vid}", urls[1]),
        ):
            headers = appkit.webhook_headers(payload, "workflow_run", delivery)
            assert (
                requests.post(
                    f"{url}/webhooks/github", data=payload, headers=headers, timeout=10
                ).status_code
                == 202
            )
    for vid in vids:
        v = _wait(db, vid, "published")
        ours = [
            c
            for c in github.comments_on(appkit.UPSTREAM, v.pr_number or 0)
            if COMMENT_MARKER in c.body
        ]
        assert len(ours) == 1
        done = [
            u
            for u in github.check_run_updates(v.check_run_id or 0)
            if u.get("status") == "completed"
        ]
        assert len(done) == 1
    db.dispose()
