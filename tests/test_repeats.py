"""One commit measured twice on a PR: pooled, compared, and said under the ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot import repeats
from tests import appkit
from tests.standin import GitHubStandIn
from tests.test_reviews import command
from tests.worlds import World, world

B = "0" * 40  # the base


def head(delta: float, lo: float, hi: float, **extra: object) -> dict[str, object]:
    return {
        "delta_pct": delta,
        "ci_low_pct": lo,
        "ci_high_pct": hi,
        "metric": "throughput_qps",
        "mode": "streaming",
        "concurrency": 8,
        **extra,
    }


def test_two_measurements_of_a_commit_are_pooled_and_compared() -> None:
    [r] = repeats.repeats(
        [
            ("a" * 40, B, "H200", head(13.1, 10.0, 16.3)),
            ("a" * 40, B, "H200", head(8.0, 5.0, 11.1)),
            ("a" * 40, B, "H100", head(9.0, 7.0, 11.0)),  # once on H100: nothing to pool
            ("a" * 40, "f" * 40, "H200", head(4.0, 1.0, 7.0)),  # against another base
            ("b" * 40, B, "H200", head(1.0, -1.0, 3.0)),
        ]
    )
    assert (r.sha, r.gpu, len(r.values)) == ("a" * 40, "H200", 2)
    assert 8.0 < r.pooled.delta_pct < 13.1
    assert r.pooled.ci_high_pct - r.pooled.ci_low_pct < 6.0  # narrower than either
    assert r.difference_pct == pytest.approx(-5.1, abs=0.05)
    assert not r.within_noise  # ±4.3 points is what two such sessions may differ by
    [close] = repeats.repeats(
        [("c" * 40, B, "H200", head(10.0, 7.0, 13.0)), ("c" * 40, B, "H200", head(11.0, 8.0, 14.0))]
    )
    assert close.within_noise
    other_row = [
        ("d" * 40, B, "H200", head(5.0, 3.0, 7.0)),
        ("d" * 40, B, "H200", head(5.0, 3.0, 7.0, concurrency=16)),
    ]
    assert repeats.repeats(other_row) == []  # another row of the study is not a repeat
    assert (
        repeats.repeats([("e" * 40, B, "H200", {"delta_pct": None}), ("e" * 40, B, "H200", {})])
        == []
    )


@pytest.fixture
def w(tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world("embedded", tmp_path, github) as x:
        yield x


def test_the_comment_says_a_commit_measured_again(w: World) -> None:
    first = w.promote()
    w.finish(first, speedup=0.13)
    number = w.verification(first).pr_number or 0
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    w.deliver("issue_comment", command(w.github, number, "/rsi reverify", "mia"), "c1")
    w.settle()
    second = w.latest(number).id
    w.finish(second, speedup=0.08, seed=5)
    [body] = [
        c.body for c in w.github.comments_on(appkit.UPSTREAM, number) if "<!-- rsi-bot" in c.body
    ]
    sha = w.verification(first).head_sha[:10]
    assert f"**`{sha}` measured 2 times on H200**" in body
    assert "; pooled " in body
    assert "The last differs from the first by " in body
