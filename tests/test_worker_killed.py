"""A worker killed in the middle of carrying out a verification's effects (taking in the
bundle, building and publishing the evidence): another finishes them, once."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from bot import services
from bot.models import Verification
from bot.verification import steps
from evidence.render import COMMENT_MARKER
from tests import appkit
from tests.standin import GitHubStandIn
from tests.test_app_flow import finish_run, promote, verification

RSI = str(Path(sys.executable).with_name("rsi-bot"))


def _env(rt: services.Services) -> dict[str, str]:
    s = rt.settings
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(
        {
            "APP_ID": str(s.APP_ID),
            "PRIVATE_KEY": s.private_key(),
            "WEBHOOK_SECRET": s.WEBHOOK_SECRET.get_secret_value(),
            "RSI_INTAKE_SECRET": s.RSI_INTAKE_SECRET.get_secret_value(),
            "RSI_RUNNER_REPO": s.RSI_RUNNER_REPO,
            "GITHUB_API_URL": s.GITHUB_API_URL,
            "GITHUB_WEB_URL": "https://github.com",
            "PUBLIC_URL": s.PUBLIC_URL,
            "DATABASE_URL": s.DATABASE_URL,
            "QUEUE_PATH": str(s.QUEUE_PATH),
            "ARTIFACT_STORE": s.ARTIFACT_STORE,
            "RSI_LEASE_S": "5",
            "GITHUB_READ_INTERVAL_S": "0",
            "GITHUB_WRITE_INTERVAL_S": "0",
            "GITHUB_RETRY_BACKOFF_S": "0",
        }
    )
    return env


def _state(app: Flask, vid: str) -> Verification:
    return verification(app, vid)


@pytest.mark.long
def test_worker_killed_mid_publish(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    rt: services.Services = app.extensions["rsi"]
    vid = promote(client)["verification_id"]
    real = rt.queue.drain
    rt.queue.drain = lambda _vid: None  # type: ignore[method-assign]  # left for the worker
    finish_run(app, client, github, tmp_path, vid, "w-1")
    rt.queue.drain = real  # type: ignore[method-assign]
    assert _state(app, vid).state == "running"
    assert [kind for _, kind, _ in steps.stuck_effects(rt)] == ["Ingest"]
    env = _env(rt)
    log = (tmp_path / "worker.log").open("w")
    # The job goes on the durable (SQLite) queue a real worker reads.
    subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "from bot.config import load_settings; from bot import runtime; "
                f"runtime.build(load_settings()).queue.drain({vid!r})"
            ),
        ],
        env=env,
        check=True,
        cwd=tmp_path,
    )
    worker = subprocess.Popen(
        [RSI, "worker", "--workers", "1"],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while _state(app, vid).lease_until is None:  # the worker has taken the job
            assert _state(app, vid).state != "published", "published before the kill"
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
            time.sleep(0.01)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    v = _state(app, vid)
    assert v.state != "published", "the job finished before the kill; the test proves nothing"
    assert not [
        c for c in github.comments_on(appkit.UPSTREAM, v.pr_number or 0) if COMMENT_MARKER in c.body
    ]

    # Past the lease, the reconciler re-queues the step and a new worker finishes it.
    with rt.db.session() as s:
        row = s.get(Verification, vid)
        assert row is not None
        row.lease_until = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    subprocess.run([RSI, "reconcile"], env=env, check=True, cwd=tmp_path, capture_output=True)
    worker = subprocess.Popen(
        [RSI, "worker", "--workers", "1"],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while _state(app, vid).state != "published":
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGINT)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()
    v = _state(app, vid)
    ours = [
        c for c in github.comments_on(appkit.UPSTREAM, v.pr_number or 0) if COMMENT_MARKER in c.body
    ]
    assert len(ours) == 1
    done = [
        u for u in github.check_run_updates(v.check_run_id or 0) if u.get("status") == "completed"
    ]
    assert len(done) == 1
