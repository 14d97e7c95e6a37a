"""Guards of the verification's storage and effects, one at a time on the embedded
default: a transition that loses the race reads again; an effect carried out after the
verification moved on does nothing; an effect that cannot be read is given up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.exc import OperationalError

from bot.models import Effect, Verification
from bot.verification import effects as E
from bot.verification import machine as M
from bot.verification import reasons as R
from bot.verification import steps, store
from bot.verification.reasons import Reason
from tests import appkit
from tests.standin import GitHubStandIn
from tests.worlds import World, world


@pytest.fixture
def w(tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world("embedded", tmp_path, github) as x:
        yield x


def test_a_transition_that_loses_the_race_reads_again(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    vid = w.promote()
    real = M.step
    calls: list[int] = []

    def racing(v: M.Verification, event: M.Event) -> Any:
        calls.append(1)
        if len(calls) == 1:  # someone else moves the verification meanwhile
            with w.svc.db.engine.begin() as conn:
                conn.execute(
                    update(Verification)
                    .where(Verification.id == vid)
                    .values(version=Verification.version + 1)
                )
        return real(v, event)

    monkeypatch.setattr(store.M, "step", racing)
    after, _ = store.transition(w.svc.db, vid, M.RunStarted("H200"))
    assert len(calls) == 2
    assert after is not None
    assert after.state == M.State.RUNNING


def test_a_locked_database_is_tried_again_then_given_up(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    vid = w.promote()

    def locked(v: M.Verification, event: M.Event) -> Any:
        raise OperationalError("UPDATE", {}, Exception("database is locked"))

    monkeypatch.setattr(store.M, "step", locked)
    with pytest.raises(RuntimeError, match="could not apply RunStarted after 3 tries"):
        store.transition(w.svc.db, vid, M.RunStarted("H200"), tries=3)

    def broken(v: M.Verification, event: M.Event) -> Any:
        raise OperationalError("UPDATE", {}, Exception("no such table"))

    monkeypatch.setattr(store.M, "step", broken)
    with pytest.raises(OperationalError):
        store.transition(w.svc.db, vid, M.RunStarted("H200"))


def test_no_such_verification(w: World) -> None:
    assert store.transition(w.svc.db, "v-0000000000", M.Start()) == (None, ())
    steps.start(w.svc, "v-0000000000")  # nothing to start, nothing raised
    with pytest.raises(LookupError):
        E.ensure_check_run(w.svc, "v-0000000000", M.EnsureCheckRun())


def test_effects_after_the_verification_moved_on_do_nothing(w: World) -> None:
    """Executors read the truth first: a repeated or late effect sends nothing."""
    vid = w.promote()
    before = len(w.github.requests)
    assert E.dispatch(w.svc, vid, M.Dispatch("H200")) is None  # dispatched already
    assert E.ingest(w.svc, vid, M.Ingest("H200")) is None  # no run completed
    assert E.build_evidence(w.svc, vid, M.BuildEvidence()) is None  # not ingesting
    E.update_pr_body(w.svc, vid, M.UpdatePrBody())  # not published
    E.ensure_pull_request(w.svc, vid, M.EnsurePullRequest())  # has its PR
    E.ensure_check_run(w.svc, vid, M.EnsureCheckRun())  # has its check run
    steps.start(w.svc, vid)  # not queued any more
    assert len(w.github.requests) == before


def test_a_cancel_run_without_a_known_run_sends_nothing(w: World) -> None:
    vid = w.promote()
    with w.svc.db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        v.jobs[0].workflow_run_id = None
    before = len(w.github.requests)
    E.cancel_run(w.svc, vid, M.CancelRun("H200", None))
    assert len(w.github.requests) == before


def test_an_effect_that_cannot_be_read_is_given_up(w: World) -> None:
    vid = w.promote()
    with w.svc.db.session() as s:
        s.add(Effect(verification_id=vid, kind="NoSuchEffect", params={}, attempts=0))
    steps.drain(w.svc, vid)
    assert steps.stuck_effects(w.svc) == []  # given up, not left to block the outbox
    assert w.verification(vid).state == "dispatched"  # not essential: nothing ends


def test_pr_bodies_keep_their_evidence_section_when_cut() -> None:
    from evidence.render import SECTION_END, SECTION_START

    section = f"{SECTION_START}\nfigures\n{SECTION_END}\n"
    body = "x" * 70_000 + "\n\n" + section
    cut = E.fit_pr_body(body)
    assert len(cut) <= 65_536
    assert cut.endswith(section)
    assert "cut to fit GitHub's limit" in cut
    assert E.fit_pr_body("short " + section) == "short " + section
    assert E.fit_pr_body("y" * 70_000) == "y" * 70_000  # no section: left to the writer


def test_notify_and_the_comment_need_a_pull_request(w: World) -> None:
    """A verification still opening its PR has no PR to speak on yet."""
    vid = w.promote()
    with w.svc.db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        v.pr_number = None
    before = len(w.github.requests)
    E.notify(w.svc, vid, M.Notify("alice"))
    E.upsert_comment(w.svc, vid, M.UpsertComment())
    E.update_pr_body(w.svc, vid, M.UpdatePrBody())
    assert len(w.github.requests) == before


def test_a_check_run_not_created_yet_is_not_completed(w: World) -> None:
    vid = w.promote()
    with w.svc.db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        v.check_run_id = None
    before = len(w.github.requests)
    E.complete_check_run(w.svc, vid, M.CompleteCheckRun("neutral"))
    E.check_run_in_progress(w.svc, vid, M.CheckRunInProgress())
    assert len(w.github.requests) == before


def test_a_superseded_verification_leaves_the_body_to_the_newer_evidence(w: World) -> None:
    first = w.promote()
    w.finish(first)
    number = w.verification(first).pr_number or 0
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    from tests.test_reviews import command

    w.deliver("issue_comment", command(w.github, number, "/rsi reverify", "mia"), "c")
    w.settle()
    second = w.latest(number).id
    w.finish(second)
    before = len(w.github.requests)
    E.update_pr_body(w.svc, first, M.UpdatePrBody())  # a late body update of the older one
    assert len(w.github.requests) == before


def test_the_reconciler_survives_a_runner_repository_it_cannot_list(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime as dt

    from bot.models import RunnerJob

    vid = w.promote()
    with w.svc.db.session() as s:
        job = s.query(RunnerJob).filter_by(verification_id=vid).one()
        job.workflow_run_id = None
        job.dispatched_at = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)

    def down(*_: object, **__: object) -> None:
        raise ConnectionError("GitHub unreachable")

    monkeypatch.setattr(steps, "find_run", down)
    w.svc.queue.reconcile()  # logs and goes on
    assert w.verification(vid).state == "dispatched"


def test_a_reason_for_every_code_renders() -> None:
    from bot import messages

    params = {
        "gpu": "H100",
        "url": "https://example.com/run",
        "conclusion": "failure",
        "minutes": 5,
        "artifact": "a",
        "problem": "p",
        "user": "u",
        "state": "closed",
        "id": "v-1",
        "sha": "a" * 40,
        "tip": "c" * 40,
        "head": "d" * 40,
        "pusher": "drive-by",
        "branch": "fork:branch",
        "step": "Ingest",
        "error": "e",
        "attempts": 3,
        "spent": "250",
        "budget": "240",
        "low": "30",
        "which": "verification",
        "queued": "20",
        "most": "20",
    }
    for code in sorted(R.CODES):
        text = messages.reason(Reason(code, params))
        assert text
        assert code not in text or code == "no-evidence"


def test_find_run_takes_only_this_jobs_run(w: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """By name, from the configured workflow and a dispatch, and never a run that is
    known to be another job's."""
    import datetime as dt

    from bot.github.api import Run

    vid = w.promote()
    known = w.run_id(vid, "H200")
    path = ".github/workflows/rsi-verify.yml"
    name = f"rsi verify {vid} h200"
    runs = [
        Run(1, "nightly docs", None, path, "workflow_dispatch"),
        Run(2, name, None, path, "push"),
        Run(3, name, None, ".github/workflows/other.yml", "workflow_dispatch"),
        Run(4, f"rsi verify {vid} h100", None, path, "workflow_dispatch"),
        Run(known, name, None, path, "workflow_dispatch"),  # this job's own: fine
    ]
    monkeypatch.setattr(w.svc.github, "runs_since", lambda repo, since: iter(runs))
    since = dt.datetime.now(dt.UTC)
    assert E.find_run(w.svc, vid, "H200", since) == (known, None)
    assert E.find_run(w.svc, vid, "H100", since) == (4, None)
    # A run another verification's job owns is skipped.
    assert E.find_run(w.svc, "v-9999999999", "H200", since) is None
    monkeypatch.setattr(
        w.svc.github,
        "runs_since",
        lambda repo, since: iter([Run(known, "rsi verify v-9999999999 h200", None, path, "")]),
    )
    assert E.find_run(w.svc, "v-9999999999", "H200", since) is None


