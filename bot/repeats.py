"""One commit measured more than once on a PR: the measurements pooled and compared.

A maintainer who sees "+13.1%" and, a row below, "+8.0%" for the same commit asks which
is true. Both are: each is one session's estimate with its own interval. Pooled
(inverse-variance, in log space) they are one better estimate; compared (the difference
against the noise of both) they say whether something moved between the sessions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Z95 = 1.959964


@dataclass(frozen=True)
class Measured:
    delta_pct: float
    ci_low_pct: float
    ci_high_pct: float


@dataclass(frozen=True)
class Repeat:
    """A commit's headline on one GPU kind, measured `len(values)` times."""

    sha: str
    gpu: str
    metric: str
    mode: str
    concurrency: int
    values: tuple[Measured, ...]
    pooled: Measured
    difference_pct: float  # last minus first, in points of percent
    noise_pct: float  # the 95% half-width of that difference if nothing moved

    @property
    def within_noise(self) -> bool:
        return abs(self.difference_pct) <= self.noise_pct


LogSe = tuple[float, float]
"""A measured change as log(1 + change) and its standard error."""


def log_se(delta_pct: float, lo_pct: float | None, hi_pct: float | None) -> LogSe | None:
    """A change in percent with its 95% interval, in log space (the standard error read
    off the interval); None without a usable interval."""
    if lo_pct is None or hi_pct is None or min(delta_pct, lo_pct, hi_pct) <= -100:
        return None
    se = (math.log1p(hi_pct / 100) - math.log1p(lo_pct / 100)) / (2 * Z95)
    return (math.log1p(delta_pct / 100), se) if math.isfinite(se) and se > 0 else None


def pool(logs: list[LogSe]) -> LogSe:
    """The inverse-variance mean of measurements of one change, and its standard error."""
    weights = [1 / se**2 for _, se in logs]
    est = sum(w * x for w, (x, _) in zip(weights, logs, strict=True)) / sum(weights)
    return est, 1 / math.sqrt(sum(weights))


def agree(a: LogSe, b: LogSe) -> bool:
    """Whether two measurements of one change differ by no more than their noise allows
    (95%): then they are one change, measured twice."""
    return abs(b[0] - a[0]) <= Z95 * math.hypot(a[1], b[1])


def _measured(h: Any) -> Measured | None:
    if not isinstance(h, dict):
        return None
    got = [h.get(k) for k in ("delta_pct", "ci_low_pct", "ci_high_pct")]
    if not all(isinstance(x, int | float) and math.isfinite(x) for x in got):
        return None
    return Measured(float(got[0]), float(got[1]), float(got[2]))  # type: ignore[arg-type]


def repeats(rows: Iterable[tuple[str, str, str, Any]]) -> list[Repeat]:
    """(head sha, base sha, GPU kind, headline) of each measurement, oldest first: the
    commits measured more than once against the same base on the same GPU, metric, mode
    and concurrency, each pooled (against another base it is another change)."""
    groups: dict[tuple[str, str, str, str, str, int], list[Measured]] = {}
    for sha, base, gpu, h in rows:
        m = _measured(h)
        if m is None:
            continue
        mode, conc = str(h.get("mode")), int(h.get("concurrency") or 0)
        groups.setdefault((sha, base, gpu, str(h.get("metric")), mode, conc), []).append(m)
    out = []
    for (sha, _base, gpu, metric, mode, conc), values in groups.items():
        found = [log_se(m.delta_pct, m.ci_low_pct, m.ci_high_pct) for m in values]
        logs = [x for x in found if x is not None]
        if len(values) < 2 or len(logs) < len(values):
            continue
        est, se = pool(logs)
        half = Z95 * se
        pooled = Measured(*(100 * math.expm1(x) for x in (est, est - half, est + half)))
        first, last = logs[0], logs[-1]
        diff = 100 * (math.expm1(last[0]) - math.expm1(first[0]))
        noise = 100 * Z95 * math.hypot(first[1], last[1]) * math.exp(est)
        out.append(Repeat(sha, gpu, metric, mode, conc, tuple(values), pooled, diff, noise))
    return out
