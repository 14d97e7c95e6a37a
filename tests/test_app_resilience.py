"""GitHub outages and rate limits, older GitHub Enterprise, lost jobs and runners that
never report back."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from bot import messages, runtime, services
from bot.db import upgrade
from bot.models import Verification
from bot.verification import steps
from bot.web.app import create_app
from evidence.render import COMMENT_MARKER
from evidence.synth import BASE_SHA, HEAD_SHA
from tests import appkit
from tests.standin import GitHubStandIn, serve
from tests.test_app_flow import deliver, finish_run, promote, verification


def _standin(**options: object) -> GitHubStandIn:
    gh = GitHubStandIn(app_id=appkit.APP_ID, **options)  # type: ignore[arg-type]
    gh.add_repo(appkit.UPSTREAM, default_sha=BASE_SHA)
    gh.add_repo(appkit.FORK, fork=True)
    gh.add_branch(appkit.FORK, appkit.HEAD_REF, HEAD_SHA)
    gh.add_repo(appkit.RUNNER)
    gh.add_workflow(appkit.RUNNER, "rsi-verify.yml")
    return gh


@pytest.fixture
def legacy() -> Iterator[GitHubStandIn]:
    with serve(app_id=appkit.APP_ID, legacy_dispatch=True, enterprise=True) as gh:
        for repo in (appkit.UPSTREAM, appkit.FORK, appkit.RUNNER):
            gh.add_repo(repo, default_sha=BASE_SHA if repo == appkit.UPSTREAM else None)
        gh.add_branch(appkit.FORK, appkit.HEAD_REF, HEAD_SHA)
        gh.add_workflow(appkit.RUNNER, "rsi-verify.yml")
        yield gh


def _app(tmp_path: Path, gh: GitHubStandIn, **overrides: object) -> Flask:
    settings = appkit.settings(tmp_path, gh.url, **overrides)
    upgrade(settings.DATABASE_URL)
    return create_app(svc=runtime.build(settings, immediate=True))


def test_github_502_then_success_is_retried(tmp_path: Path, github: GitHubStandIn) -> None:
    github.fail_next("POST", r"/check-runs$", status=502)
    github.fail_next("POST", r"/pulls$", status=503, times=2)
    app = _app(tmp_path, github)
    vid = promote(app.test_client())["verification_id"]
    assert verification(app, vid).state == "dispatched"
    assert github.pending_faults() == []
    assert github.count("POST", r"/pulls$") == 3  # two 503s, then the PR


def test_secondary_rate_limit_is_honoured(tmp_path: Path, github: GitHubStandIn) -> None:
    github.fail_next(
        "POST",
        r"/dispatches$",
        status=403,
        headers={"retry-after": "1"},
        body={
            "message": "You have exceeded a secondary rate limit. Please "
            "wait a few minutes before you try again."
        },
    )
    app = _app(tmp_path, github)
    vid = promote(app.test_client())["verification_id"]
    assert verification(app, vid).state == "dispatched"
    tries = github.matching("POST", r"/dispatches$")
    assert len(tries) == 2
    assert tries[1].at - tries[0].at >= 1.0


def test_an_outage_shorter_than_the_attempts_is_ridden_out(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    """PyGithub's own retries (4 tries) are spent; the effect's next attempt succeeds,
    and nothing was half-done on GitHub that a retry would duplicate."""
    github.fail_next("POST", r"/pulls$", status=502, times=4)
    app = _app(tmp_path, github, GITHUB_RETRY_BACKOFF_S=0.01)
    vid = promote(app.test_client())["verification_id"]
    v = verification(app, vid)
    assert v.state == "dispatched"
    assert v.lease_until is None
    assert github.count("POST", r"/pulls$") == 5
    assert len(github.pulls[appkit.UPSTREAM.lower()]) == 1


def test_older_enterprise_without_run_details(tmp_path: Path, legacy: GitHubStandIn) -> None:
    """GHES before `return_run_details`: the dispatch answers 204 and the run is matched
    by its run-name — from the `requested` event, or by listing runs."""
    assert legacy.url.endswith("/api/v3")
    app = _app(tmp_path, legacy)
    client = app.test_client()
    vid = promote(client)["verification_id"]
    run_id = verification(app, vid).jobs[0].workflow_run_id
    assert run_id is not None  # found by listing the runs right after the 204
    assert legacy.count("GET", r"/actions/runs$") == 1
    finish_run(app, client, legacy, tmp_path, vid, "w-1")
    assert verification(app, vid).state == "published"


def test_requested_event_maps_the_run_by_run_name(tmp_path: Path, legacy: GitHubStandIn) -> None:
    app = _app(tmp_path, legacy)
    client = app.test_client()
    vid = promote(client)["verification_id"]
    [run] = [r for r in legacy.runs.values() if vid in r.display_title]
    assert (
        deliver(
            client, "workflow_run", legacy.run_event(appkit.RUNNER, run.id, "requested"), "rq-1"
        )
        == 202
    )
    assert verification(app, vid).jobs[0].workflow_run_id == run.id


def test_a_lost_drain_job_is_requeued_once(tmp_path: Path, github: GitHubStandIn) -> None:
    """Huey does not acknowledge: a worker killed while carrying out the effects loses
    the job. The reconciler finds effects due and nobody on them (the lease expired) and
    finishes them — once."""
    app = _app(tmp_path, github, RSI_LEASE_S=5)
    client = app.test_client()
    rt: services.Services = app.extensions["rsi"]
    vid = promote(client)["verification_id"]
    # The worker took the job (lease set) and died before doing anything.
    real_drain = rt.queue.drain
    rt.queue.drain = lambda _vid: None  # type: ignore[method-assign]
    finish_run(app, client, github, tmp_path, vid, "w-1")
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    with rt.db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        assert v.state == "running"
        v.lease_until = long_ago
    assert [kind for _, kind, _ in steps.stuck_effects(rt)] == ["Ingest"]
    rt.queue.drain = real_drain  # type: ignore[method-assign]  # a fresh worker process
    rt.queue.reconcile()
    assert verification(app, vid).state == "published"
    assert steps.stuck_effects(rt) == []
    rt.queue.reconcile()
    v = verification(app, vid)
    assert v.state == "published"
    comments = [
        c for c in github.comments_on(appkit.UPSTREAM, v.pr_number or 0) if COMMENT_MARKER in c.body
    ]
    assert len(comments) == 1
    done = [
        u for u in github.check_run_updates(v.check_run_id or 0) if u.get("status") == "completed"
    ]
    assert len(done) == 1


def test_runner_that_never_reports_back_times_out(tmp_path: Path, github: GitHubStandIn) -> None:
    app = _app(tmp_path, github, RSI_RUN_TIMEOUT_S=60)
    rt: services.Services = app.extensions["rsi"]
    vid = promote(app.test_client())["verification_id"]
    with rt.db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        for job in v.jobs:
            job.dispatched_at = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=2)
    rt.queue.reconcile()
    v = verification(app, vid)
    assert v.state == "timed-out"
    assert "did not report back within 1 minutes" in messages.end_reason(v)
    assert github.count("POST", r"/actions/runs/\d+/cancel$") == 1
    final = github.check_run_updates(v.check_run_id or 0)[-1]
    assert final["conclusion"] == "neutral"
    assert "/rsi reverify" in final["output"]["summary"]


def test_a_delivery_left_queued_is_processed_by_the_reconciler(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    from bot.models import Delivery
    from tests.standin import example

    app = _app(tmp_path, github)
    rt: services.Services = app.extensions["rsi"]
    rt.enqueue_delivery = lambda _d: None  # type: ignore[method-assign]  # the queue was down
    client: FlaskClient = app.test_client()
    assert deliver(client, "installation", example("installation", "created"), "lost-1") == 202
    with rt.db.session() as s:
        d = s.get(Delivery, "lost-1")
        assert d is not None
        assert d.status == "queued"
        d.received_at = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    rt.queue.reconcile()
    with rt.db.session() as s:
        d = s.get(Delivery, "lost-1")
        assert d is not None
        assert d.status == "done"


def test_a_requeued_delivery_runs_its_handlers_once(tmp_path: Path, github: GitHubStandIn) -> None:
    """The reconciler may re-queue a delivery whose job is still waiting in a backlog; the
    second copy finds it claimed or done and does nothing."""
    from bot.models import Delivery
    from tests.standin import example

    app = _app(tmp_path, github)
    rt: services.Services = app.extensions["rsi"]
    client: FlaskClient = app.test_client()
    assert deliver(client, "installation", example("installation", "created"), "twice") == 202
    rt.queue.process_delivery("twice")
    with rt.db.session() as s:
        d = s.get(Delivery, "twice")
        assert d is not None
        assert (d.status, d.attempts) == ("done", 1)


def test_a_backlog_delays_requeueing_a_queued_delivery(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    """With jobs waiting (a burst, a worker restart), a delivery still `queued` after a
    minute is most likely behind them: the reconciler leaves it until the lease is over
    instead of queuing it a second time (which made a 55,000-delivery burst 14,664 jobs
    longer in bench/webhook_ack.py)."""
    from bot.models import Delivery

    settings = appkit.settings(tmp_path, github.url, RSI_LEASE_S=600)
    upgrade(settings.DATABASE_URL)
    rt = runtime.build(settings)  # a real (SQLite) queue, no consumer
    try:
        for i in range(3):
            assert rt.db.store_delivery(f"wait-{i}", "github", "installation", "{}")
        with rt.db.session() as s:
            for i, minutes in enumerate((5, 11, 0)):
                d = s.get(Delivery, f"wait-{i}")
                assert d is not None
                d.received_at = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=minutes)
        rt.queue.process_delivery("unrelated")  # the backlog: one job waiting
        rt.queue.reconcile()
        waiting = [rt.huey.serializer.deserialize(x) for x in rt.huey.storage.enqueued_items()]
        assert sorted(m.args[0] for m in waiting) == ["unrelated", "wait-1"]

        rt.huey.storage.flush_queue()  # no backlog: a minute is enough
        rt.queue.reconcile()
        waiting = [rt.huey.serializer.deserialize(x) for x in rt.huey.storage.enqueued_items()]
        assert sorted(m.args[0] for m in waiting) == ["wait-0", "wait-1"]
    finally:
        rt.db.dispose()
