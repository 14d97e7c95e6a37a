"""The hunt for a regression's culprit, through the stand-in GitHub: an alarm of the
watch's detector is confirmed by a fresh paired rerun, its range bisected along first
parents, and the culprit PR alerted once, even when the App restarts mid-bisection;
maintainers answer the alert and the ledger counts it."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, select

from bot import history, inquiries, runtime, watch
from bot.history import NewPoint, SeriesKey, add_to, open_series
from bot.models import Inquiry, PullWrite, SeriesPoint, Verification
from bot.verification import store
from bot.web.app import create_app
from tests import appkit
from tests.standin import GitHubStandIn
from tests.test_life_words import WRITER, say
from tests.test_reviews import command
from tests.test_watch import CONFIG, push
from tests.worlds import SHAPES, World, world

COMMITS = [f"{i:x}" * 40 for i in range(1, 9)]  # eight merges: 111…, 222…, …, 888…
CULPRIT = COMMITS[4]  # the fifth: −8%
PR = 45


@pytest.fixture
def w(tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world("embedded", tmp_path, github) as x:
        yield x


@pytest.fixture(params=SHAPES)
def shaped(
    request: pytest.FixtureRequest, tmp_path: Path, github: GitHubStandIn
) -> Iterator[World]:
    """Both shapes: the embedded default, and PostgreSQL with Redis's queue workers."""
    with world(request.param, tmp_path, github) as x:
        yield x


def merges(w: World) -> None:
    """Eight merged PRs on main, one commit each (squash merges), the fifth the culprit."""
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG)
    w.github.set_compare(appkit.UPSTREAM, appkit.BASE_SHA, COMMITS[-1], commits=COMMITS)
    for i, sha in enumerate(COMMITS):
        w.github.add_merged_pull(appkit.UPSTREAM, 40 + i, f"merge {i + 1}", [sha], user="alice")


def suspected(w: World) -> Verification:
    """The eight merges pushed at once and measured −8%: the watch's verification (its
    point makes the detector suspect a regression)."""
    merges(w)
    push(w, appkit.BASE_SHA, COMMITS[-1], "push-1")
    with w.svc.db.session() as s:
        [v] = s.scalars(select(Verification).where(Verification.watch.is_(True))).all()
    w.finish(v.id, base_sha=v.base_sha, head_sha=v.head_sha, speedup=-0.08)
    return v


def speedup(base: str, head: str) -> float:
    """The planted effect: −8% when the range base..head holds the culprit."""
    chain = [appkit.BASE_SHA, *COMMITS]
    return -0.08 if chain.index(base) < chain.index(CULPRIT) <= chain.index(head) else 0.0


def steps_running(w: World) -> list[Verification]:
    with w.svc.db.session() as s:
        return list(
            s.scalars(
                select(Verification).where(
                    Verification.inquiry_id.is_not(None), Verification.state == "dispatched"
                )
            )
        )


def inquiry(w: World) -> Inquiry:
    with w.svc.db.session() as s:
        [q] = s.scalars(select(Inquiry)).all()
        return q


def measure_steps(w: World, limit: int) -> int:
    """Finish the steps the inquiry starts, with the planted effect, `limit` at most;
    how many ran."""
    done = 0
    while done < limit and (running := steps_running(w)):
        [v] = running
        effect = speedup(v.base_sha, v.head_sha)
        w.finish(v.id, base_sha=v.base_sha, head_sha=v.head_sha, speedup=effect, round_cv=0.01)
        done += 1
    return done


def test_a_planted_regression_among_eight_merges_is_bisected_to_its_pr_and_alerted_once(
    w: World, tmp_path: Path
) -> None:
    suspected(w)
    q = inquiry(w)
    assert (q.state, q.good_sha, q.bad_sha) == ("confirming", appkit.BASE_SHA, COMMITS[-1])
    assert measure_steps(w, 2) == 2  # the confirmation, then the first bisection step
    assert inquiry(w).state == "bisecting", (inquiry(w).steps, inquiry(w).end_reason)
    # The App restarts mid-bisection: a new process on the same database goes on.
    w.svc.db.dispose()
    w.svc = runtime.build(w.svc.settings, immediate=True)
    w.app = create_app(svc=w.svc)
    w.client = w.app.test_client()
    w.reconcile()
    inquiries.resume(w.svc)
    assert measure_steps(w, 9) == 2
    q = inquiry(w)
    assert q.state == "alerted", (q.steps, q.end_reason)
    assert (q.culprit_sha, q.culprit_pr) == (CULPRIT, 44)
    kinds = [st["kind"] for st in q.steps]
    assert kinds == ["confirm", "bisect", "bisect", "bisect"]  # ⌈log₂ 8⌉ = 3 steps
    # Alerted once: again after another pass of the reconciler and a second resume.
    w.reconcile()
    inquiries.resume(w.svc)
    w.settle()
    alerts = [b for b in w.github.comments_on(appkit.UPSTREAM, 44) if "regression" in b.body]
    assert len(alerts) == 1
    body = alerts[0].body
    assert CULPRIT[:10] in body
    assert "cc @alice" in body
    # The culprit's change, from the narrowest measured range ending at it.
    assert f"..`{CULPRIT[:10]}`)" in body
    assert "/rsi false-alarm" in body
    assert w.github.pulls[appkit.UPSTREAM.lower()][44].labels == ["perf-regression"]
    for n in range(40, 48):
        if n != 44:
            assert not w.github.comments_on(appkit.UPSTREAM, n)
    # The confirming rerun is a second point of the merge; the bisection steps are none.
    with w.svc.db.session() as s:
        points = s.scalars(select(SeriesPoint).order_by(SeriesPoint.id)).all()
        assert [(p.parent_sha, p.sha) for p in points] == [(appkit.BASE_SHA, COMMITS[-1])] * 2
    # The steps leave no check run on the commits they measured: the merge's own stays.
    assert [r.head_sha for r in w.github.check_runs.values()] == [COMMITS[-1]]
    w.github.assert_clean()


def test_an_alarm_the_rerun_does_not_confirm_is_cleared_and_nobody_is_alerted(w: World) -> None:
    suspected(w)
    [step] = steps_running(w)
    w.finish(step.id, base_sha=step.base_sha, head_sha=step.head_sha, speedup=0.0, round_cv=0.01)
    q = inquiry(w)
    assert q.state == "cleared", (q.steps, q.end_reason)
    assert not steps_running(w)
    assert all(not w.github.comments_on(appkit.UPSTREAM, n) for n in range(40, 48))
    with w.svc.db.session() as s:
        ledger = inquiries.quality(s, [q.series_id])[q.series_id]
    assert (ledger.raised, ledger.cleared, ledger.alerted) == (1, 1, 0)


def alert(w: World) -> Inquiry:
    """The whole hunt, no restart: the alerted inquiry."""
    suspected(w)
    assert measure_steps(w, 9) == 4
    q = inquiry(w)
    assert q.state == "alerted", (q.steps, q.end_reason)
    return q


def test_maintainers_answer_an_alert_and_the_ledger_counts_it(shaped: World) -> None:
    w = shaped
    q = alert(w)
    w.github.set_permission(appkit.UPSTREAM, "reader-rae", "read")
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    say(w, 44, "/rsi false-alarm", "c-reader", user="reader-rae")  # not theirs to answer
    assert inquiry(w).triage is None
    # Listed under `trigger.allow`: may run commands, not judge an alert.
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG + "trigger:\n  allow: [al]\n")
    w.github.set_permission(appkit.UPSTREAM, "al", "read")
    w.svc._config_seen.clear()
    say(w, 44, "/rsi false-alarm", "c-allowed", user="al")
    assert inquiry(w).triage is None
    say(w, 44, "/rsi justified", "c-writer")
    q = inquiry(w)
    assert (q.triage, q.triaged_by) == ("justified", WRITER)
    [told] = [c.body for c in w.github.comments_on(appkit.UPSTREAM, 44) if "recorded" in c.body]
    assert "justified" in told
    say(w, 43, "/rsi false-alarm", "c-elsewhere")  # a PR with no alert
    bodies = [c.body for c in w.github.comments_on(appkit.UPSTREAM, 43)]
    assert bodies[0] == "/rsi false-alarm"
    assert "no regression alert" in bodies[1]
    refused = [c.body for c in w.github.comments_on(appkit.UPSTREAM, 44) if "reader-rae" in c.body]
    assert len(refused) == 1  # the App's answer: for writers only
    assert "write access" in refused[0]
    with w.svc.db.session() as s:
        ledger = inquiries.quality(s, [q.series_id])[q.series_id]
    assert (ledger.raised, ledger.alerted, ledger.justified, ledger.precision) == (1, 1, 1, 1.0)
    page = w.client.get(w.svc.history_url(appkit.UPSTREAM).split("://", 1)[1].split("/", 1)[1])
    text = page.get_data(as_text=True)
    assert CULPRIT[:10] in text
    assert "justified" in text


