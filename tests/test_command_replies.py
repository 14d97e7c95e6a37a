"""What `/rsi` commands answer a maintainer, through the stand-in GitHub: the words of
each reply read true (issue 22, item 5)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import appkit
from tests.standin import GitHubStandIn
from tests.test_life_words import WRITER, comments_posted, mentions, say
from tests.worlds import World, world

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
    assert "50 rounds is more than this repository's budget (8," in reply
    assert "`budget.max_rounds` in `.github/rsi.yml`" in reply
    assert "&#96;" not in reply
    reply = _reply(w, number, "/rsi reverify h999", "c-gpu")
    assert "H999 is not among this repository's GPUs (H200; `gpus` in `.github/rsi.yml`)" in reply
    w.github.assert_clean()
