"""Interval, test and detectable effect for one before/after row, and Holm's correction.

Per docs/statistics.md: the unit is the round; the interval is a Welch t interval on the log
ratio of per-round values (a percentile bootstrap over 3–10 rounds is too narrow). Rates
that may be zero (WER, failure rate) are compared as differences instead.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from evidence.records import FloatArray


@dataclass(frozen=True)
class Comparison:
    """head vs base. `delta`, `lo`, `hi` are relative (head/base − 1); `*_abs` absolute."""

    delta: float | None
    lo: float | None
    hi: float | None
    p: float | None
    mde: float | None
    delta_abs: float | None
    lo_abs: float | None
    hi_abs: float | None


_EMPTY = Comparison(None, None, None, None, None, None, None, None)


def compare(
    base: FloatArray,
    head: FloatArray,
    scale: Literal["log", "diff"],
    alpha: float = 0.05,
    power: float = 0.8,
) -> Comparison:
    """Compare per-round values; no interval when a side has fewer than two rounds."""
    base = base[np.isfinite(base)]
    head = head[np.isfinite(head)]
    if base.size == 0 or head.size == 0:
        return _EMPTY
    if scale == "log" and (base.min() <= 0 or head.min() <= 0):
        scale = "diff"  # a zero or negative figure has no ratio; fall back to a difference
    xb, xh = (np.log(base), np.log(head)) if scale == "log" else (base, head)
    d = float(xh.mean() - xb.mean())
    lo = hi = p = mde = None
    if base.size >= 2 and head.size >= 2:
        vb, vh = float(xb.var(ddof=1)), float(xh.var(ddof=1))
        if vb == 0.0 and vh == 0.0:
            lo = hi = d  # identical rounds: the difference is exact
            p = 1.0 if d == 0.0 else 0.0
            mde = 0.0
        else:
            # One side may repeat itself exactly (a rounded p95, a start-up time): SciPy
            # then warns about precision loss, but Welch's interval is still well defined.
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Precision loss", RuntimeWarning)
                res = stats.ttest_ind(xh, xb, equal_var=False)
                ci = res.confidence_interval(1 - alpha)
            lo, hi, p = float(ci.low), float(ci.high), float(res.pvalue)
            se = math.sqrt(vb / base.size + vh / head.size)
            df = float(res.df)
            mde = float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * se)
    if scale == "log":
        return Comparison(
            delta=math.expm1(d),
            lo=None if lo is None else math.expm1(lo),
            hi=None if hi is None else math.expm1(hi),
            p=p,
            mde=None if mde is None else math.expm1(mde),
            delta_abs=float(head.mean() - base.mean()),
            lo_abs=None,
            hi_abs=None,
        )
    ref = float(base.mean())

    def rel(v: float | None) -> float | None:
        return None if v is None or ref == 0 else v / ref

    return Comparison(
        delta=rel(d),
        lo=rel(lo),
        hi=rel(hi),
        p=p,
        mde=rel(mde),
        delta_abs=d,
        lo_abs=lo,
        hi_abs=hi,
    )


def holm(pvalues: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted
