"""What a handler says on a PR goes through the PR's outbox (`bot.pull_writes`), and
commands of one PR take turns (`bot.pull_lease`), through the stand-in GitHub."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from bot import pull_lease, pull_writes
from bot.models import Delivery, PullWrite, utcnow
from tests import appkit
from tests.standin import GitHubStandIn
from tests.test_life_words import WRITER, command, comments_posted, mentions, say
from tests.worlds import World, world

CONFIG = "gpus: [H200]\nrounds: 4\nmodes: [streaming]\nbudget: {max_rounds: 8}\n"
COMMENTS = r"/issues/\d+/comments$"


@pytest.fixture
def w(tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world("embedded", tmp_path, github) as x:
        yield x


def _pr(w: World) -> int:
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG)
    vid = w.promote()
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    return w.verification(vid).pr_number or 0


def _delivery(w: World, delivery: str) -> Delivery:
    with w.svc.db.session() as s:
        d = s.get(Delivery, delivery)
        assert d is not None
        return d


def _writes(w: World) -> list[PullWrite]:
    with w.svc.db.session() as s:
        return list(s.scalars(select(PullWrite).order_by(PullWrite.id)))


def test_a_reply_outlasts_a_github_outage(w: World) -> None:
    """A comments endpoint failing once used to lose the reply: the command was marked
    acted on, and the retried delivery found it done. Now the reply is retried alone."""
    number = _pr(w)
    since = len(w.github.requests)
    w.github.fail_next("POST", COMMENTS, 502)
    say(w, number, "/rsi status", "c-status")
    failed, reply = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert failed == reply  # tried again, the same words
    assert [c.body for c in w.github.comments_on(appkit.UPSTREAM, number)].count(reply) == 1
    assert _delivery(w, "c-status").status == "done"
    [react, said] = _writes(w)[-2:]
    assert (react.kind, react.attempts, react.done_at is not None) == ("react", 0, True)
    assert (said.kind, said.attempts, said.error) == ("comment", 1, None)
    assert said.done_at is not None
    w.github.assert_clean()


def test_a_reply_github_keeps_refusing_is_given_up_with_its_error(w: World) -> None:
    number = _pr(w)
    w.github.fail_next("POST", COMMENTS, 502, times=3)  # RSI_EFFECT_ATTEMPTS in the world
    say(w, number, "/rsi status", "c-status")
    said = _writes(w)[-1]
    assert (said.kind, said.attempts) == ("comment", 3)
    assert said.done_at is not None
    assert "502" in (said.error or "")
    assert _delivery(w, "c-status").status == "done"  # the command itself was acted on
    assert pull_writes.stuck(w.svc.db) == []
    w.github.assert_clean()


def test_a_reply_due_later_is_carried_out_by_the_reconciler(w: World) -> None:
    number = _pr(w)
    with w.svc.db.session() as s:
        pull_writes.comment(s, appkit.UPSTREAM, number, "a reply a crashed worker left")
    assert pull_writes.due(w.svc.db) == [(appkit.UPSTREAM, number)]
    since = len(w.github.requests)
    w.reconcile()
    assert comments_posted(w, since) == ["a reply a crashed worker left"]
    assert pull_writes.due(w.svc.db) == []
    # A row another drainer claimed is left to it.
    with w.svc.db.session() as s:
        pull_writes.comment(s, appkit.UPSTREAM, number, "claimed elsewhere")
        s.flush()
        row = s.scalars(select(PullWrite).order_by(PullWrite.id.desc())).first()
        assert row is not None
        row.claimed_until = utcnow() + dt.timedelta(seconds=60)
    assert pull_writes.due(w.svc.db) == []
    w.svc.queue.write(appkit.UPSTREAM, number)
    assert comments_posted(w, since) == ["a reply a crashed worker left"]
    w.github.assert_clean()


def test_a_command_waits_while_another_of_the_pr_is_acted_on(w: World) -> None:
    number = _pr(w)
    since = len(w.github.requests)
    with pull_lease.held(w.svc.db, appkit.UPSTREAM, number, 60):
        body = command(w.github, number, "/rsi status", WRITER)
        assert w.deliver("issue_comment", body, "c-later") == 202
        d = _delivery(w, "c-later")
        assert d.status == "queued"
        assert "Busy" in (d.error or "")
        assert comments_posted(w, since) == []
        # The lease is the PR's: a second taker is refused while it is held.
        with pytest.raises(pull_lease.Busy), pull_lease.held(w.svc.db, appkit.UPSTREAM, number, 60):
            pass  # pragma: no cover - never entered
    w.svc.queue.process_delivery("c-later")
    w.settle()
    [reply] = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert "@maintainer-mia" in reply
    assert _delivery(w, "c-later").status == "done"
    w.github.assert_clean()
