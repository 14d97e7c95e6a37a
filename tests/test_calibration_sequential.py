"""Calibration of the sequential design's paired analysis under slow level shifts
(docs/statistics.md, "Sequential rounds as pairs"), with fixed seeds and no processes.

The sequential design starts a server for every run, so its runs are minutes apart and
a shared VM's host speed moves between them. Simulated as the lent H200s behaved: the
host's speed sits at a level for a while (a run ends a level with probability 1/8, so
levels last about 8 runs), each level log-normal around nominal with SD 15%; every run
adds 1% of its own noise; rounds go base, head, head, base, … (ABBA), 10 a side.

Compared unpaired (Welch on the rounds) the levels are noise of SD 15%; paired, a
round's base and head run usually share a level and the pair difference keeps the 1%.
A level shift between a round's two runs makes that pair an outlier of ±20%: it stays
in the fit (`seqstats.paired_fit`). A trimmed mean would leave it out and find more, but
it would leave out as readily the runs a head is slow in — every run is a server start
of its own — and a head slow in one start of five would read as faster
(`test_a_head_slow_in_one_start_of_five_is_not_called_improved`).

Every study goes through both consumers: the engine (`build_study` on a bundle whose
manifest says `design: sequential, paired`, then `decide`, as the CLI runs it) on 10
rounds, and the runner's stop (a look every round: `seqstats.decide`, then
`decide_paired` from 3 rounds of each order, as runners/adaptive.py does).
Binomial tolerance as in test_calibration_drift.py: the one-sided 99% sampling error.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from evidence.policy import Policy
from evidence.study import build_study
from evidence.verdict import decide
from runners import seqstats as s
from tests.sources import QpsRun, qps_source

ROUNDS = 10
LEVEL_SD = 0.15
LEVEL_RUNS = 8.0  # the mean length of a level, in runs
RUN_SD = 0.01
Z99 = 2.326
DESIGN = s.Design(max_rounds=ROUNDS, threshold_pct=3.0)
PAIRED = {"name": "sequential", "paired": True, "unit": "round"}
UNPAIRED = {"name": "sequential", "paired": False, "unit": "round"}


def rounds(
    rng: random.Random, effect: float, slow: tuple[float, float] = (0.0, 0.0)
) -> list[QpsRun]:
    """One row's runs in execution order: ABBA rounds on a host with level shifts.
    `slow`: (p, factor) — each head start is `factor` slower with probability p."""
    level = rng.gauss(0.0, LEVEL_SD)
    runs: list[QpsRun] = []
    for r in range(1, ROUNDS + 1):
        for side in ("base", "head") if r % 2 else ("head", "base"):
            if runs and rng.random() < 1.0 / LEVEL_RUNS:
                level = rng.gauss(0.0, LEVEL_SD)
            log_qps = math.log(40.0) + level + rng.gauss(0.0, RUN_SD)
            if side == "head":
                log_qps += math.log1p(effect)
                if rng.random() < slow[0]:
                    log_qps += math.log(slow[1])
            runs.append(QpsRun(side, r, math.exp(log_qps)))
    return runs


def engine(runs: list[QpsRun], design: dict[str, object]) -> str:
    rows, _ = build_study([qps_source(runs, design=design)], Policy(), None)
    (row,) = [r for r in rows if r.primary]
    assert row.method == ("paired" if design["paired"] else "welch")
    return decide(rows, [])[0]


def runner(runs: list[QpsRun]) -> tuple[str, int]:
    """The runner's stop: a look after every round; the verdict and the rounds it took."""
    row = s.Row(DESIGN)
    for n in range(DESIGN.min_rounds, ROUNDS + 1):
        first = [r for r in runs if r.round <= n]
        base = [r.qps for r in first if r.side == "base"]
        head = [r.qps for r in first if r.side == "head"]
        second = [r % 2 == 1 for r in range(1, n + 1)]  # odd rounds: head ran second
        if not s.rounds_paired(second):
            look = s.decide(row, base, head)  # type: ignore[arg-type]
        else:
            look = s.decide_paired(row, base, head, second)  # type: ignore[arg-type]
        if look.verdict != s.CONTINUE:
            return look.verdict, n
    return s.INCONCLUSIVE, ROUNDS


