"""The watch of the default branch, through the stand-in GitHub: a push to main is
measured against the commit before it, its check run is `rsi/watch` linking the history
page, and its result is a point of its series."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from bot import watch
from bot.models import Delivery, Series, SeriesPoint, Verification
from bot.repo_config import parse
from bot.verification import effects
from bot.verification import machine as M
from tests import appkit
from tests.standin import GitHubStandIn, example
from tests.test_life_words import WRITER, comments_posted, evidence_comments, mentions, say
from tests.test_reviews import command
from tests.worlds import World, world

MERGE = "c" * 40
LATER = "d" * 40
NEXT = "f" * 40
CONFIG = "gpus: [H200]\nrounds: 4\nmodes: [streaming]\nwatch:\n  tasks: [cosyvoice3]\n"


@pytest.fixture
def w(tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world("embedded", tmp_path, github) as x:
        yield x


def pushed(before: str, after: str, ref: str = "refs/heads/main") -> dict[str, Any]:
    p = copy.deepcopy(example("push"))
    p["repository"].update(
        full_name=appkit.UPSTREAM,
        name=appkit.UPSTREAM.split("/")[1],
        default_branch="main",
        master_branch="main",
    )
    p["repository"]["owner"]["login"] = appkit.UPSTREAM.split("/")[0]
    p.update(ref=ref, before=before, after=after, created=False, deleted=False)
    return p


def push(w: World, before: str, after: str, delivery: str, **changes: Any) -> None:
    """The branch moves to `after`, then GitHub delivers its push."""
    w.github.add_branch(appkit.UPSTREAM, "main", after)
    payload = pushed(before, after)
    payload.update(changes)
    assert w.deliver("push", payload, delivery) == 202
    w.settle()


def watched(w: World) -> list[Verification]:
    with w.svc.db.session() as s:
        rows = s.scalars(
            select(Verification)
            .where(Verification.watch.is_(True), Verification.inquiry_id.is_(None))
            .order_by(Verification.created_at, Verification.id)
        ).all()
        for v in rows:
            _ = list(v.jobs)
        return list(rows)


def test_a_push_to_main_is_measured_against_its_parent_and_becomes_a_point(w: World) -> None:
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG)
    w.github.add_branch(appkit.UPSTREAM, "main", MERGE)
    assert w.deliver("push", pushed(appkit.BASE_SHA, MERGE), "push-1") == 202
    w.settle()
    [v] = watched(w)
    assert (v.base_sha, v.head_sha, v.task, v.pr_number) == (
        appkit.BASE_SHA,
        MERGE,
        "cosyvoice3",
        None,
    )
    assert v.state == "dispatched"
    [sent] = w.github.dispatches
    assert (sent["inputs"]["pr"], sent["inputs"]["head_sha"]) == ("0", MERGE)
    # No PR is opened for a merge.
    assert w.github.count("POST", r"/pulls$") == 0
    w.finish(v.id, base_sha=appkit.BASE_SHA, head_sha=MERGE, speedup=-0.08)
    [v] = watched(w)
    assert v.state == "published", w.reason(v.id)
    [run] = [r for r in w.github.check_runs.values() if r.head_sha == MERGE]
    assert (run.name, run.status) == ("rsi/watch", "completed")
    assert run.conclusion in ("failure", "neutral")
    assert f"/history/{appkit.UPSTREAM}?token=" in (run.details_url or "")
    # The details link is the history page of its own series: its task, GPU and mode.
    assert (run.details_url or "").endswith("&gpu=H200&mode=streaming&task=cosyvoice3")
    own = w.client.get((run.details_url or "").split("://", 1)[1].split("/", 1)[1])
    assert own.status_code == 200
    assert MERGE[:10] in own.get_data(as_text=True)
    assert w.github.count("POST", r"/issues/\d+/comments$") == 0
    with w.svc.db.session() as s:
        [series] = s.scalars(select(Series)).all()
        [point] = s.scalars(select(SeriesPoint)).all()
        assert (series.repo, series.task, series.gpu) == (appkit.UPSTREAM, "cosyvoice3", "H200")
        assert (point.sha, point.parent_sha, point.verification_id) == (
            MERGE,
            appkit.BASE_SHA,
            v.id,
        )
        assert point.change_pct < 0
        assert series.detector is not None
        assert len(series.detector["points"]) == 1
    page = w.client.get(w.svc.history_url(appkit.UPSTREAM).split("://", 1)[1].split("/", 1)[1])
    assert page.status_code == 200
    assert MERGE[:10] in page.get_data(as_text=True)
    # The effect run again (a worker died after it, before its step was written down):
    # the point is not added, nor fed to the detector, twice.
    effects.record_history(w.svc, v.id, M.RecordHistory())
    with w.svc.db.session() as s:
        assert len(s.scalars(select(SeriesPoint)).all()) == 1
        [series] = s.scalars(select(Series)).all()
        assert series.detector is not None
        assert len(series.detector["points"]) == 1
    w.github.assert_clean()


def test_a_push_past_the_day_s_budget_is_covered_by_the_next_measured(w: World) -> None:
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG + "  gpu_minutes_per_day: 5\n")
    push(w, appkit.BASE_SHA, MERGE, "push-1")
    [v1] = watched(w)
    w.finish(v1.id, base_sha=appkit.BASE_SHA, head_sha=MERGE)
    with w.svc.db.session() as s:  # a runner's bundle records its GPU minutes
        row = s.get(Verification, v1.id)
        assert row is not None
        gm = {"base": 5.0, "head": 5.0, "total": 10.0}
        row.headline = {g: {**h, "gpu_minutes": gm} for g, h in (row.headline or {}).items()}
    push(w, MERGE, LATER, "push-2")  # 10 of 5 minutes spent: not measured, and said so
    skipped = watched(w)[-1]
    assert (skipped.state, skipped.base_sha, skipped.head_sha) == ("cancelled", MERGE, LATER)
    assert "the watch spent 10 of its 5 GPU minutes today" in w.reason(skipped.id)
    assert len(w.github.dispatches) == 1
    with w.svc.db.session() as s:  # a day later the budget is back
        row = s.get(Verification, v1.id)
        assert row is not None
        row.created_at = row.created_at - dt.timedelta(days=2)
    push(w, LATER, NEXT, "push-3")
    v3 = watched(w)[-1]
    assert (v3.base_sha, v3.head_sha, v3.state) == (MERGE, NEXT, "dispatched")


def test_the_day_s_budget_holds_what_runs_and_what_failed_after_dispatch(w: World) -> None:
    """Minutes are counted before the bundles come: a verification under way holds its
    cap, and one that failed after its runners started still spent it."""
    config = CONFIG.replace("rounds: 4", "rounds: auto\nbudget:\n  gpu_minutes: 20")
    config += "  gpu_minutes_per_day: 30\n"
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", config)
    push(w, appkit.BASE_SHA, MERGE, "push-1")
    [v1] = watched(w)
    assert v1.state == "dispatched"
    with w.svc.db.session() as s:
        assert watch.minutes_today(s, appkit.UPSTREAM, dt.datetime.now(dt.UTC)) == 20
    w.complete(v1.id, "H200", "failure")
    w.settle()
    with w.svc.db.session() as s:
        row = s.get(Verification, v1.id)
        assert row is not None
        assert row.state in ("failed", "timed-out")
        assert watch.minutes_today(s, appkit.UPSTREAM, dt.datetime.now(dt.UTC)) == 20
    push(w, MERGE, LATER, "push-2")  # 20 held + this one's 20 would pass 30: it still runs
    v2 = watched(w)[-1]
    assert v2.state == "dispatched"
    push(w, LATER, NEXT, "push-3")  # 40 held: not measured
    v3 = watched(w)[-1]
    assert v3.state == "cancelled"
    assert "the watch spent 40 of its 30 GPU minutes today" in w.reason(v3.id)


def test_a_push_handled_after_the_next_one_measures_nothing_twice(w: World) -> None:
    """Deliveries come in any order: push-1 (BASE to MERGE) handled after push-2 (MERGE
    to LATER), which waits, neither replaces it nor measures a commit against itself."""
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG + "budget: {max_running: 1}\n")
    running = w.promote()
    assert w.verification(running).state == "dispatched"
    w.queue_may_wait = True
    push(w, MERGE, LATER, "push-2")
    assert w.deliver("push", pushed(appkit.BASE_SHA, MERGE), "push-1") == 202  # late
    w.settle()
    [v] = watched(w)
    assert (v.state, v.base_sha, v.head_sha) == ("queued", MERGE, LATER)


def test_a_push_handled_once_main_moved_on_leaves_its_range_to_the_next(w: World) -> None:
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG + "budget: {max_running: 1}\n")
    running = w.promote()
    assert w.verification(running).state == "dispatched"
    w.queue_may_wait = True
    w.github.add_branch(appkit.UPSTREAM, "main", LATER)  # two merges in a second
    assert w.deliver("push", pushed(appkit.BASE_SHA, MERGE), "push-1") == 202
    w.settle()
    [behind] = watched(w)
    assert (behind.state, behind.head_sha) == ("cancelled", MERGE)
    assert "was pushed after it" in w.reason(behind.id)
    assert w.deliver("push", pushed(MERGE, LATER), "push-2") == 202
    w.settle()
    v = watched(w)[-1]
    assert (v.state, v.base_sha, v.head_sha) == ("queued", appkit.BASE_SHA, LATER)
    # The same push delivered again measures nothing more.
    assert w.deliver("push", pushed(MERGE, LATER), "push-2-again") == 202
    w.settle()
    assert len(watched(w)) == 2


@pytest.mark.parametrize(
    ("config", "payload"),
    [
        (CONFIG, pushed(appkit.BASE_SHA, MERGE, ref="refs/heads/feature")),  # not main
        (CONFIG, pushed(appkit.BASE_SHA, MERGE, ref="refs/tags/v1")),  # a tag
        (CONFIG, pushed("0" * 40, MERGE)),  # main just created
        (
            CONFIG.replace("watch:\n  tasks: [cosyvoice3]\n", "watch: false\n"),
            pushed(appkit.BASE_SHA, MERGE),
        ),
        (None, pushed(appkit.BASE_SHA, MERGE)),  # no .github/rsi.yml: not watched
        ("gpus: [H200]\n", pushed(appkit.BASE_SHA, MERGE)),  # no task known yet
        (CONFIG, {**pushed(LATER, MERGE), "forced": True}),  # LATER left main: no parent
        (CONFIG + "  gpus: [H100]\n", pushed(appkit.BASE_SHA, MERGE)),  # not among gpus
        ("gpus: [H200]\nwatch: false\nrounds: banana\n", pushed(appkit.BASE_SHA, MERGE)),
    ],
)
def test_pushes_the_watch_leaves_alone(
    w: World, config: str | None, payload: dict[str, Any]
) -> None:
    if config is not None:
        w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", config)
        if "banana" in config:  # a file with a mistake: its `watch: false` must still hold
            w.promote()
            w.github.dispatches.clear()
    w.github.add_branch(appkit.UPSTREAM, "main", MERGE)
    assert w.deliver("push", payload, "push-x") == 202
    w.settle()
    assert watched(w) == []
    assert w.github.dispatches == []
    with w.svc.db.session() as s:
        d = s.get(Delivery, "push-x")
        assert d is not None
        assert d.status == "done", d.error


def test_a_push_while_the_last_waits_measures_the_whole_range(w: World) -> None:
    """One verification at a time (`budget.max_running: 1`): the second push replaces
    the first, still queued, and measures from the first push's base."""
    config = CONFIG + "budget: {max_running: 1}\n"
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", config)
    running = w.promote()  # a PR's verification holds the repository's one slot
    assert w.verification(running).state == "dispatched"
    w.queue_may_wait = True  # the watch's verification waits for the slot
    push(w, appkit.BASE_SHA, MERGE, "push-1")
    push(w, MERGE, LATER, "push-2")
    w.settle()
    first, second = watched(w)
    assert (first.state, first.superseded_by) == ("superseded", second.id)
    assert (second.state, second.base_sha, second.head_sha) == ("queued", appkit.BASE_SHA, LATER)


