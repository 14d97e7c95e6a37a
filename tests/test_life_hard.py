"""A verification's life where it is hardest, in both shapes of the App (embedded
default; PostgreSQL + Redis with a real consumer): two GPUs at one instant, one GPU
failing, later failures that must not erase evidence, steps that must end, runs that
must be told apart."""

from __future__ import annotations

import datetime as dt
import errno
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot import messages, observability
from bot.models import Delivery, Effect, RunnerJob, Verification
from bot.verification import effects as E
from evidence.render import COMMENT_MARKER
from evidence.synth import HEAD_SHA
from tests import appkit
from tests.standin import GitHubStandIn
from tests.test_reviews import command, push
from tests.worlds import SHAPES, World, world

BOTH = ["H100", "H200"]
NEW_SHA = "3" * 40


@pytest.fixture(params=SHAPES)
def w(request: pytest.FixtureRequest, tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world(request.param, tmp_path, github) as x:
        yield x


def evidence_comments(w: World, number: int) -> list[str]:
    return [
        c.body for c in w.github.comments_on(appkit.UPSTREAM, number) if COMMENT_MARKER in c.body
    ]


def completions(w: World, v: Verification) -> list[dict[str, Any]]:
    return [
        u for u in w.github.check_run_updates(v.check_run_id or 0) if u.get("status") == "completed"
    ]


# ----------------------------------------------------------------------- 2a


def test_two_gpus_finishing_at_the_same_instant_publish_once_with_both(w: World) -> None:
    vid = w.promote(gpus=BOTH)
    assert sorted(d["inputs"]["gpu"] for d in w.github.dispatches) == ["h100", "h200"]
    for gpu in BOTH:
        w.give_bundle(vid, gpu)
    w.at_once(*(lambda g=gpu: w.complete(vid, g) for gpu in BOTH))  # type: ignore[misc]
    w.settle()
    v = w.verification(vid)
    assert v.state == "published", w.reason(vid)
    assert sorted(v.headline or {}) == BOTH
    assert [j.state for j in v.jobs] == ["kept", "kept"]
    [comment] = evidence_comments(w, v.pr_number or 0)
    assert "H100" in comment
    assert "H200" in comment
    assert len(completions(w, v)) == 1
    assert w.github.count("POST", r"/issues/\d+/comments$") == 1
    w.github.assert_clean()


# ----------------------------------------------------------------------- 2b


@pytest.mark.parametrize("failure", ["failure", "cancelled", "no-report"])
def test_one_gpu_failing_still_publishes_the_other(w: World, failure: str) -> None:
    vid = w.promote(gpus=BOTH)
    w.finish(vid, "H200")
    v = w.verification(vid)
    assert v.state == "dispatched"  # H100 still going: nothing published yet
    if failure == "no-report":
        with w.svc.db.session() as s:
            job = s.query(RunnerJob).filter_by(verification_id=vid, gpu="H100").one()
            job.dispatched_at = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
        w.reconcile()
    else:
        w.complete(vid, "H100", failure)
        w.settle()
    v = w.verification(vid)
    assert v.state == "published", w.reason(vid)
    assert list(v.headline or {}) == ["H200"]
    [done] = completions(w, v)
    assert "partial: H100" in done["output"]["title"]
    # An improvement on the H200 alone is not the success asked for on both GPUs.
    assert (v.verdict, done["conclusion"]) == ("improved", "neutral")
    why = {"failure": "ended `failure`", "cancelled": "was cancelled", "no-report": "report back"}
    assert why[failure] in done["output"]["summary"]
    assert "/rsi reverify" in done["output"]["summary"]
    [comment] = evidence_comments(w, v.pr_number or 0)
    assert "**Partial results:**" in comment
    assert why[failure] in comment
    assert "throughput" in comment  # the H200 evidence itself
    w.github.assert_clean()


# ----------------------------------------------------------------------- 2c


def _published_then(w: World) -> tuple[int, str]:
    vid = w.promote()
    w.finish(vid)
    v = w.verification(vid)
    assert v.state == "published"
    [comment] = evidence_comments(w, v.pr_number or 0)
    return v.pr_number or 0, comment


def _evidence_part(comment: str) -> str:
    return comment[comment.index("## Performance evidence") :]


@pytest.mark.parametrize("later", ["failed-run", "cancel", "closed", "superseded"])
def test_nothing_erases_published_evidence(w: World, later: str) -> None:
    number, before = _published_then(w)
    good_rows = [line for line in before.splitlines() if "improved" in line and "`" in line]
    assert good_rows
    if later == "closed":
        # A verification to cancel: a trusted push first, then the PR is closed.
        assert w.deliver("pull_request", push(w.github, number, NEW_SHA, "openrsi-bot"), "p") == 202
        w.settle()
        payload = push(w.github, number, NEW_SHA, "openrsi-bot")
        payload["action"] = "closed"
        payload["pull_request"]["state"] = "closed"
        w.github.pulls[appkit.UPSTREAM.lower()][number].state = "closed"
        assert w.deliver("pull_request", payload, "close") == 202
    else:
        assert w.deliver("pull_request", push(w.github, number, NEW_SHA, "openrsi-bot"), "p") == 202
        w.settle()
        second = w.latest(number)
        assert second.head_sha == NEW_SHA
        if later == "failed-run":
            w.complete(second.id, "H200", "failure")
        elif later == "cancel":
            w.github.set_permission(appkit.UPSTREAM, "mia", "write")
            w.deliver("issue_comment", command(w.github, number, "/rsi cancel", "mia"), "c")
        else:
            later_sha = "4" * 40
            w.deliver("pull_request", push(w.github, number, later_sha, "openrsi-bot"), "p2")
    w.settle()
    [after] = evidence_comments(w, number)
    assert _evidence_part(before) in after, "the published evidence was taken away"
    for row in good_rows:
        assert row.replace("**", "") in after.replace("**", "")
    if later != "superseded":
        assert f"`{NEW_SHA[:10]}`" in after
        word = {"failed-run": "failed", "cancel": "cancelled", "closed": "cancelled"}[later]
        assert f"**Latest: `{NEW_SHA[:10]}` {word}**" in after
    assert len(after) <= 65_536
    w.github.assert_clean()


def test_one_ledger_row_per_commit_and_old_rows_fold() -> None:
    rows = [
        messages.LedgerRow(sha=f"{i:010x}" + "0" * 30, when="2026-12-01 10:00", trigger=f"push {i}")
        for i in range(400)
    ]
    measured = {"delta_pct": 1.0, "ci_low_pct": 0.5, "ci_high_pct": 1.5, "verdict": "improved"}
    for r in rows:
        r.cells = {"H100": messages.Cell(headline=measured), "H200": messages.Cell()}
    text = messages.ledger(rows, budget=8_000)
    assert len(text) <= 8_000
    assert "earlier commits not shown" in text
    assert f"`{rows[-1].sha[:10]}`" in text  # the newest rows stay
    assert f"`{rows[0].sha[:10]}`" not in text


def test_a_commit_verified_twice_has_a_ledger_row_for_each_result(w: World) -> None:
    """Measuring a commit again adds a row: the published one is never replaced."""
    number, _ = _published_then(w)
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    w.deliver("issue_comment", command(w.github, number, "/rsi reverify", "mia"), "c1")
    w.settle()
    w.finish(w.latest(number).id)
    [comment] = evidence_comments(w, number)
    ledger = comment.split("### Commits verified on this PR", 1)[1].split("\n\n", 2)[1]
    assert ledger.count(f"`{HEAD_SHA[:10]}`") == 2


# ----------------------------------------------------------------------- 2d


def _ended(w: World, vid: str) -> Verification:
    w.settle()
    v = w.verification(vid)
    assert v.state == "failed", v.state
    return v


def test_a_bundle_that_crashes_the_engine_ends_failed_and_is_kept(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*_: object, **__: object) -> None:
        raise MemoryError("the engine ran out of memory")

    monkeypatch.setattr(E, "build", crash)
    vid = w.promote()
    w.finish(vid)
    v = _ended(w, vid)
    assert "gave up after 3 attempts at `BuildEvidence`" in w.reason(vid)
    assert "MemoryError" in w.reason(vid)
    [done] = completions(w, v)
    assert "BuildEvidence" in done["output"]["summary"]
    [comment] = evidence_comments(w, v.pr_number or 0)
    assert "gave up after 3 attempts" in comment
    assert w.svc.store.exists(f"bundles/{vid}/h200.zip")


def test_a_full_artifact_store_ends_failed(w: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store refuses the bundle's copy (bundles are streamed from a file into it)."""
    refused: list[str] = []

    def full(key: str, *_: object, **__: object) -> None:
        refused.append(key)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(w.svc.store, "put_file", full)
    vid = w.promote()
    w.finish(vid)
    v = _ended(w, vid)
    assert set(refused) == {f"bundles/{vid}/h200.zip"}  # the store was asked, and refused
    assert "No space left on device" in w.reason(vid)
    assert "`Ingest`" in w.reason(vid)
    assert not w.svc.store.exists(f"bundles/{vid}/h200.zip")
    assert [j.bundle_key for j in v.jobs] == [None]
    with w.svc.db.session() as s:
        left = s.query(Effect).filter(Effect.verification_id == vid, Effect.done_at.is_(None))
        assert left.count() == 0  # nothing retries for ever


def test_github_unreachable_ends_failed_with_the_reason_recorded(w: World) -> None:
    vid = w.promote()
    w.give_bundle(vid, "H200")
    w.github.fail_next("GET", r"/artifacts", status=502, times=1000)
    w.complete(vid, "H200")
    v = _ended(w, vid)
    assert "502" in w.reason(vid) or "unreachable" in w.reason(vid)
    with w.svc.db.session() as s:
        left = s.query(Effect).filter(Effect.verification_id == vid, Effect.done_at.is_(None))
        assert left.count() == 0  # nothing retries for ever
    w.github.clear_faults()
    [done] = completions(w, v)
    assert done["conclusion"] == "neutral"


def test_failure_logs_name_the_verification_and_repository(
    w: World, caplog: pytest.LogCaptureFixture
) -> None:
    vid = w.promote()
    w.give_bundle(vid, "H200")
    w.github.fail_next("GET", r"/artifacts", status=404, times=3)
    caplog.set_level(logging.WARNING, logger="bot.verification.steps")
    w.complete(vid, "H200")
    _ended(w, vid)
    lines = [
        observability.ContextFormatter().format(r)
        for r in caplog.records
        if r.name == "bot.verification.steps"
    ]
    assert lines
    for line in lines:
        assert f"verification={vid}" in line
        assert appkit.UPSTREAM in line
        assert "Traceback" not in line


def test_an_outage_does_not_starve_other_deliveries(tmp_path: Path, github: GitHubStandIn) -> None:
    """With one verification's GitHub calls failing and being retried, an unrelated
    delivery is handled at once by the only worker thread: retries are scheduled, not
    slept in a worker."""
    from tests.standin import example

    with world("deployed", tmp_path, github, workers=1, RSI_EFFECT_BACKOFF_S=3.0) as x:
        vid = x.promote()
        x.give_bundle(vid, "H200")
        x.github.fail_next("GET", r"/artifacts", status=404, times=1)
        x.complete(vid, "H200")
        started = dt.datetime.now(dt.UTC)
        assert x.deliver("installation", example("installation", "created"), "other") == 202
        deadline = started + dt.timedelta(seconds=10)
        while True:
            with x.svc.db.session() as s:
                d = s.get(Delivery, "other")
                if d is not None and d.status == "done":
                    break
            assert dt.datetime.now(dt.UTC) < deadline
            time.sleep(0.02)
        assert (dt.datetime.now(dt.UTC) - started).total_seconds() < 1.5
        assert x.verification(vid).state != "published"  # its retry is still waiting
        x.settle()
        assert x.verification(vid).state == "published"


# ----------------------------------------------------------------------- 2e


def test_a_foreign_run_with_the_same_name_is_ignored(w: World) -> None:
    vid = w.promote()
    real = w.run_id(vid, "H200")
    foreign = w.github.run_event(appkit.RUNNER, real, "completed")
    foreign["workflow_run"]["id"] = real + 999
    foreign["workflow_run"]["conclusion"] = "failure"
    assert w.deliver("workflow_run", foreign, "foreign") == 202
    w.settle()
    v = w.verification(vid)
    assert v.state == "dispatched"
    assert v.jobs[0].state == "dispatched"
    w.finish(vid)
    assert w.verification(vid).state == "published"


def test_a_run_of_another_workflow_or_event_is_ignored(w: World) -> None:
    vid = w.promote()
    real = w.run_id(vid, "H200")
    for i, change in enumerate(
        ({"path": ".github/workflows/other.yml"}, {"event": "push"}), start=1
    ):
        payload = w.github.run_event(appkit.RUNNER, real, "completed")
        payload["workflow_run"].update(conclusion="failure", **change)
        assert w.deliver("workflow_run", payload, f"other-{i}") == 202
    w.settle()
    assert w.verification(vid).jobs[0].state == "dispatched"


def test_a_dispatch_repeated_after_a_crash_ends_with_one_run(w: World) -> None:
    """The worker dispatched, GitHub created the run, and the worker died before it
    recorded the run: the retry finds the run instead of dispatching again."""
    real_dispatch = w.svc.github.dispatch
    calls: list[int] = []

    def dispatch_then_die(*args: Any, **kwargs: Any) -> Any:
        real_dispatch(*args, **kwargs)
        calls.append(1)
        raise ConnectionResetError("worker killed after the dispatch")

    w.svc.github.dispatch = dispatch_then_die  # type: ignore[method-assign]
    vid = w.promote(delivery="crash")
    w.svc.github.dispatch = real_dispatch  # type: ignore[method-assign]
    assert len(calls) == 1
    v = w.verification(vid)
    assert v.state == "dispatched", messages.end_reason(v)
    assert len(w.github.dispatches) == 1
    assert v.jobs[0].workflow_run_id is not None
    w.finish(vid)
    assert w.verification(vid).state == "published"


def test_a_second_run_for_a_job_is_cancelled(w: World) -> None:
    vid = w.promote()
    real = w.run_id(vid, "H200")
    twin = w.github.run_event(appkit.RUNNER, real, "requested")
    twin["workflow_run"].update(id=real + 5, status="queued", conclusion=None)
    w.github.runs[real + 5] = type(w.github.runs[real])(
        **{**vars(w.github.runs[real]), "id": real + 5}
    )
    assert w.deliver("workflow_run", twin, "twin") == 202
    w.settle()
    assert w.github.count("POST", rf"/actions/runs/{real + 5}/cancel$") == 1
    assert w.verification(vid).jobs[0].workflow_run_id == real
