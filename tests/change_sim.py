"""Synthetic histories of the default branch for the change detector (evidence/changes.py),
shared by tests/test_change_detection.py and bench/change_detection.py.

A merge is verified against its first parent as the alternate design runs it: burst pairs
in ABBA order, each pair's log difference the merge's true change plus the machine's
side bias plus noise, looked at by the runner's own sequential test after every pair
(`runners/seqstats.py` `decide_paired` with its defaults: at most 10 pairs, threshold 3%)
— or a fixed number of pairs. The point the detector gets is the engine's paired fit
(estimate, standard error, degrees of freedom) over the pairs that ran. The noise:

- Gaussian with a pair-difference SD (2% for a GPU-bound server, more for CPU-bound);
- heavy-tailed: Student t with 3 degrees of freedom scaled to the same SD;
- a different SD each session (log-uniform over a range): the next merge's noise is not
  the last one's, as on the lent H200s;
- a side bias (the head slot −0.2% slower, as measured over five real A/A runs);
- failures: a verification that measured nothing (no point) or was cut short at two or
  three pairs.

Levels are never simulated: the detector never sees one.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from evidence.changes import ChangePolicy, DetectorState, Point, update
from runners import seqstats as s

RUNNER = s.Design()  # the runner's defaults: at most 10 pairs, threshold 3%


@dataclass(frozen=True)
class Noise:
    pair_sd: float = 0.02
    sd_range: tuple[float, float] | None = None  # per session, log-uniform
    tails: float | None = None  # Student t dof of the pair noise (None: Gaussian)
    side_bias: float = -0.002  # log; the head slot runs this much faster
    p_failed: float = 0.0
    p_short: float = 0.0

    def __str__(self) -> str:
        sd = (
            f"SD {100 * self.pair_sd:g}%"
            if self.sd_range is None
            else f"SD {100 * self.sd_range[0]:g}–{100 * self.sd_range[1]:g}% by session"
        )
        tails = "Gaussian" if self.tails is None else f"t{self.tails:g}"
        fail = f", {self.p_failed:.0%} failed, {self.p_short:.0%} short" if self.p_failed else ""
        return f"{tails} {sd}, bias {100 * self.side_bias:+g}%{fail}"


def _draw(rng: random.Random, noise: Noise, sd: float) -> float:
    if noise.tails is None:
        return rng.gauss(0.0, sd)
    nu = noise.tails
    t = rng.gauss(0.0, 1.0) / math.sqrt(rng.gammavariate(nu / 2.0, 2.0) / nu)
    return sd * t / math.sqrt(nu / (nu - 2.0))


def measure(
    rng: random.Random, commit: str, change: float, noise: Noise, pairs: int | None
) -> Point:
    """One verification of a merge whose true change is `change` (log): the runner's
    sequential stop when `pairs` is None, else exactly `pairs` pairs."""
    r = rng.random()
    if r < noise.p_failed:
        return Point(commit, 0.0, None, 0.0, 0)
    most = RUNNER.max_rounds if pairs is None else pairs
    if r < noise.p_failed + noise.p_short:
        most, pairs = rng.choice((2, 3)), -1  # cut short: no decision, what ran
    sd = noise.pair_sd
    if noise.sd_range is not None:
        lo, hi = noise.sd_range
        sd = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    row = s.Row(RUNNER)
    d: list[float] = []
    second: list[bool] = []
    mu = se = df = 0.0
    for n in range(1, most + 1):
        d.append(change + noise.side_bias + _draw(rng, noise, sd))
        second.append(n % 2 == 0)  # ABBA: head second in every other pair
        if n < 2:
            continue
        mu, se, df = s.paired_fit(d, second)
        if pairs is None:
            look = s._judge(row, n, n, min(1.0, n / RUNNER.max_rounds), mu, se, df, union=True)
            if look.verdict != s.CONTINUE:
                break
    return Point(commit, mu, se, df, len(d))


@dataclass
class Run:
    """What the detector did over one simulated history."""

    alarms: list[tuple[int, str]]  # (merge index, side)
    merges: int
    points: int  # verifications, re-measurements included
    confirms: int


def history(
    rng: random.Random,
    changes: list[float],
    noise: Noise,
    policy: ChangePolicy,
    pairs: int | None = None,
    remeasure: int = 2,
) -> Run:
    """Feed one history (one true change a merge, log) to a fresh detector. When a point
    makes a side suspect, the commit it names is measured again, at most `remeasure`
    times a merge."""
    state = DetectorState()
    alarms: list[tuple[int, str]] = []
    points = confirms = 0
    for i, change in enumerate(changes):
        commit = f"m{i}"
        step = update(state, measure(rng, commit, change, noise, pairs), policy)
        points += 1
        extra = 0
        while not step.alarms and step.confirm and extra < remeasure:
            _, again = step.confirm[0]
            confirms += 1
            extra += 1
            j = int(again[1:])
            step = update(state, measure(rng, again, changes[j], noise, pairs), policy)
            points += 1
        alarms += [(i, a.side) for a in step.alarms]
    return Run(alarms, len(changes), points, confirms)


def false_alarms(
    seed: int,
    noise: Noise,
    series: int,
    merges: int,
    policy: ChangePolicy | None = None,
    pairs: int | None = None,
) -> tuple[int, int, int, int]:
    """Null histories (no merge changes anything): false alarms on either side, merges,
    verifications and re-measurements, in all."""
    rng = random.Random(seed)
    policy = policy or ChangePolicy()
    fa = n = pts = conf = 0
    for _ in range(series):
        run = history(rng, [0.0] * merges, noise, policy, pairs)
        fa += len(run.alarms)
        n += run.merges
        pts += run.points
        conf += run.confirms
    return fa, n, pts, conf


def delays(
    seed: int,
    steps: list[float],
    noise: Noise,
    trials: int,
    pairs: int | None = None,
    policy: ChangePolicy | None = None,
    warmup: int = 20,
    after: int = 6,
    remeasure: int = 2,
) -> list[int | None]:
    """Histories of `warmup` quiet merges, then `steps` (one change a merge), then `after`
    quiet ones: per history the delay of the first alarm on the steps' side, in merges
    after the first step (0: at it), or None when none came; an alarm on the other side
    or before the steps counts as none."""
    rng = random.Random(seed)
    policy = policy or ChangePolicy()
    side = "regression" if sum(steps) < 0 else "improvement"
    out: list[int | None] = []
    for _ in range(trials):
        changes = [0.0] * warmup + steps + [0.0] * after
        run = history(rng, changes, noise, policy, pairs, remeasure)
        hit = [i - warmup for i, sd in run.alarms if sd == side and i >= warmup]
        out.append(hit[0] if hit else None)
    return out


def within(ds: list[int | None], merges: int) -> float:
    """The share of histories alarmed within `merges` merges of the first step."""
    return sum(d is not None and d < merges for d in ds) / len(ds)
