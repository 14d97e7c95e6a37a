"""What `/rsi` commands answer a maintainer, through the stand-in GitHub: the words of
each reply read true."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.verification import machine as M
from bot.verification import reasons as R
from bot.verification.reasons import Reason
from tests import appkit
from tests.standin import GitHubStandIn
from tests.test_life_words import NEW_SHA, WRITER, comments_posted, evidence_comments, mentions, say
from tests.test_reviews import push
from tests.worlds import World, world

OTHER = "second-sam"
CONFIG = "gpus: [H200]\nrounds: 4\nmodes: [streaming]\nbudget: {max_rounds: 8}\n"


@pytest.fixture
def w(tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world("embedded", tmp_path, github) as x:
        yield x


def _pr(w: World) -> int:
    """A PR whose intake verification was cancelled: nothing runs on it."""
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG)
    vid = w.promote()
    number = w.verification(vid).pr_number or 0
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    say(w, number, "/rsi cancel", "c-cancel")
    return number


def _reply(w: World, number: int, body: str, delivery: str, user: str = WRITER) -> str:
    since = len(w.github.requests)
    say(w, number, body, delivery, user)
    [reply] = [b for b in comments_posted(w, since) if mentions(b, user)]
    return reply


def test_a_refusal_shows_its_code_spans_not_character_references(w: World) -> None:
    """The refusal once read "&#96;budget.max_rounds&#96; in &#96;.github/rsi.yml&#96;"."""
    number = _pr(w)
    reply = _reply(w, number, "/rsi reverify rounds=50", "c-over")
    assert "50 rounds is more than this repository's budget allows: from 3 to 8" in reply
    assert "`budget.max_rounds` in `.github/rsi.yml`" in reply
    assert "&#96;" not in reply
    reply = _reply(w, number, "/rsi reverify h999", "c-gpu")
    assert "H999 is not among this repository's GPUs (H200; `gpus` in `.github/rsi.yml`)" in reply
    w.github.assert_clean()


def test_a_merged_pr_is_not_invited_to_reverify(w: World) -> None:
    """Merging cancels what still runs: neither the check run nor the comment invites a
    `/rsi reverify` that a merged PR cannot use."""
    vid = w.promote()
    w.finish(vid)
    number = w.verification(vid).pr_number or 0
    assert w.deliver("pull_request", push(w.github, number, NEW_SHA, "openrsi-bot"), "p") == 202
    w.settle()
    running = w.latest(number)
    assert (running.head_sha, running.state) == (NEW_SHA, "dispatched")
    payload = push(w.github, number, NEW_SHA, "openrsi-bot")
    payload["action"] = "closed"
    payload["pull_request"].update(state="closed", merged=True)
    w.github.pulls[appkit.UPSTREAM.lower()][number].state = "closed"
    assert w.deliver("pull_request", payload, "merged") == 202
    w.settle()
    v = w.verification(running.id)
    assert v.state == "cancelled"
    [done] = [
        u for u in w.github.check_run_updates(v.check_run_id or 0) if u.get("status") == "completed"
    ]
    assert "the PR was merged" in done["output"]["summary"]
    assert "/rsi reverify" not in done["output"]["summary"]
    [comment] = evidence_comments(w, number)
    latest = next(line for line in comment.body.splitlines() if line.startswith("**Latest:"))
    assert "the PR was merged" in latest
    assert "/rsi reverify" not in latest
    w.github.assert_clean()


def test_status_says_a_true_expected_gpu_time(w: World) -> None:
    """The estimate comes from what this repository's runners recorded for the task;
    before any run it says there is none, and why."""
    vid = w.promote()
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    number = w.verification(vid).pr_number or 0
    first = _reply(w, number, "/rsi status", "c-status-0")
    assert "GPU time not estimated yet: no earlier run of `cosyvoice3` in this repository" in first
    w.finish(vid, gpu_minutes=True)
    spent = w.verification(vid).headline["H200"]["gpu_minutes"]["total"]  # type: ignore[index]
    assert w.deliver("pull_request", push(w.github, number, NEW_SHA, "openrsi-bot"), "p") == 202
    w.settle()
    reply = _reply(w, number, "/rsi status", "c-status")
    v = w.latest(number)
    assert v.estimate is not None
    # rounds until decided, none recorded yet: from the first look to the cap, and
    # what the run it learnt from spent lies inside
    est = v.estimate
    assert est["low"] <= spent <= est["high"]
    assert f"expected GPU time: {est['low']:.1f}–{est['high']:.0f} minutes, about " in reply
    assert "from 1 earlier run on H200" in reply
    w.github.assert_clean()


def test_too_many_rounds_are_answered_with_the_allowed_range(w: World) -> None:
    """`rounds=99999999999` was answered "must be a whole number": it is one."""
    number = _pr(w)
    reply = _reply(w, number, "/rsi reverify rounds=99999999999", "c-huge")
    assert "whole number" not in reply
    assert "99999999999 rounds is more than this repository's budget allows: from 3 to 8" in reply
    w.github.assert_clean()


def test_asking_for_what_runs_says_it_joined_it(w: World) -> None:
    """A maintainer asks while the intake's own run is under way: the request joined that
    verification, and the reply says so (not "is queued")."""
    vid = w.promote()
    number = w.verification(vid).pr_number or 0
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    reply = _reply(w, number, "/rsi reverify", "c-ask", WRITER)
    assert f"your request joined verification `{vid}`" in reply
    assert "**dispatched**" in reply
    assert "is queued" not in reply
    assert "told when it ends" in reply
    assert len(w.github.dispatches) == 1  # the running one is the answer
    w.github.assert_clean()


def test_asking_for_what_runs_joins_it_and_everyone_who_asked_is_told(w: World) -> None:
    """Two maintainers ask while the intake's own run is under way: each is answered that
    the request joined that verification (not "is queued"), and each is told at its end."""
    vid = w.promote()
    number = w.verification(vid).pr_number or 0
    for who in (WRITER, OTHER):
        w.github.set_permission(appkit.UPSTREAM, who, "write")
    for i, who in enumerate((WRITER, OTHER)):
        reply = _reply(w, number, "/rsi reverify", f"c-ask-{i}", who)
        assert f"your request joined verification `{vid}`" in reply
        assert "**dispatched**" in reply
        assert "is queued" not in reply
        assert "told when it ends" in reply
    assert len(w.github.dispatches) == 1  # the running one is the answer
    since = len(w.github.requests)
    w.finish(vid)
    assert w.verification(vid).state == "published"
    for who in (WRITER, OTHER):
        told = [b for b in comments_posted(w, since) if mentions(b, who)]
        assert len(told) == 1, (who, told)
    w.github.assert_clean()


def test_the_machine_tells_each_requester_but_the_one_who_cancelled() -> None:
    """`requested_by` holds every login that asked, space-separated."""
    from tests.test_machine import dispatched, run

    both = "alice bob"
    v, e = run(
        dispatched("H200", requested_by=both),
        M.RunCompleted("H200", "success"),
        M.BundleKept("H200"),
        M.EvidenceBuilt("improved"),
    )
    assert v.state == M.State.PUBLISHED
    assert [x for x in e if isinstance(x, M.Notify)] == [M.Notify("alice"), M.Notify("bob")]
    cancel = M.Cancel(Reason(R.CANCELLED_BY, {"user": "bob"}))
    _, e = run(dispatched("H200", requested_by=both), cancel)
    assert [x for x in e if isinstance(x, M.Notify)] == [M.Notify("alice")]


def test_a_requester_is_added_while_the_column_holds_them() -> None:
    from tests.test_machine import dispatched, run

    def asked(requested_by: str | None, *users: str) -> str | None:
        v, e = run(dispatched("H200", requested_by=requested_by), *map(M.AlsoAsked, users))
        assert e == []
        return v.requested_by

    assert asked(None, "alice") == "alice"
    assert asked("alice", "bob") == "alice bob"
    assert asked("alice bob", "alice") == "alice bob"
    assert asked(None) is None
    full = " ".join(["x" * 39, "y" * 39])
    assert asked(full, "z" * 39) == full  # no room: the reply does not promise it


def test_one_who_asks_as_the_measurement_ends_is_told() -> None:
    """Joining was a write beside the machine: an end written meanwhile told only those
    it had read. Now joining is an event: after the end, the newcomer is told at once."""
    from tests.test_machine import dispatched, run

    v, _ = run(
        dispatched("H200", requested_by="alice"),
        M.RunCompleted("H200", "success"),
        M.BundleKept("H200"),
        M.EvidenceBuilt("improved"),
    )
    _, e = run(v, M.AlsoAsked("bob"))
    assert e == [M.Notify("bob")]
    _, e = run(v, M.AlsoAsked("alice"))  # told already
    assert e == []


def test_a_merged_prs_comment_invites_no_command() -> None:
    """The comment rewritten when merging cancelled what ran: neither the partial results
    nor main having moved on invite a `/rsi reverify` a merged PR cannot use."""
    from bot import messages
    from evidence.render import COMMENT_MARKER
    from tests.test_app_messages_golden import hostile_verification

    published = hostile_verification("published")
    merged = hostile_verification("cancelled", "v-golden03")
    merged.end_reason = Reason(R.PR_CLOSED, {"state": "merged"}).to_json()
    text = messages.evidence_comment(
        [published, merged],
        current=merged.id,
        evidence=f"{COMMENT_MARKER}\nthe evidence",
        good=published,
        main_moved=3,
        base_ref="main",
        ledger_budget=20_000,
    )
    assert "**Partial results:**" in text
    assert "the PR was merged" in text
    assert "/rsi reverify" not in text