def measure(
    effect: float, n: int, seed: int, slow: tuple[float, float] = (0.0, 0.0)
) -> dict[str, Counter[str]]:
    rng = random.Random(seed)
    out: dict[str, Counter[str]] = {"paired": Counter(), "welch": Counter(), "runner": Counter()}
    for _ in range(n):
        runs = rounds(rng, effect, slow)
        out["paired"][engine(runs, PAIRED)] += 1
        out["welch"][engine(runs, UNPAIRED)] += 1
        out["runner"][runner(runs)[0]] += 1
    print(effect, slow, {k: dict(v) for k, v in out.items()})
    return out


def _tol(p: float, n: int) -> float:
    return Z99 * math.sqrt(p * (1 - p) / n)


def test_an_a_a_under_level_shifts_rarely_claims_anything() -> None:
    n = 400
    m = measure(0.0, n, 1)
    for who in ("paired", "runner"):
        false = m[who]["improved"] + m[who]["regressed"]
        assert false / n <= 0.05 + _tol(0.05, n), m
    # and says so more often than Welch on the same rounds (measured: engine 0.40 against
    # Welch's 0.13; the runner's stop, equivalent, 0.56)
    assert m["paired"]["no-change"] / n >= 0.30, m
    assert m["paired"]["no-change"] >= 2 * m["welch"]["no-change"], m
    assert m["runner"]["equivalent"] / n >= 0.45, m


def test_a_planted_5_percent_under_level_shifts_is_found_far_more_often_paired() -> None:
    """The issue's target was 90% at 10 rounds a side; paired, untrimmed, it is 71%: a
    level shift falls inside about one pair in eight, and that pair stays in."""
    n = 400
    m = measure(0.05, n, 2)
    assert m["paired"]["improved"] / n >= 0.65 - _tol(0.65, n), m  # measured 0.71
    assert m["welch"]["improved"] / n <= 0.40, m  # the same bundles unpaired: 0.33
    assert m["runner"]["improved"] / n >= 0.65 - _tol(0.65, n), m  # measured 0.72
    assert m["paired"]["regressed"] == m["runner"]["regressed"] == 0, m


def test_a_head_slow_in_one_start_of_five_is_not_called_improved() -> None:
    """5% faster in most starts, 40% slower in one of five: about 6% slower in all. Only
    the studies where no slow start came up (0.8¹⁰ ≈ 11%) may read it faster."""
    n = 300
    m = measure(0.05, n, 5, slow=(0.2, 0.6))
    assert m["paired"]["improved"] / n <= 0.11 + _tol(0.11, n), m  # measured 0.09
    # The runner's stop looks after every round, so three lucky starts can end it
    # improved: 0.35 (the Welch stop before it: 0.31). docs/statistics.md.


def test_the_order_term_is_taken_out_from_three_rounds_of_each_order() -> None:
    """Whoever runs second is 4% faster: the fit's estimate is the effect."""
    rng = random.Random(4)
    second = [i % 2 == 0 for i in range(ROUNDS)]
    d = [0.01 + (0.04 if s2 else -0.04) + rng.gauss(0.0, 0.002) for s2 in second]
    mu, se, df = s.paired_fit(d, second)
    assert mu == pytest.approx(0.01, abs=0.002)
    assert (se < 0.002, df) == (True, ROUNDS - 2)


def test_rounds_are_paired_from_three_of_each_order() -> None:
    assert not s.rounds_paired([True, False, True, False, True])  # 3 and 2: Welch
    assert s.rounds_paired([True, False] * 3)
