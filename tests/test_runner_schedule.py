"""The schedule: interleaved, order-balanced rounds per mode and concurrency."""

from __future__ import annotations

from collections import Counter
from itertools import groupby

import pytest

from runners import schedule


def test_balanced_order() -> None:
    assert schedule.balanced(3) == [
        ("base", 1),
        ("head", 1),
        ("head", 2),
        ("base", 2),
        ("base", 3),
        ("head", 3),
    ]
    with pytest.raises(ValueError, match="at least 1"):
        schedule.balanced(0)


@pytest.mark.parametrize("rounds", [1, 2, 3, 4, 5, 8, 10])
def test_balanced_properties(rounds: int) -> None:
    order = schedule.balanced(rounds)
    sides = [s for s, _ in order]
    assert Counter(sides) == {"base": rounds, "head": rounds}
    assert max(len(list(g)) for _, g in groupby(sides)) <= 2  # never three in a row
    # each side's rounds are numbered 1..N in the order they run
    for side in ("base", "head"):
        assert [r for s, r in order if s == side] == list(range(1, rounds + 1))
    # with an even number of rounds the mean positions of the sides are equal
    pos = {s: [i for i, x in enumerate(sides) if x == s] for s in ("base", "head")}
    gap = abs(sum(pos["base"]) - sum(pos["head"])) / rounds
    assert gap == (0 if rounds % 2 == 0 else pytest.approx(1 / rounds))


def test_plan_counts_ids_and_grouping() -> None:
    plan = schedule.plan(["streaming", "non-streaming"], [1, 16], 3, 128, 8, accuracy=None)
    assert len(plan) == 2 * 2 * 3 * 2
    assert len({p.id for p in plan}) == len(plan)
    assert plan[0].id == "r1-base-stream-c1"
    assert plan[-1].id == "r3-head-nonstream-c16"
    # configurations run one after the other, each with its whole balanced schedule
    keys = [(p.mode, p.concurrency) for p in plan]
    assert [k for k, _ in groupby(keys)] == [
        ("streaming", 1),
        ("streaming", 16),
        ("non-streaming", 1),
        ("non-streaming", 16),
    ]
    for _, group in groupby(plan, key=lambda p: (p.mode, p.concurrency)):
        assert [(p.side, p.round) for p in group] == schedule.balanced(3)
    assert all(p.requests == 128 and p.warmup_requests == 8 and not p.accuracy for p in plan)
    assert plan[0].record() == {
        "id": "r1-base-stream-c1",
        "side": "base",
        "round": 1,
        "mode": "streaming",
        "concurrency": 1,
        "requests": 128,
        "warmup_requests": 8,
    }


def test_plan_accuracy_first_round_or_every_round() -> None:
    first = schedule.plan(["streaming", "non-streaming"], [1, 16], 2, 10, 0, accuracy="first")
    acc = [p.id for p in first if p.accuracy]
    assert acc == [
        "r1-base-stream-c1",
        "r1-head-stream-c1",
        "r1-base-nonstream-c1",
        "r1-head-nonstream-c1",
    ]
    every = schedule.plan(["streaming"], [4], 2, 10, 0, accuracy="every_round")
    assert all(p.accuracy for p in every)
