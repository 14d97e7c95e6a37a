"""The burst length of the resident designs, sized to the server after the first pairs.

A pair's log ratio d = ln(head / base) varies for two reasons: what moves between bursts
(the host, the server's state: σ_b² a pair, whatever the length) and the requests' own
spread inside a burst (a burst of N requests averages it: 2·c²/N a pair, c the requests'
coefficient of variation). A pair costs 2·(N·t + o) GPU seconds: t a request at the row's
concurrency, o a burst's overhead (switching servers, starting the client, filling and
draining the queue). The interval after a budget narrows fastest where

    (σ_b² + 2c²/N) · (N·t + o)   is least:   N* = √(2c²·o / (σ_b²·t))

Long bursts when the requests' own spread dominates and bursts cost overhead; short ones
(more pairs) when the level moves between bursts. The first `PAIRS` pairs of the first
row, at the task's `requests`, measure c (the requests' latencies), t and o (the bursts'
walls and held time) and σ_b² (the pairs' spread less the part c explains); the rest of
the verification runs bursts of N*, between a quarter and four times the task's length,
a whole number of the concurrency — where the measured costs promise at least 20% less
GPU time for the same interval; otherwise the task's length stays (σ_b² from three pairs
has two degrees of freedom: a small promised gain is mostly its noise).

The model assumes σ_b does not grow as bursts shorten. A server that batches breaks it: a
short burst holds few batches, and its throughput swings with how requests happened to
meet. So a proposed length is tried before it is kept (`after_probe`): `PAIRS` more pairs
at it, then the pairs' spread and GPU time *measured* at both lengths fit
var(N) = a + b/N and 2(N·t + o), and the length that fit says is cheapest is run —
the task's length unless another promises at least 20% less than the better of the two
measured.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

PAIRS = 3  # pairs of the first row measured at the task's length before sizing
LEAST, MOST = 0.25, 4.0  # the chosen length, as a multiple of the task's
MIN_OVERHEAD_S = 0.05  # a burst always costs something besides its requests
MIN_GAIN = 0.2  # change the length only where the measured costs promise this much less


@dataclass(frozen=True)
class Sizing:
    initial: int  # requests a burst, the task's
    chosen: int  # … from the pair after `pairs` on
    pairs: int
    within_cv: float  # the requests' latency coefficient of variation
    between_sd_pct: float  # σ_b of a pair's log ratio, in %
    request_s: float  # seconds a request at the row's concurrency (burst wall / N)
    overhead_s: float  # seconds a burst held the GPU besides its requests
    reason: str
    probed: int | None = None  # a length tried for `probe_pairs` pairs after the first
    probe_pairs: int = 0
    initial_sd_pct: float | None = None  # the pairs' log-ratio SD measured at each length
    probe_sd_pct: float | None = None
    initial_pair_s: float | None = None  # GPU seconds a pair held at each length
    probe_pair_s: float | None = None

    def record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Measured:
    """What the pairs at one burst length measured: their log ratios and the GPU seconds
    each pair held (both bursts, start-ups and warm-ups left out)."""

    requests: int
    ratios: list[float]
    pair_s: list[float]

    @property
    def var(self) -> float:
        return statistics.variance(self.ratios)

    @property
    def held(self) -> float:
        return statistics.fmean(self.pair_s)


def after_probe(proposal: Sizing, first: Measured, probe: Measured, concurrency: int) -> Sizing:
    """The length for the rest, from pairs measured at the task's length and at the
    proposed one (the module's docstring): fit, then keep what the measurements support."""
    if len(first.ratios) < 2 or len(probe.ratios) < 2 or not first.pair_s or not probe.pair_s:
        return proposal  # too little measured: the proposal, as before
    try:
        return _after_probe(proposal, first, probe, concurrency)
    except (ArithmeticError, ValueError):  # a NaN or an overflow in what was measured
        return proposal


def _after_probe(proposal: Sizing, first: Measured, probe: Measured, concurrency: int) -> Sizing:
    n0, n1 = first.requests, probe.requests
    v0, v1 = first.var, probe.var
    h0, h1 = first.held, probe.held
    if not all(math.isfinite(x) for x in (v0, v1, h0, h1)) or min(n0, n1) < 1:
        return proposal
    # var(N) = a + b/N through both points; where that needs a or b below 0, the
    # other alone, fitted by least squares
    x0, x1 = 1.0 / n0, 1.0 / n1
    b = (v0 - v1) / (x0 - x1) if n0 != n1 else 0.0
    a = v0 - b * x0
    if b < 0:  # the longer bursts varied more: the level moves, whatever the length
        a, b = statistics.fmean([v0, v1]), 0.0
    elif a < 0:  # the spread fell faster than 1/N: all of it the bursts' own
        a, b = 0.0, (v0 * x0 + v1 * x1) / (x0 * x0 + x1 * x1)
    # a pair holds 2(N·t + o) seconds
    t = (h1 - h0) / (2.0 * (n1 - n0)) if n0 != n1 else 0.0
    if t <= 0:
        t, o = max(proposal.request_s, 1e-6), proposal.overhead_s
    else:
        o = max(MIN_OVERHEAD_S, statistics.fmean([h0 / 2 - n0 * t, h1 / 2 - n1 * t]))
    least = max(2 * concurrency, math.ceil(LEAST * proposal.initial))
    most = max(least, math.floor(MOST * proposal.initial))
    if a <= 0:
        n = float(most)
    elif b <= 0:
        n = float(least)
    else:
        n = math.sqrt(b * o / (a * t))
    n = min(max(n, least), most)
    fitted = _whole(n, concurrency, least, most)

    measured = {n0: v0 * h0, n1: v1 * h1}  # a pair's variance times its GPU time
    best = min(measured, key=lambda k: (measured[k], k != n0))
    if measured[best] > (1.0 - MIN_GAIN) * measured[n0]:
        best = n0  # the probe did not measure enough better to leave the task's length
    promised = (a + b / fitted) * 2.0 * (fitted * t + o)
    if fitted not in measured and promised <= (1.0 - MIN_GAIN) * measured[best]:
        chosen, why = fitted, "the length the two measured lengths' fit says is cheapest"
    elif best == n0:
        chosen, why = n0, f"the task's length: {n1} measured no better by {MIN_GAIN:.0%}"
    else:
        chosen, why = n1, f"{n1}: measured cheaper than the task's length"
    return replace(
        proposal,
        chosen=int(chosen),
        reason=why,
        probed=n1,
        probe_pairs=len(probe.ratios),
        initial_sd_pct=round(100.0 * math.sqrt(v0), 3),
        probe_sd_pct=round(100.0 * math.sqrt(v1), 3),
        initial_pair_s=round(h0, 3),
        probe_pair_s=round(h1, 3),
    )


def _whole(n: float, concurrency: int, least: int, most: int) -> int:
    """`n` as a whole number of the concurrency within [least, most] where one is
    (rounding after clamping could step past either bound)."""
    k = max(concurrency, round(n / concurrency) * concurrency)
    if k > most and most - most % concurrency >= max(least, concurrency):
        k = most - most % concurrency
    if k < least and least + (-least) % concurrency <= most:
        k = least + (-least) % concurrency
    return k


def for_row(chosen: int, concurrency: int) -> int:
    """The chosen length for a row at `concurrency` (it was sized on the first row's):
    at least two requests in flight per slot, a whole number of them."""
    return max(2 * concurrency, round(chosen / concurrency) * concurrency)


def latency_cv(speed: Path) -> float | None:
    """The coefficient of variation of a burst's successful requests' latencies (its
    speed file's `per_request`), or None when they are not there."""
    try:
        doc = json.loads(speed.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    rows = doc.get("per_request") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        return None
    lat = [
        float(r["latency_s"])
        for r in rows
        if isinstance(r, dict)
        and r.get("is_success", True) is not False
        and isinstance(r.get("latency_s"), int | float)
        and r["latency_s"] > 0
    ]
    if len(lat) < 3:
        return None
    mean = statistics.fmean(lat)
    return statistics.stdev(lat) / mean if mean > 0 else None


def size(
    initial: int,
    concurrency: int,
    ratios: list[float],
    cvs: list[float],
    walls: list[float],
    held: list[float],
) -> Sizing | None:
    """The burst length for the rest of the verification from the first pairs: their log
    ratios, the bursts' latency CVs, walls and GPU-held seconds. None: too little measured."""
    if len(ratios) < 2 or not cvs or not walls or not held or initial < 1:
        return None
    c2 = statistics.fmean(x * x for x in cvs)
    t = statistics.fmean(walls) / initial
    o = max(MIN_OVERHEAD_S, statistics.fmean(h - w for h, w in zip(held, walls, strict=False)))
    total = statistics.variance(ratios)
    between = max(0.0, total - 2.0 * c2 / initial)
    least = max(2 * concurrency, math.ceil(LEAST * initial))
    most = max(least, math.floor(MOST * initial))
    if t <= 0:
        return None
    if between <= 0:
        n = float(most)
        why = "the pairs varied no more than the requests' own spread explains: longest bursts"
    else:
        n = math.sqrt(2.0 * c2 * o / (between * t))
        why = "the length that narrows the interval fastest per GPU-minute"
    n = min(max(n, least), most)
    chosen = _whole(n, concurrency, least, most)

    def cost(k: float) -> float:  # a pair's variance times its GPU time
        return (between + 2.0 * c2 / k) * (k * t + o)

    if cost(chosen) >= (1.0 - MIN_GAIN) * cost(initial):
        chosen = initial  # three pairs say too little to change for less
        why = f"the task's length: another would narrow the interval by under {MIN_GAIN:.0%}"
    return Sizing(
        initial=initial,
        chosen=int(chosen),
        pairs=len(ratios),
        within_cv=round(math.sqrt(c2), 4),
        between_sd_pct=round(100.0 * math.sqrt(between), 3),
        request_s=round(t, 4),
        overhead_s=round(o, 3),
        reason=why,
    )