def test_the_watch_section_reads_as_written() -> None:
    assert not parse("watch: false\n").config.watch.enabled
    c = parse("watch:\n  tasks: [cosyvoice3]\n  gpus: h200\n  gpu_minutes_per_day: 60\n").config
    assert (c.watch.tasks, c.watch.gpus, c.watch.gpu_minutes_per_day) == (
        ["cosyvoice3"],
        ["H200"],
        60,
    )
    bad = parse("watch:\n  taskz: [x]\n")
    assert not bad.ok
    assert "did you mean `tasks`" in (bad.error or "")
    outside = parse("gpus: [H200]\nwatch:\n  gpus: [H100]\n")
    assert "`watch.gpus` names H100, not among `gpus` (H200)" in (outside.error or "")


# ------------------------------------------------------------------ /rsi verify on any PR


def _someones_pr(w: World, config: str | None = CONFIG) -> int:
    if config is not None:
        w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", config)
    pull = w.github.add_pull(appkit.UPSTREAM, head="octocat:faster-decode", head_sha="e" * 40)
    return int(pull["number"])


def test_a_writer_has_any_pr_measured_with_rsi_verify(w: World) -> None:
    number = _someones_pr(w)
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    since = len(w.github.requests)
    say(w, number, "/rsi verify", "c-verify")
    v = w.latest(number)
    assert (v.head_sha, v.task, v.state) == ("e" * 40, "cosyvoice3", "dispatched")
    assert v.requested_by == WRITER
    [reply] = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert f"verification `{v.id}`" in reply
    assert "is queued on H200" in reply
    # The App attached to the PR: it opens none, and its evidence lands there.
    assert w.github.count("POST", r"/pulls$") == 0
    w.finish(v.id, base_sha=v.base_sha, head_sha=v.head_sha)
    assert w.verification(v.id).state == "published", w.reason(v.id)
    assert evidence_comments(w, number)
    w.github.assert_clean()


