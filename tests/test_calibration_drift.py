"""Calibration of the paired design under a drifting host (docs/statistics.md, "Paired
designs"), with fixed seeds and no processes.

The alternate design is simulated as it runs: both servers resident, short bursts
(`BURST_S` apart, the switch included) in ABBA order — pair 1 base then head, pair 2
head then base, … — so head runs second in every other pair. The host's speed is
multiplied into every burst:

- *level shifts*: the speed jumps to a new level, 10–30% above or below nominal, at
  random times a few minutes apart (the H200 machines' CPU speed moves this way);
- *fast noise*: independent from burst to burst (it changes within seconds), with a
  pair-difference SD of 2% (a GPU-bound server) or 20% (a CPU-bound one on a bad day);
- *order bias*: whoever runs second in a pair (just after the switch) is 3% faster,
  or slower.

Every study goes through both consumers of the pairs: the engine (`build_study` on a
bundle whose manifest says `design.paired`, then `decide`, as the CLI runs it) on a fixed
number of pairs, and the runner's sequential loop (`seqstats.decide_paired` after every
pair, up to `MAX_PAIRS`). The engine also judges the bundles the runner stopped, as in
use.

Binomial tolerance: a rate measured from n studies is allowed the one-sided 99% sampling
error at its target, z₀.₉₉·√(p(1−p)/n) — with 1,000 studies 1.6 points at 5%, with 400
studies 3.5 points at 90%. The measured figures are in docs/statistics.md.
"""

from __future__ import annotations

import bisect
import math
import random
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats as sstats

from evidence.load import Source
from evidence.policy import Policy
from evidence.study import build_study
from evidence.verdict import decide
from runners import seqstats as s
from tests.sources import QpsRun, qps_source

MAX_PAIRS = 20  # the sequential plan: at most 20 pairs (40 bursts) a row
FIXED_PAIRS = 10  # the engine's fixed design
BURST_S = 2.0  # one burst (≈ 1.5 s of requests) and the switch to the other server
Z99 = 2.326
DESIGN = s.Design(max_rounds=MAX_PAIRS, threshold_pct=3.0)


@dataclass(frozen=True)
class Drift:
    """How the host's speed moves, in logs (0.03: 3%)."""

    pair_sd: float  # SD of a pair's difference from burst-to-burst noise
    shift_every_s: float | None = None  # mean seconds between level shifts
    shift: tuple[float, float] = (0.10, 0.30)  # a level's distance from nominal
    order_bias: float = 0.0  # the second burst of a pair runs this much faster
    side_bias: float = 0.0  # head always runs this much faster (not an order effect)


FAST_2 = Drift(pair_sd=0.02)
FAST_20 = Drift(pair_sd=0.20)
SHIFTS = Drift(pair_sd=0.02, shift_every_s=180.0)
ORDER = Drift(pair_sd=0.02, order_bias=0.03)


class Host:
    """Piecewise-constant speed levels (a Poisson process of shifts) times fast noise."""

    def __init__(self, rng: random.Random, drift: Drift, horizon_s: float) -> None:
        self.rng, self.drift = rng, drift
        self.times: list[float] = []
        self.levels = [self._level()]
        t = 0.0
        while drift.shift_every_s is not None:
            t += rng.expovariate(1.0 / drift.shift_every_s)
            if t > horizon_s:
                break
            self.times.append(t)
            self.levels.append(self._level())

    def _level(self) -> float:
        if self.drift.shift_every_s is None:
            return 1.0
        lo, hi = self.drift.shift
        return 1.0 + self.rng.choice((-1.0, 1.0)) * self.rng.uniform(lo, hi)

    def speed(self, t: float) -> float:
        """The host's speed during a burst starting at `t` (time-weighted over it)."""
        end = t + BURST_S
        i = bisect.bisect_right(self.times, t)
        if i >= len(self.times) or self.times[i] >= end:
            level = self.levels[i]
        else:  # a shift inside the burst: each level for its share
            cut = self.times[i]
            level = ((cut - t) * self.levels[i] + (end - cut) * self.levels[i + 1]) / BURST_S
        return level * math.exp(self.rng.gauss(0.0, self.drift.pair_sd / math.sqrt(2.0)))


