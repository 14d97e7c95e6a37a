"""The core loop on the deployed shape: PostgreSQL, a Redis queue with a real consumer,
and artifacts on S3 (moto's server over HTTP)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
from flask import Flask
from flask.testing import FlaskClient

from bot import runtime, services
from bot.db import upgrade
from bot.models import Verification
from bot.verification import steps
from bot.web.app import create_app
from evidence.render import COMMENT_MARKER
from tests import appkit
from tests.s3server import s3_endpoint  # noqa: F401  (fixture)
from tests.services import postgres_database, redis_db
from tests.standin import GitHubStandIn
from tests.test_app_flow import deliver, promote


def wait_for(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


@pytest.fixture
def deployed(
    tmp_path: Path,
    github: GitHubStandIn,
    s3_endpoint: str,  # noqa: F811
) -> Iterator[Flask]:
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket="rsi-artifacts")
    with postgres_database() as db_url, redis_db() as redis_url:
        settings = appkit.settings(
            tmp_path,
            github.url,
            DATABASE_URL=db_url,
            REDIS_URL=redis_url,
            AWS_ENDPOINT_URL=s3_endpoint,
            ARTIFACT_STORE="s3://rsi-artifacts/evidence",
        )
        upgrade(settings.DATABASE_URL)
        rt = runtime.build(settings)
        rt.huey.storage.read_timeout = 0.05  # a stop is seen at once, not after a second
        saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        consumer = rt.huey.create_consumer(
            workers=2, worker_type="thread", periodic=False, check_worker_health=False
        )
        consumer.start()
        try:
            yield create_app(svc=rt)
        finally:
            consumer.stop(graceful=True)
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            rt.db.dispose()
            rt.huey.storage.conn.close()


def state(app: Flask, vid: str) -> Verification:
    rt: services.Services = app.extensions["rsi"]
    with rt.db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        _ = list(v.jobs)
        return v


def test_core_loop_on_postgres_redis_and_s3(
    deployed: Flask,
    github: GitHubStandIn,
    tmp_path: Path,
    s3_endpoint: str,  # noqa: F811
) -> None:
    client: FlaskClient = deployed.test_client()
    vid = promote(client)["verification_id"]
    wait_for(lambda: state(deployed, vid).state == "dispatched")
    run_id = state(deployed, vid).jobs[0].workflow_run_id
    assert run_id is not None
    github.add_artifact(
        appkit.RUNNER, run_id, f"rsi-bundle-{vid}-h200", appkit.bundle_zip(tmp_path, vid)
    )
    assert (
        deliver(client, "workflow_run", github.complete_run(appkit.RUNNER, run_id), "done-1") == 202
    )
    # A redelivery of the same completion while the first is being processed.
    assert (
        deliver(client, "workflow_run", github.complete_run(appkit.RUNNER, run_id), "done-1") == 202
    )
    rt: services.Services = deployed.extensions["rsi"]
    wait_for(
        lambda: state(deployed, vid).state == "published" and not steps.stuck_effects(rt),
        timeout=60,
    )
    v = state(deployed, vid)
    assert v.verdict == "improved"
    assert v.pr_number is not None
    comments = [
        c for c in github.comments_on(appkit.UPSTREAM, v.pr_number) if COMMENT_MARKER in c.body
    ]
    assert len(comments) == 1
    # Bundle and report are on S3 under the configured prefix.
    keys = {
        o["Key"]
        for o in boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(
            Bucket="rsi-artifacts", Prefix="evidence/"
        )["Contents"]
    }
    assert f"evidence/bundles/{vid}/h200.zip" in keys
    assert f"evidence/reports/{vid}/report.html" in keys
    page = client.get(rt.report_url(vid).removeprefix("https://rsi.example.com"))
    assert page.status_code == 200
    completions = [
        u for u in github.check_run_updates(v.check_run_id or 0) if u.get("status") == "completed"
    ]
    assert len(completions) == 1