def test_a_drain_that_loses_its_lease_stops(w: World, monkeypatch: pytest.MonkeyPatch) -> None:
    vid = w.promote()
    with w.svc.db.session() as s:
        s.add(Effect(verification_id=vid, kind="UpsertComment", params={}, attempts=0))
    monkeypatch.setattr(store, "renew", lambda *a, **k: False)
    before = len(w.github.requests)
    steps.drain(w.svc, vid)
    assert len(w.github.requests) == before  # the other worker carries on
    assert [k for _, k, _ in steps.stuck_effects(w.svc)] == ["UpsertComment"]


def test_the_body_says_its_figures_are_older_while_a_newer_commit_is_measured(
    w: World,
) -> None:
    from tests.test_reviews import command

    first = w.promote()
    w.finish(first)
    v1 = w.verification(first)
    number = v1.pr_number or 0
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")

    def body() -> str:
        return w.github.pulls[appkit.UPSTREAM.lower()][number].body or ""

    assert "newer measurement" not in body()
    assert f"for head [`{v1.head_sha[:10]}`]" in body()  # the verdict names its commit
    w.deliver("issue_comment", command(w.github, number, "/rsi reverify", "mia"), "c1")
    w.settle()
    second = w.latest(number).id
    assert second != first
    said = body()
    assert "**A newer measurement is under way:**" in said
    assert f"verification `{second}`" in said
    assert f"The figures below are for head `{v1.head_sha[:10]}`" in said
    w.finish(second)
    assert "newer measurement" not in body()
    w.deliver("issue_comment", command(w.github, number, "/rsi reverify", "mia"), "c2")
    w.settle()
    third = w.latest(number).id
    assert "newer measurement" in body()
    w.complete(third, "H200", "failure")
    w.settle()
    assert w.verification(third).state == "failed"
    assert "newer measurement" not in body()  # it ended: the line goes