def test_a_triager_s_rsi_verify_waits_for_a_writer_s_approval(w: World) -> None:
    number = _someones_pr(w)
    w.github.set_permission(appkit.UPSTREAM, "triager-tia", "triage")
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    since = len(w.github.requests)
    say(w, number, "/rsi verify", "c-triage", "triager-tia")
    held = w.latest(number)
    assert (held.head_sha, held.state) == ("e" * 40, "awaiting-approval")
    assert w.github.dispatches == []  # nothing runs on a triager's word
    [reply] = [b for b in comments_posted(w, since) if mentions(b, "triager-tia")]
    assert "waits for a maintainer with write access" in reply
    [run] = [r for r in w.github.check_runs.values() if r.head_sha == "e" * 40]
    assert run.name == "rsi/verify"
    say(w, number, "/rsi reverify", "c-approve")  # a writer approves that head
    v = w.latest(number)
    assert (v.head_sha, v.state) == ("e" * 40, "dispatched")
    assert w.verification(held.id).state == "superseded"
    w.github.assert_clean()


def test_rsi_verify_stays_within_its_budgets_per_pr_and_per_day(w: World) -> None:
    number = _someones_pr(w, CONFIG + "budget:\n  pr_gpu_minutes: 30\n  day_gpu_minutes: 50\n")
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    say(w, number, "/rsi verify", "c-1")
    v = w.latest(number)
    w.finish(v.id, base_sha=v.base_sha, head_sha=v.head_sha)
    with w.svc.db.session() as s:  # its bundle recorded 40 GPU minutes
        row = s.get(Verification, v.id)
        assert row is not None
        gm = {"base": 20.0, "head": 20.0, "total": 40.0}
        row.headline = {g: {**h, "gpu_minutes": gm} for g, h in (row.headline or {}).items()}
    since = len(w.github.requests)
    say(w, number, "/rsi verify", "c-2")
    [told] = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert "have spent or hold 40 of the 30 GPU minutes of this PR" in told
    assert w.latest(number).id == v.id  # nothing new queued
    other = _someones_pr(w, None)  # another PR: within its own 30, but the day's 50 hold
    say(w, other, "/rsi verify", "c-3")
    v2 = w.latest(other)
    assert v2.state == "dispatched"  # 40 of 50 spent today: this one may run
    say(w, other, "/rsi verify", "c-4")
    [day] = [b for b in comments_posted(w, since) if "in the last day" in b]
    assert "GPU minutes in the last day on PRs rsi-bot did not open" in day
    w.github.assert_clean()