def alternate(
    rng: random.Random, drift: Drift, effect: float, pairs: int
) -> tuple[list[float], list[float], list[bool]]:
    """One row of the alternate design: per pair base and head throughput (req/s), and
    whether head ran second (ABBA: pair 1 base-head, pair 2 head-base, …)."""
    host = Host(rng, drift, horizon_s=2 * pairs * BURST_S + 600.0)
    t0 = rng.uniform(0.0, 600.0)  # a random phase against the shifts
    base: list[float] = []
    head: list[float] = []
    second: list[bool] = []
    for i in range(pairs):
        order = ("base", "head") if i % 2 == 0 else ("head", "base")
        for k, side in enumerate(order):
            qps = 40.0 * host.speed(t0 + (2 * i + k) * BURST_S)
            qps *= math.exp(drift.order_bias) if k == 1 else 1.0
            if side == "head":
                qps *= (1.0 + effect) * math.exp(drift.side_bias)
                head.append(qps)
            else:
                base.append(qps)
        second.append(order[1] == "head")
    return base, head, second


def _source(base: list[float], head: list[float], second: list[bool]) -> Source:
    """A bundle of the alternate design, its runs in execution order."""
    runs: list[QpsRun] = []
    for i, (b, h, hs) in enumerate(zip(base, head, second, strict=True)):
        pair = (("base", b), ("head", h)) if hs else (("head", h), ("base", b))
        runs += [QpsRun(side, i + 1, qps) for side, qps in pair]
    return qps_source(runs, design={"name": "alternate", "paired": True, "unit": "burst"})


def engine(base: list[float], head: list[float], second: list[bool]) -> str:
    """The study's verdict, as the CLI reaches it."""
    rows, _ = build_study([_source(base, head, second)], Policy(), None)
    (row,) = [r for r in rows if r.primary]
    assert row.method == "paired"
    assert row.pairs == len(base)
    return decide(rows, [])[0]


def sequential(
    rng: random.Random, drift: Drift, effect: float
) -> tuple[str, int, tuple[list[float], list[float], list[bool]]]:
    """The runner's loop: a look after every pair; the verdict, the pairs run, and them."""
    base, head, second = alternate(rng, drift, effect, MAX_PAIRS)
    row = s.Row(DESIGN)
    for n in range(DESIGN.min_rounds, MAX_PAIRS + 1):
        look = s.decide_paired(row, base[:n], head[:n], second[:n])
        if look.verdict != s.CONTINUE:
            return look.verdict, n, (base[:n], head[:n], second[:n])
    return s.INCONCLUSIVE, MAX_PAIRS, (base, head, second)


@dataclass
class Measured:
    runner: Counter[str]
    pairs: float  # the runner's pairs a row, on average
    engine_stopped: Counter[str]  # the engine on the bundles the runner stopped
    engine_fixed: Counter[str]  # the engine on FIXED_PAIRS pairs
    n: int

    def rate(self, which: str, *verdicts: str) -> float:
        counts: Counter[str] = getattr(self, which)
        return sum(counts[v] for v in verdicts) / self.n


def measure(drift: Drift, effect: float, n: int, seed: int, fixed: bool = True) -> Measured:
    rng = random.Random(seed)
    runner: Counter[str] = Counter()
    stopped: Counter[str] = Counter()
    fixed_c: Counter[str] = Counter()
    pairs = 0
    for _ in range(n):
        verdict, k, data = sequential(rng, drift, effect)
        runner[verdict] += 1
        pairs += k
        stopped[engine(*data)] += 1
        if fixed:
            fixed_c[engine(*alternate(rng, drift, effect, FIXED_PAIRS))] += 1
    m = Measured(runner, pairs / n, stopped, fixed_c, n)
    print(drift, effect, m)
    return m


def _tol(p: float, n: int) -> float:
    return Z99 * math.sqrt(p * (1 - p) / n)


FALSE = ("improved", "regressed")


# ------------------------------------------------------------------ the targets


@pytest.mark.parametrize(
    ("drift", "seed"), [(FAST_2, 1), (SHIFTS, 2), (ORDER, 3), (FAST_20, 4)], ids=str
)
def test_a_a_rarely_claims_anything_under_drift(drift: Drift, seed: int) -> None:
    """A/A: improved or regressed in at most 5% (runner, and the engine on fixed pairs)."""
    n = 600
    m = measure(drift, 0.0, n, seed)
    assert m.rate("runner", *FALSE) <= 0.05 + _tol(0.05, n), m
    assert m.rate("engine_fixed", *FALSE) <= 0.05 + _tol(0.05, n), m
    # The engine's fixed 95% interval on the bundles the runner stopped does not allow
    # for the looks: where the practical threshold binds (pair SD 2%) nothing false gets
    # through, but at pair SD 20% a bundle the runner left inconclusive after 20 pairs is
    # one more chance for the fixed interval (measured 8.2%: the runner's 4.3% and 3.8%
    # more). The runner's own decision is the one that holds alpha.
    limit = 0.10 if drift is FAST_20 else 0.05 + _tol(0.05, n)
    assert m.rate("engine_stopped", *FALSE) <= limit, m
    if drift is FAST_20:
        # honest at 20% noise: nothing decided within 20 pairs, nothing claimed
        assert m.rate("runner", s.INCONCLUSIVE) >= 0.90, m
    else:
        # equivalent within ±3%: the runner (with MAX_PAIRS), and the engine on fixed pairs
        assert m.rate("runner", s.EQUIVALENT) >= 0.80 - _tol(0.80, n), m
        assert m.rate("engine_fixed", "no-change") >= 0.80 - _tol(0.80, n), m


