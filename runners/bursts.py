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
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
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

    def record(self) -> dict[str, Any]:
        return asdict(self)


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
    chosen = max(concurrency, round(n / concurrency) * concurrency)

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
