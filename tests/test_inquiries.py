"""The hunt for a regression's culprit, through the stand-in GitHub: an alarm of the
watch's detector is confirmed by a fresh paired rerun, its range bisected along first
parents, and the culprit PR alerted once, even when the App restarts mid-bisection;
maintainers answer the alert and the ledger counts it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from bot import inquiries, runtime, watch
from bot.models import Inquiry, SeriesPoint, Verification
from bot.verification import store
from bot.web.app import create_app
from tests import appkit
from tests.standin import GitHubStandIn
from tests.test_life_words import WRITER, say
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
    merges(w)
    push(w, appkit.BASE_SHA, COMMITS[-1], "push-1")  # the eight came in one push
    with w.svc.db.session() as s:
        [v] = s.scalars(select(Verification).where(Verification.watch.is_(True))).all()
    w.finish(v.id, base_sha=v.base_sha, head_sha=v.head_sha, speedup=-0.08)
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
    merges(w)
    push(w, appkit.BASE_SHA, COMMITS[-1], "push-1")
    with w.svc.db.session() as s:
        [v] = s.scalars(select(Verification).where(Verification.watch.is_(True))).all()
    w.finish(v.id, base_sha=v.base_sha, head_sha=v.head_sha, speedup=-0.08)
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
    merges(w)
    push(w, appkit.BASE_SHA, COMMITS[-1], "push-1")
    with w.svc.db.session() as s:
        [v] = s.scalars(select(Verification).where(Verification.watch.is_(True))).all()
    w.finish(v.id, base_sha=v.base_sha, head_sha=v.head_sha, speedup=-0.08)
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