def test_a_push_never_replaces_an_inquiry_s_queued_step(w: World) -> None:
    """Pushes batch with the watch's own queued verifications only: a bisection step
    waiting for a runner is not superseded, nor its range taken over."""
    with w.svc.db.session() as s:
        step = store.create(
            s,
            store.NewVerification(
                repo=appkit.UPSTREAM,
                task="cosyvoice3",
                base_sha=COMMITS[0],
                head_sha=COMMITS[3],
                head_repo=appkit.UPSTREAM,
                head_ref=COMMITS[3],
                gpus=["H200"],
                rounds=4,
                modes=["streaming"],
                candidate={},
                trigger="bisect",
                watch=True,
                inquiry_id=1,
            ),
        )
        assert step.state == "queued"
        assert watch.base_for(s, appkit.UPSTREAM, "cosyvoice3", COMMITS[6]) == (COMMITS[6], [])
        assert not watch.measured(s, appkit.UPSTREAM, COMMITS[3])
        assert not watch.covered(s, appkit.UPSTREAM, COMMITS[0])


def test_a_step_is_judged_on_its_series_row_whichever_way_the_metric_points() -> None:
    """A latency row regressed +9% [7, 11] against a confirmed +8% (lower is better): the
    range holds the change. The same interval on a throughput row would not."""
    step = {"kind": "bisect", "verdict": "regressed", "ci_low_pct": 7.0, "ci_high_pct": 11.0}
    assert inquiries._side_of(step, -8.0, -1.0) == "bad"
    assert inquiries._side_of({**step, "verdict": "improved"}, -8.0, 1.0) == "good"
    # An interval across half the change: its own verdict decides.
    across = {"kind": "bisect", "verdict": "regressed", "ci_low_pct": -12.0, "ci_high_pct": -3.0}
    assert inquiries._side_of(across, -8.0) == "bad"
    assert inquiries._side_of({**across, "verdict": "inconclusive"}, -8.0) is None


def test_the_suspect_of_a_lower_is_better_series_is_its_largest_rise(w: World) -> None:
    key = SeriesKey(
        appkit.UPSTREAM, "cosyvoice3", "H200", "d", "i", "streaming", 8, "latency_p95_s"
    )
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    with w.svc.db.session() as s:
        series = open_series(s, key, now)
        for i, (sha, pct) in enumerate([("a" * 40, 12.0), ("b" * 40, 0.5)]):
            point = NewPoint(sha, str(i) * 40, f"v-{i}", pct, pct - 2, pct + 2, "", pairs=4)
            add_to(s, series, point, now)
        assert inquiries.suspect(s, series, ("a" * 40, "b" * 40), "regression") == "a" * 40


def test_one_range_is_hunted_once_whichever_gpu_saw_it(w: World) -> None:
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    with w.svc.db.session() as s:
        h100 = open_series(
            s, SeriesKey(appkit.UPSTREAM, "t", "H100", "d", "i", "streaming", 8, "m"), now
        )
        h200 = open_series(
            s, SeriesKey(appkit.UPSTREAM, "t", "H200", "d", "i", "streaming", 8, "m"), now
        )
        assert inquiries.open_for(s, h100, "regression", "a" * 40, "b" * 40, now) is not None
        assert inquiries.open_for(s, h200, "regression", "a" * 40, "b" * 40, now) is None