def test_rsi_verify_by_a_reader_or_with_nothing_to_measure(w: World) -> None:
    number = _someones_pr(w, "gpus: [H200]\n")  # no task named, none measured yet
    w.github.set_permission(appkit.UPSTREAM, "reader-rae", "read")
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    since = len(w.github.requests)
    say(w, number, "/rsi verify", "c-reader", "reader-rae")
    [refusal] = [b for b in comments_posted(w, since) if mentions(b, "reader-rae")]
    assert "commands are for people with write access" in refusal
    say(w, number, "/rsi verify", "c-writer")
    [told] = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert "nothing to measure yet" in told
    with w.svc.db.session() as s:
        assert s.scalars(select(Verification)).all() == []
    # The writer's command tracks the PR all the same: `/rsi status` answers now.
    before = len(w.github.requests)
    say(w, number, "/rsi status", "c-status")
    [status] = comments_posted(w, before)
    assert "nothing has been verified on this PR yet" in status
    # On a PR nobody had tracked, other commands still cost nothing.
    other = _someones_pr(w, None)
    before = len(w.github.requests)
    say(w, other, "/rsi status", "c-status-2")
    assert comments_posted(w, before) == []
    w.github.assert_clean()


def test_rsi_verify_measures_nothing_on_a_closed_pr_or_one_whose_fork_is_gone(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    number = _someones_pr(w)
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    w.github.pulls[appkit.UPSTREAM.lower()][number].state = "closed"
    since = len(w.github.requests)
    say(w, number, "/rsi verify", "c-closed")
    [told] = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert "nothing to measure: this PR is closed" in told
    w.github.pulls[appkit.UPSTREAM.lower()][number].state = "open"
    real = w.svc.github.pull

    def gone(repo: str, n: int, max_age_s: float = 0.0) -> Any:
        return dataclasses.replace(real(repo, n, max_age_s), head_repo="")  # head.repo: null

    monkeypatch.setattr(w.svc.github, "pull", gone)
    since = len(w.github.requests)
    say(w, number, "/rsi verify", "c-gone")
    [told] = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert "the repository of this PR's head is gone" in told
    assert w.github.dispatches == []
    w.github.assert_clean()


def test_a_refused_reader_is_told_once_an_hour_on_a_pr_rsi_bot_did_not_open(w: World) -> None:
    number = _someones_pr(w)
    w.github.set_permission(appkit.UPSTREAM, "reader-rae", "read")
    since = len(w.github.requests)
    for i in range(3):
        say(w, number, "/rsi verify", f"c-r{i}", "reader-rae")
    refusals = [b for b in comments_posted(w, since) if mentions(b, "reader-rae")]
    lookups = w.github.count("GET", r"/collaborators/reader-rae/permission$")
    assert (len(refusals), lookups) == (1, 1)


def test_two_rsi_verify_at_once_measure_once_and_both_are_answered(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    """Both read the PR untracked and raced to track it: the second insert was a bug to
    the delivery (failed, its author never answered). Now the PR is tracked once, the
    commands take turns on its lease, and the second joins the first's measurement."""
    with world("deployed", tmp_path, github) as w:
        number = _someones_pr(w)
        w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
        w.github.set_permission(appkit.UPSTREAM, "other-olga", "write")
        a = command(w.github, number, "/rsi verify", WRITER)
        b = command(w.github, number, "/rsi verify", "other-olga")
        w.at_once(
            lambda: w.deliver("issue_comment", a, "c-a"),
            lambda: w.deliver("issue_comment", b, "c-b"),
        )
        w.settle()
        with w.svc.db.session() as s:
            states = [d.status for d in s.scalars(select(Delivery))]
            made = s.scalars(select(Verification)).all()
        assert states.count("failed") == 0, states
        assert len(made) == 1
        said = comments_posted(w, 0)
        assert any(mentions(c, WRITER) for c in said)
        assert any(mentions(c, "other-olga") for c in said)


def test_a_failed_watch_run_names_no_command_a_merge_cannot_take(w: World) -> None:
    """A merge has no PR to comment `/rsi reverify` on: the check says what happens next."""
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG)
    push(w, appkit.BASE_SHA, MERGE, "push-fail")
    [v] = watched(w)
    w.complete(v.id, "H200", "failure")
    w.settle()
    [run] = [r for r in w.github.check_runs.values() if r.external_id == v.id]
    summary = run.output["summary"]
    assert "/rsi reverify" not in summary
    assert "the watch measures the default branch again with its next push" in summary


def _push_to(w: World, number: int, sha: str, delivery: str, sender: str = "octocat") -> None:
    """The PR's author pushes `sha` onto its head (the fork `octocat/sglang-omni`)."""
    fork = "octocat/sglang-omni"
    before = w.github.repo(fork).branches["faster-decode"]
    w.github.set_compare(appkit.UPSTREAM, before, sha, commits=[sha], authors={sha: sender})
    w.github.add_branch(fork, "faster-decode", sha)
    p = copy.deepcopy(example("pull_request", "synchronize"))
    p["repository"]["full_name"] = appkit.UPSTREAM
    p["number"] = p["pull_request"]["number"] = number
    p["before"], p["after"] = before, sha
    p["pull_request"]["head"]["sha"] = sha
    p["pull_request"]["head"]["ref"] = "faster-decode"
    p["pull_request"]["head"]["repo"]["full_name"] = fork
    p["pull_request"]["base"]["ref"] = "main"
    p["sender"]["login"] = sender
    assert w.deliver("pull_request", p, delivery) == 202
    w.settle()


def test_a_triager_s_rsi_verify_tracks_nothing_that_runs_until_a_writer_approves(
    w: World,
) -> None:
    """Before, with `approval: never-required`, a triager's `/rsi verify` made the PR
    tracked and each of its author's later pushes ran with no writer involved."""
    number = _someones_pr(w, CONFIG + "approval: never-required\n")
    w.github.set_permission(appkit.UPSTREAM, "triager-tia", "triage")
    say(w, number, "/rsi verify", "c-triage", "triager-tia")
    for i, sha in enumerate(("1" * 40, "2" * 40, "3" * 40)):
        _push_to(w, number, sha, f"p-{i}")
    assert w.github.dispatches == []
    held = w.latest(number)
    assert (held.head_sha, held.state) == ("3" * 40, "awaiting-approval")
    # A writer's word approves a head: from then on the policy lets pushes run.
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    say(w, number, "/rsi reverify", "c-writer")
    assert w.latest(number).state == "dispatched"
    _push_to(w, number, "4" * 40, "p-4")
    assert (w.latest(number).head_sha, w.latest(number).state) == ("4" * 40, "dispatched")
    w.github.assert_clean()


def test_a_push_to_a_pr_past_its_budget_is_refused_before_dispatch(w: World) -> None:
    """Every path counts against the PR's and the day's budget, not only `/rsi verify`:
    here the author's pushes to a PR a writer adopted, with the first still running."""
    auto = CONFIG.replace("rounds: 4", "rounds: auto")  # a cap: what a run holds
    number = _someones_pr(w, auto + "budget:\n  pr_gpu_minutes: 15\n  gpu_minutes: 20\n")
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    w.github.set_permission(appkit.UPSTREAM, "octocat", "write")  # trusted: pushes run
    say(w, number, "/rsi verify", "c-1")
    first = w.latest(number)
    assert first.state == "dispatched"  # holds its cap: 20 minutes on H200
    dispatched = len(w.github.dispatches)
    _push_to(w, number, "5" * 40, "p-5")
    second = w.latest(number)
    assert second.head_sha == "5" * 40
    assert (second.state, (second.end_reason or {}).get("code")) == ("cancelled", "over-budget")
    assert (second.end_reason or {})["params"]["spent"] == "20"  # the first, at its cap
    assert len(w.github.dispatches) == dispatched
    w.github.assert_clean()


@pytest.mark.parametrize("path", ["approve-button", "re-run"])
def test_approving_a_head_past_the_pr_s_budget_dispatches_nothing(w: World, path: str) -> None:
    """The Approve and verify button and a check's Re-run queue a verification like any
    other request: past the PR's budget it is refused before dispatch, with the reason."""
    from tests.test_approvals import press, rerun

    auto = CONFIG.replace("rounds: 4", "rounds: auto")
    number = _someones_pr(w, auto + "budget:\n  pr_gpu_minutes: 15\n  gpu_minutes: 20\n")
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    say(w, number, "/rsi verify", "c-1")
    assert w.latest(number).state == "dispatched"  # holds its 20-minute cap
    _push_to(w, number, "6" * 40, "p-6")  # an outsider's push: waits for approval
    waiting = w.latest(number)
    assert waiting.state == "awaiting-approval"
    dispatched = len(w.github.dispatches)
    if path == "approve-button":
        assert waiting.check_run_id is not None
        check = w.github.check_runs[waiting.check_run_id]
        assert w.deliver("check_run", press(w, check, WRITER), "press") == 202
    else:
        assert w.deliver("check_run", rerun(w, number, "6" * 40, WRITER), "rerun") == 202
    w.settle()
    v = w.latest(number)
    assert v.head_sha == "6" * 40
    assert (v.state, (v.end_reason or {}).get("code")) == ("cancelled", "over-budget")
    assert len(w.github.dispatches) == dispatched
    said = w.reason(v.id)
    assert "have spent or hold 20 of its 15 GPU minutes" in said
    w.github.assert_clean()


def test_a_repository_s_requests_past_its_queue_cap_are_refused_before_dispatch(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    """A flood of `/rsi verify` cannot grow a queue that every reconciler pass walks: one
    runner at a time here, at most two waiting; the fourth PR's request is refused with
    the reason and the next step, and the queue takes requests again as it drains."""
    with world("embedded", tmp_path, github, RSI_REPO_MAX_QUEUED=2) as w:
        w.queue_may_wait = True  # queued verifications wait for the runner: not busy
        one_at_a_time = CONFIG + "budget:\n  max_running: 1\n"
        prs = [_someones_pr(w, one_at_a_time) for _ in range(5)]
        w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
        for i, number in enumerate(prs[:4]):
            say(w, number, "/rsi verify", f"c-{i}")
        states = [w.latest(n).state for n in prs[:4]]
        assert states == ["dispatched", "queued", "queued", "cancelled"]
        refused = w.latest(prs[3])
        assert (refused.end_reason or {}).get("code") == "queue-full"
        assert (refused.end_reason or {})["params"] == {"queued": "2", "most": "2", "told": True}
        assert len(w.github.dispatches) == 1
        reply = w.github.comments_on(appkit.UPSTREAM, prs[3])[-1].body
        assert "2 verifications of this repository were already waiting" in reply
        assert "at most 2 may wait" in reply
        assert "ask again once some have run" in reply
        # The first ends: the second takes the runner, and a new request may wait again.
        first = w.latest(prs[0])
        w.finish(first.id, base_sha=first.base_sha, head_sha=first.head_sha)
        w.reconcile()
        assert w.latest(prs[1]).state == "dispatched"
        say(w, prs[4], "/rsi verify", "c-4")
        assert w.latest(prs[4]).state == "queued"
        w.github.assert_clean()


def _verified_one_runner(w: World, n: int) -> list[int]:
    """`n` PRs of a repository allowed one runner at a time, each `/rsi verify`-ed by a
    writer in turn (the first dispatched, the rest waiting)."""
    w.queue_may_wait = True  # queued verifications wait for the runner: not busy
    one_at_a_time = CONFIG + "budget:\n  max_running: 1\n"
    prs = [_someones_pr(w, one_at_a_time) for _ in range(n)]
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    for i, number in enumerate(prs):
        say(w, number, "/rsi verify", f"c-{i}")
    return prs


def test_a_request_answered_queued_then_refused_at_its_start_tells_who_asked(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    """The command's reply said "queued"; the operator then lowered the queue cap, and
    the start refuses it: that is news, and whoever asked is told (the command decides
    its own refusals before it queues the start, so nothing is said twice)."""
    with world("embedded", tmp_path, github, RSI_REPO_MAX_QUEUED=3) as w:
        prs = _verified_one_runner(w, 3)
        assert [w.latest(n).state for n in prs] == ["dispatched", "queued", "queued"]
        replies = [w.github.comments_on(appkit.UPSTREAM, n)[-1].body for n in prs]
        assert all("queued" in r.lower() for r in replies[1:]), replies
        before = len(w.github.comments_on(appkit.UPSTREAM, prs[2]))

        w.svc.settings.RSI_REPO_MAX_QUEUED = 1
        w.reconcile()
        assert w.latest(prs[1]).state == "queued"
        refused = w.latest(prs[2])
        assert refused.state == "cancelled"
        assert (refused.end_reason or {}) == {
            "code": "queue-full",
            "params": {"queued": "1", "most": "1"},
        }
        told = [c.body for c in w.github.comments_on(appkit.UPSTREAM, prs[2])[before:]]
        pings = [body for body in told if body.startswith(f"@{WRITER} ")]
        assert len(pings) == 1, told
        assert "cancelled" in pings[0]
        assert len(w.github.dispatches) == 1
        w.github.assert_clean()


def test_two_starts_decided_at_once_cannot_both_take_the_last_runner(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers deciding starts of one repository at the same instant (seen in the
    whole-App flood: a repository of `max_running: 2` held 3): the decisions are taken
    one at a time, so only one takes the free runner."""
    import threading

    from bot import pool
    from bot.verification import steps

    prs = _verified_one_runner(w, 3)
    first, second, third = (w.latest(n) for n in prs)
    assert (first.state, second.state, third.state) == ("dispatched", "queued", "queued")
    w.finish(first.id, base_sha=first.base_sha, head_sha=first.head_sha)  # a runner frees
    both_inside = threading.Barrier(2, timeout=0.3)
    real = pool.waits

    def together(*args: Any, **kwargs: Any) -> str | None:
        with contextlib.suppress(threading.BrokenBarrierError):
            both_inside.wait()  # without the lease both decide here at once
        return real(*args, **kwargs)

    monkeypatch.setattr(pool, "waits", together)
    w.at_once(lambda: steps.start(w.svc, second.id), lambda: steps.start(w.svc, third.id))
    states = sorted(w.verification(v.id).state for v in (second, third))
    assert states == ["dispatched", "queued"]
    # The installation of a PR the App adopted is recorded, so its cap counts it.
    started = next(v for v in (second, third) if w.verification(v.id).state == "dispatched")
    assert w.verification(started.id).installation_id is not None