@pytest.mark.parametrize(("drift", "seed"), [(FAST_2, 5), (SHIFTS, 6), (ORDER, 7)], ids=str)
def test_a_planted_5_percent_is_found_at_pair_sd_2_percent(drift: Drift, seed: int) -> None:
    n = 400
    m = measure(drift, 0.05, n, seed)
    assert m.rate("runner", "improved") >= 0.90 - _tol(0.90, n), m
    assert m.rate("engine_fixed", "improved") >= 0.90 - _tol(0.90, n), m
    assert m.rate("engine_stopped", "improved") >= 0.90 - _tol(0.90, n), m
    assert m.runner["regressed"] == m.engine_fixed["regressed"] == 0, m


@pytest.mark.parametrize(("drift", "seed"), [(FAST_2, 8), (SHIFTS, 9), (ORDER, 10)], ids=str)
def test_a_200_percent_gain_is_decided_in_at_most_3_pairs(drift: Drift, seed: int) -> None:
    m = measure(drift, 2.0, 200, seed, fixed=False)
    assert m.runner["improved"] == 200, m
    assert m.pairs <= 3.0, m
    assert m.engine_stopped["improved"] == 200, m


def test_a_200_percent_gain_at_pair_sd_20_percent_takes_a_few_pairs_more() -> None:
    m = measure(FAST_20, 2.0, 200, 11, fixed=False)
    assert m.runner["improved"] == 200, m
    assert m.pairs <= 4.5, m  # measured 4.21


# ------------------------------------------------------------------ order and side


def _plain_t(base: list[float], head: list[float]) -> tuple[float, float, float]:
    """A paired t that ignores the order: estimate and 95% interval (log)."""
    d = np.log(head) - np.log(base)
    res = sstats.ttest_1samp(d, 0.0)
    ci = res.confidence_interval(0.95)
    return float(d.mean()), float(ci.low), float(ci.high)


def test_the_order_term_takes_an_order_bias_out_of_the_estimate_and_the_noise() -> None:
    """Whoever runs second is 3% faster. The order-adjusted estimate is unbiased and
    as narrow as without the bias; a plain paired t keeps the bias in its noise (an A/A
    is rarely shown equivalent) and, once pairs are lost unevenly, in its estimate."""
    rng = random.Random(12)
    n = 400
    adj_eq = plain_eq = 0
    adj_est: list[float] = []
    plain_est: list[float] = []
    for _ in range(n):
        base, head, second = alternate(rng, ORDER, 0.0, FIXED_PAIRS)
        rows, _ = build_study([_source(base, head, second)], Policy(), None)
        (row,) = [r for r in rows if r.primary]
        assert row.ci_low_pct is not None
        assert row.ci_high_pct is not None
        adj_eq += row.ci_low_pct > -3.0 and row.ci_high_pct < 3.0
        _, lo, hi = _plain_t(base, head)
        plain_eq += math.log(0.97) < lo and hi < math.log(1.03)
        # three pairs in which head ran first are lost (failed bursts)
        keep = [i for i in range(FIXED_PAIRS) if second[i] or i >= 6]
        kb, kh, ks = [base[i] for i in keep], [head[i] for i in keep], [second[i] for i in keep]
        d = np.log(kh) - np.log(kb)
        plain_est.append(float(d.mean()))
        mu, _, _ = s.paired_fit(list(d), ks)
        adj_est.append(mu)
    print(f"equivalent: adjusted {adj_eq / n:.1%}, plain {plain_eq / n:.1%}")
    adj_mean, plain_mean = float(np.mean(adj_est)), float(np.mean(plain_est))
    print(f"mean estimate, uneven loss: adjusted {adj_mean:+.4f}, plain {plain_mean:+.4f}")
    assert adj_eq / n >= 0.90
    assert plain_eq / n <= 0.70
    # 5 head-second and 2 head-first pairs: the plain mean carries 3% × 3/7
    assert abs(float(np.mean(adj_est))) < 0.002
    assert float(np.mean(plain_est)) == pytest.approx(0.03 * 3 / 7, abs=0.002)


def test_the_order_bias_of_whoever_runs_first_cancels_too() -> None:
    m = measure(Drift(pair_sd=0.02, order_bias=-0.03), 0.0, 300, 13)
    assert m.rate("runner", *FALSE) <= 0.05 + _tol(0.05, 300), m
    assert m.rate("runner", s.EQUIVALENT) >= 0.80 - _tol(0.80, 300), m


def test_a_constant_side_bias_is_not_cancelled() -> None:
    """A bias that goes with the side (head's user, cgroup, path), not the order, is
    indistinguishable from an effect: the paired estimate reads it as one. Only a null
    control (base against base) can show it; documented as a limit."""
    rng = random.Random(14)
    est = []
    for _ in range(200):
        base, head, second = alternate(rng, Drift(pair_sd=0.02, side_bias=0.03), 0.0, 10)
        d = [math.log(h / b) for b, h in zip(base, head, strict=True)]
        est.append(s.paired_fit(d, second)[0])
    assert float(np.mean(est)) == pytest.approx(0.03, abs=0.002)


# ------------------------------------------------------------------ why pairs


def test_sequential_rounds_under_level_shifts_are_weak_where_pairs_are_not() -> None:
    """Today's sequential rounds (a server start and 64 requests: about a minute a
    round, ABBA by round, analysed unpaired) under the same level shifts: a planted +5%
    is found far less often than by the alternate design's bursts over the same host."""
    rng = random.Random(15)
    n, rounds, round_s = 200, 10, 60.0
    found_seq = found_alt = 0
    for _ in range(n):
        host = Host(rng, SHIFTS, horizon_s=2 * rounds * round_s + 600.0)
        t0 = rng.uniform(0.0, 600.0)
        base: list[float] = []
        head: list[float] = []
        k = 0
        for r in range(rounds):
            for side in ("base", "head") if r % 2 == 0 else ("head", "base"):
                qps = 40.0 * host.speed(t0 + k * round_s)
                (head if side == "head" else base).append(qps * (1.05 if side == "head" else 1))
                k += 1
        row = s.Row(s.Design(max_rounds=rounds))
        found_seq += s.decide(row, base, head).verdict == s.IMPROVED
        found_alt += engine(*alternate(rng, SHIFTS, 0.05, rounds)) == "improved"
    print(
        f"+5% under level shifts: sequential rounds {found_seq / n:.1%}, pairs {found_alt / n:.1%}"
    )
    assert found_alt / n >= 0.90
    assert found_seq / n <= 0.5


# ------------------------------------------------------------------ two implementations


def test_the_runner_and_the_engine_compute_the_same_paired_interval() -> None:
    """`decide_paired` at its last look uses the engine's estimator; the estimates
    agree, and its interval is the repeated (wider) one."""
    rng = random.Random(16)
    for pairs in (2, 3, 4, 7, 10):
        base, head, second = alternate(rng, FAST_2, 0.04, pairs)
        rows, _ = build_study([_source(base, head, second)], Policy(), None)
        (row,) = [r for r in rows if r.primary]
        look = s.decide_paired(s.Row(DESIGN), base, head, second)
        assert look.delta is not None
        assert row.delta_pct is not None
        assert 100.0 * look.delta == pytest.approx(row.delta_pct, abs=1e-3)
        assert look.lo is not None
        assert row.ci_low_pct is not None
        assert 100.0 * look.lo <= row.ci_low_pct + 1e-6


def test_the_union_bound_holds_alpha_where_the_nominal_level_does_not() -> None:
    """At pair SD 20% with a look after every pair, the t statistics at the nominal level
    of the normal boundaries cross more often than alpha; each look at its own share of
    alpha (what `decide_paired` does) does not."""
    rng = random.Random(17)
    n = 1000
    false = {True: 0, False: 0}
    for _ in range(n):
        base, head, second = alternate(rng, FAST_20, 0.0, MAX_PAIRS)
        diffs = [math.log(h / b) for b, h in zip(base, head, strict=True)]
        for union in (True, False):
            row = s.Row(DESIGN)
            for k in range(2, MAX_PAIRS + 1):
                mu, se, df = s.paired_fit(diffs[:k], second[:k])
                look = s._judge(row, k, k, k / MAX_PAIRS, mu, se, df, union=union)
                if look.verdict != s.CONTINUE:
                    false[union] += look.verdict in FALSE
                    break
    print(f"A/A at pair SD 20%: union bound {false[True] / n:.1%}, nominal {false[False] / n:.1%}")
    assert false[True] / n <= 0.05
    assert false[False] > false[True]