def test_two_workers_advancing_at_once_alert_once(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain's `follow` and the reconciler's `resume` at the same instant: the
    inquiry's lease lets one decide; the alert is written once (SQLite has no row locks)."""
    v = suspected(w)
    with w.svc.db.session() as s:
        q = s.scalars(select(Inquiry)).one()
        q.state, q.verification_id = "bisecting", None
        q.commits, q.lo_sha, q.hi_sha = list(COMMITS), COMMITS[3], COMMITS[4]
        q.steps = [
            {
                "kind": "confirm",
                "base": q.good_sha,
                "head": q.bad_sha,
                "verification_id": v.id,
                "verdict": "regressed",
                "change_pct": -8.0,
            }
        ]
        s.execute(delete(PullWrite))
        qid = q.id
    real = inquiries._alert

    def slow(*args: Any, **kwargs: Any) -> None:
        time.sleep(1.0)  # the other worker tries meanwhile, having read the same row
        real(*args, **kwargs)

    monkeypatch.setattr(inquiries, "_alert", slow)
    monkeypatch.setattr(w.svc.queue, "write", lambda *a: None)
    w.at_once(lambda: inquiries.advance(w.svc, qid), lambda: inquiries.advance(w.svc, qid))
    with w.svc.db.session() as s:
        kinds = [r.kind for r in s.scalars(select(PullWrite))]
    assert sorted(kinds) == ["check", "comment", "label"]  # each once


def confirmed(w: World) -> None:
    """The eight merges pushed, the suspicion confirmed: the first bisection step runs."""
    suspected(w)
    [rerun] = steps_running(w)
    w.finish(rerun.id, base_sha=rerun.base_sha, head_sha=rerun.head_sha, speedup=-0.08)
    assert inquiry(w).state == "bisecting"


def test_a_failed_step_is_measured_again_and_a_confirmed_regression_is_told_anyway(
    w: World,
) -> None:
    confirmed(w)
    [first] = steps_running(w)
    w.complete(first.id, "H200", "failure")
    w.settle()
    [again] = steps_running(w)  # the same range, once more
    assert (again.base_sha, again.head_sha) == (first.base_sha, first.head_sha)
    w.complete(again.id, "H200", "failure")
    w.settle()
    q = inquiry(w)
    assert q.state == "unresolved", (q.steps, q.end_reason)
    assert not steps_running(w)
    # Confirmed, not traced: said once, as an issue naming the range that holds it.
    [issue] = list(w.github.issues[appkit.UPSTREAM.lower()].values())
    assert issue.labels == ["perf-regression"]
    assert "not traced to one commit" in (issue.body or "")
    assert f"`{appkit.BASE_SHA[:10]}`..`{COMMITS[-1][:10]}`" in (issue.body or "")
    inquiries.resume(w.svc)
    w.settle()
    assert len(w.github.issues[appkit.UPSTREAM.lower()]) == 1
    # A writer answers on that issue (there is no PR to answer on): the ledger counts it.
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    on_issue = command(w.github, issue.number, "/rsi justified", WRITER)
    del on_issue["issue"]["pull_request"]
    assert w.deliver("issue_comment", on_issue, "c-on-issue") == 202
    w.settle()
    assert (inquiry(w).triage, inquiry(w).triaged_by) == ("justified", WRITER)
    # On anyone else's issue an answer is nothing: no reaction, no reply, no lookup.
    w.github.add_comments(appkit.UPSTREAM, issue.number + 1, 1, body="hello", user="al")
    elsewhere = command(w.github, issue.number + 1, "/rsi false-alarm", "reader-rae")
    del elsewhere["issue"]["pull_request"]
    before = len(w.github.requests)
    assert w.deliver("issue_comment", elsewhere, "c-elsewhere") == 202
    w.settle()
    assert len(w.github.requests) == before
    assert inquiry(w).triage == "justified"
    w.github.assert_clean()


def test_turning_the_watch_off_ends_its_hunts(w: World) -> None:
    confirmed(w)
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", "watch: false\n")
    w.svc._config_seen.clear()  # a minute later: the file is read again
    inquiries.resume(w.svc)
    q = inquiry(w)
    assert (q.state, (q.end_reason or {}).get("code")) == ("unresolved", "watch-off")


def test_the_first_parent_chain_walks_on_where_the_compare_page_stops(w: World) -> None:
    """A push whose merges brought more commits than one compare page: the chain of the
    default branch's own commits is walked back commit by commit."""
    merges(w)
    page = w.github.repo(appkit.UPSTREAM).compares[f"{appkit.BASE_SHA}...{COMMITS[-1]}"]
    page["commits"] = COMMITS[5:]  # the page holds the newest three only
    page["total_commits"] = 300
    assert w.svc.github.first_parents(appkit.UPSTREAM, appkit.BASE_SHA, COMMITS[-1]) == COMMITS
    assert w.svc.github.first_parents(appkit.UPSTREAM, appkit.BASE_SHA, COMMITS[-1], 5) is None
    w.github.assert_clean()


def test_eight_merges_pushed_one_by_one_read_true_on_the_page_and_the_check(w: World) -> None:
    """What a maintainer reads, each merge pushed on its own: eight points, one cliff of
    about −8% (the confirming rerun pooled into the fifth merge, not a second step), each
    point naming its PR; the fifth merge's `rsi/watch` check run says the hunt as it goes
    and ends naming the culprit PR; a false alarm takes the label off."""
    merges(w)
    before = appkit.BASE_SHA
    for i, sha in enumerate(COMMITS):
        w.github.set_compare(appkit.UPSTREAM, before, sha, commits=[sha])
        push(w, before, sha, f"push-{i}")
        with w.svc.db.session() as s:
            [v] = s.scalars(
                select(Verification).where(
                    Verification.watch.is_(True), Verification.head_sha == sha
                )
            ).all()
        effect = speedup(before, sha)
        w.finish(v.id, base_sha=before, head_sha=sha, speedup=effect, round_cv=0.01)
        before = sha
    q = inquiry(w)
    assert (q.good_sha, q.bad_sha) == (COMMITS[3], CULPRIT)
    [run] = [r for r in w.github.check_runs.values() if r.head_sha == CULPRIT]
    assert run.name == "rsi/watch"
    assert "confirming with a fresh rerun" in run.output["title"]
    assert run.conclusion is not None  # the measurement's conclusion stays
    measure_steps(w, 9)
    q = inquiry(w)
    assert (q.state, q.culprit_pr) == ("alerted", 44), (q.steps, q.end_reason)
    with w.svc.db.session() as s:
        [view] = history.history(s, appkit.UPSTREAM, history.Filter())
    assert [p.sha for p in view.points] == COMMITS  # each merge once
    assert [p.pr_number for p in view.points] == list(range(40, 48))
    assert [p.pr_title for p in view.points] == [f"merge {i}" for i in range(1, 9)]
    assert [p.sha for p in view.points if p.change_pct < -4] == [CULPRIT]  # one cliff
    assert len(view.points[4].measurements) == 2  # the watch's and the confirming rerun
    cliff = view.points[4].index / view.points[3].index - 1
    assert -0.11 < cliff < -0.05, cliff
    # The seven undecided merges each measured the same +1.3% (one synthetic seed): the
    # index drifts up, and its band says how little that drift means.
    last = view.points[-1]
    assert last.band_low is not None
    assert last.band_high is not None
    assert (last.band_high - last.band_low) / 2 / last.index > 0.08
    title, summary = run.output["title"], run.output["summary"]
    assert "traced to #44" in title, title
    assert f"[#44](https://github.com/{appkit.UPSTREAM}/pull/44)" in summary
    assert "Claim `NONE`" not in summary
    said = [h.get("output", {}).get("title", "") for h in run.history]
    assert any("confirming" in t for t in said)
    assert w.github.pulls[appkit.UPSTREAM.lower()][44].labels == ["perf-regression"]
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    say(w, 44, "/rsi false-alarm", "answer-1")
    assert w.github.pulls[appkit.UPSTREAM.lower()][44].labels == []
    assert "answered: false alarm" in run.output["title"]
    say(w, 44, "/rsi false-alarm", "answer-2")  # the label is gone already: done, no error
    with w.svc.db.session() as s:
        rows = s.scalars(select(PullWrite).where(PullWrite.kind == "unlabel")).all()
        assert [(r.done_at is not None, r.error) for r in rows] == [(True, None)] * 2
    w.github.assert_clean()


def test_a_hunt_left_unresolved_goes_on_when_a_writer_comments_bisect_on_its_issue(
    w: World,
) -> None:
    """The untraced regression's issue names a command that works on merged code: a
    writer's `/rsi bisect` there resumes the hunt from the range it narrowed, with a step
    budget of its own; the culprit is alerted on its PR and said on the same issue (no
    second issue); anyone else is refused, and a hunt that is not unresolved says so."""
    confirmed(w)
    for _ in range(2):  # the first bisection step fails twice: unresolved
        [step] = steps_running(w)
        w.complete(step.id, "H200", "failure")
        w.settle()
    assert inquiry(w).state == "unresolved"
    [issue] = list(w.github.issues[appkit.UPSTREAM.lower()].values())
    assert "comment `/rsi bisect` here" in (issue.body or "")

    def on_issue(body: str, user: str, delivery: str) -> None:
        payload = command(w.github, issue.number, body, user)
        del payload["issue"]["pull_request"]
        assert w.deliver("issue_comment", payload, delivery) == 202
        w.settle()

    w.github.set_permission(appkit.UPSTREAM, "reader-rae", "read")
    on_issue("/rsi bisect", "reader-rae", "c-reader")
    assert inquiry(w).state == "unresolved"
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    on_issue("/rsi bisect 1111111..8888888", WRITER, "c-range")  # takes no range of its own
    assert inquiry(w).state == "unresolved"
    said = w.github.comments_on(appkit.UPSTREAM, issue.number)[-1].body
    assert "1111111..8888888" in said
    assert "/rsi bisect" in said  # the help names the command as it is
    on_issue("/rsi bisect", WRITER, "c-writer")
    q = inquiry(w)
    assert (q.state, q.resumed_by) == ("bisecting", WRITER)
    replies = [c.body for c in w.github.comments_on(appkit.UPSTREAM, issue.number)]
    assert any("the hunt goes on from" in b for b in replies)
    assert measure_steps(w, 9) == 3  # ⌈log₂ 8⌉ steps of its own
    q = inquiry(w)
    assert (q.state, q.culprit_pr) == ("alerted", 44), (q.steps, q.end_reason)
    assert len(w.github.issues[appkit.UPSTREAM.lower()]) == 1  # said on the same issue
    said = [c.body for c in w.github.comments_on(appkit.UPSTREAM, issue.number)]
    assert any(CULPRIT[:10] in b and "regression" in b for b in said)
    assert any("regression" in c.body for c in w.github.comments_on(appkit.UPSTREAM, 44))
    on_issue("/rsi bisect", WRITER, "c-again")
    last = w.github.comments_on(appkit.UPSTREAM, issue.number)[-1].body
    assert "nothing to resume: this hunt is alerted" in last
    w.github.assert_clean()


def test_a_false_alarm_takes_the_label_off_the_pr_and_the_alert_issue(w: World) -> None:
    suspected(w)
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG + "  alert_issue: true\n")
    w.svc._config_seen.clear()
    assert measure_steps(w, 9) == 4
    assert inquiry(w).state == "alerted"
    [issue] = list(w.github.issues[appkit.UPSTREAM.lower()].values())
    assert issue.labels == ["perf-regression"]
    assert w.github.pulls[appkit.UPSTREAM.lower()][44].labels == ["perf-regression"]
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    say(w, 44, "/rsi false-alarm", "c-false")
    w.settle()
    assert w.github.pulls[appkit.UPSTREAM.lower()][44].labels == []
    assert w.github.issues[appkit.UPSTREAM.lower()][issue.number].labels == []
    w.github.assert_clean()