def test_a_failed_run_says_its_step_and_the_last_lines_of_its_log_inert(w: World) -> None:
    """The maintainer sees where it failed without opening the runner's logs: the lines
    the failed step wrote (not the steps that run after a failure), the last of them
    within a bound; the log is the head's own output (untrusted), so it is fenced."""
    import datetime as dt

    vid = w.promote()
    t0 = dt.datetime(2026, 12, 6, 10, 0, tzinfo=dt.UTC)

    def at(s: float, text: str) -> str:
        return f"{(t0 + dt.timedelta(seconds=s)).strftime('%Y-%m-%dT%H:%M:%S')}.1234567Z {text}"

    setup = [at(i, f"setup {i}") for i in range(5)]
    step = [at(10 + i, f"line {i}") for i in range(60)]
    hostile = at(70, "\x1b[31m@octocat ``` </details> <script>x</script>")
    crash = at(71, "RuntimeError: CUDA out of memory " + "x" * 500)
    after = [at(80, "Uploading artifact rsi-bundle…"), at(81, "Cleaning up orphan processes")]
    log = "\n".join([*setup, *step, hostile, "  continuation of the crash", crash, *after])
    window = (t0 + dt.timedelta(seconds=10), t0 + dt.timedelta(seconds=71))
    w.complete(
        vid,
        "H200",
        "failure",
        failed_step="Verify base and head",
        log=log,
        failed_window=window,
    )
    w.settle()
    v = w.verification(vid)
    assert v.state == "failed"
    [run] = [r for r in w.github.check_runs.values() if r.external_id == vid]
    summary = run.output["summary"]
    assert "ended `failure` at step `Verify base and head`" in summary
    assert "lines of the H200 job's log (step “Verify base and head”)" in summary
    assert "line 59" in summary
    assert "line 40" not in summary  # bounded: the last lines only
    assert "Uploading artifact" not in summary  # the steps after the failure are not it
    assert "setup 4" not in summary
    assert "  continuation of the crash" in summary  # an unstamped line goes with its step
    assert "2026-12-06T10:00" not in summary  # GitHub's timestamps taken off
    assert "\x1b" not in summary
    assert "RuntimeError: CUDA out of memory " + "x" * 150 in summary  # the last line kept
    assert "x" * 300 not in summary  # each line cut
    fence = summary.split("lines of the H200 job's log")[1]
    opener = fence.split("\n\n")[1].split("\n")[0]
    assert opener.startswith("````")  # longer than any backtick run in the lines
    comment = "\n".join(c.body for c in w.github.comments_on(appkit.UPSTREAM, v.pr_number or 0))
    assert "at step `Verify base and head`" in comment
    assert "octocat ``` </details> <script>x</script>" in comment  # text inside the fence
    assert ".\n\n<details><summary>The last " in comment


def test_a_failed_run_whose_jobs_github_cannot_list_still_ends_with_its_reason(
    w: World,
) -> None:
    vid = w.promote()
    w.github.fail_next("GET", r"/actions/runs/\d+/jobs$", 404)
    w.complete(vid, "H200", "failure", failed_step="Verify base and head", log="boom")
    w.settle()
    v = w.verification(vid)
    assert v.state == "failed"
    [run] = [r for r in w.github.check_runs.values() if r.external_id == vid]
    assert "the H200 runner job ended `failure` ([run]" in run.output["summary"]
    assert "job's log" not in run.output["summary"]


def test_a_log_tail_is_bounded_and_plain() -> None:
    from bot.github.api import LOG_CHARS, LOG_LINE_CHARS, LOG_LINES, log_tail

    text = "\ufeff2026-12-06T10:00:00.1Z first\n" + "\n".join(
        f"2026-12-06T10:00:01Z \x1b[1;32mok {i}\x1b[0m" for i in range(100)
    )
    tail = log_tail(text + "\n\n   \n" + "y" * 1000)
    assert tail[-1] == "y" * LOG_LINE_CHARS
    assert tail[-2] == "ok 99"
    assert len(tail) <= LOG_LINES
    assert sum(len(x) + 1 for x in tail) <= LOG_CHARS  # inside what the fence keeps
    assert len(log_tail("\n".join(f"2026-12-06T10:00:01Z ok {i}" for i in range(99)))) == LOG_LINES
    assert log_tail("") == ()