def test_a_bisection_step_that_decides_neither_half_is_measured_again(w: World) -> None:
    """Noise that puts a step's interval across half the confirmed change is measured
    once more before the hunt gives up (the real runner's test met it under load)."""
    confirmed(w)
    [first] = steps_running(w)
    w.finish(
        first.id, base_sha=first.base_sha, head_sha=first.head_sha, speedup=-0.02, round_cv=0.04
    )
    q = inquiry(w)
    assert q.state == "bisecting", (q.steps, q.end_reason)
    assert q.steps[-2]["retry"] is True  # the undecided step, kept and marked
    assert q.steps[-2]["verdict"] == "inconclusive"
    [again] = steps_running(w)
    assert (again.base_sha, again.head_sha) == (first.base_sha, first.head_sha)
    assert measure_steps(w, 9) == 3
    q = inquiry(w)
    assert (q.state, q.culprit_pr) == ("alerted", 44), (q.steps, q.end_reason)


def test_a_hunt_s_steps_wait_for_the_watch_s_day_budget_then_go_on(w: World) -> None:
    """The confirming rerun and the bisection steps dispatch within the watch's GPU
    minutes a day, counting what the watch's own measurement recorded: past them the
    hunt waits (nothing dispatched); with room again, the reconciler's pass goes on."""
    merges(w)
    tight = CONFIG + "  gpu_minutes_per_day: 5\n"
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", tight)
    push(w, appkit.BASE_SHA, COMMITS[-1], "push-1")
    with w.svc.db.session() as s:
        [v] = s.scalars(select(Verification).where(Verification.watch.is_(True))).all()
    dispatched = len(w.github.dispatches)
    w.finish(v.id, base_sha=v.base_sha, head_sha=v.head_sha, speedup=-0.08, gpu_minutes=True)
    with w.svc.db.session() as s:
        assert watch.minutes_today(s, appkit.UPSTREAM, dt.datetime.now(dt.UTC)) > 5
    q = inquiry(w)
    assert q.state == "confirming"
    assert steps_running(w) == []
    assert len(w.github.dispatches) == dispatched  # the confirmation waits for the budget
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG)  # a day's room again
    w.svc._config_seen.clear()  # a minute later: the file is read again
    w.reconcile()
    inquiries.resume(w.svc)
    w.settle()
    assert len(steps_running(w)) == 1
