"""Interval, test and detectable effect for one before/after row, and Holm's correction.

Per docs/statistics.md: the unit is the round; the interval is a Welch t interval on the log
ratio of per-round values (a percentile bootstrap over 3–10 rounds is too narrow). Rates
that may be zero (WER, failure rate) are compared as differences instead. A design that
measures base and head in pairs close in time (`design.paired`) is compared on the pairs'
differences instead (`compare_paired`): the host's drift, shared by a pair, cancels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import special

from evidence.records import FloatArray


def t_quantile(q: float, df: float) -> float:
    """Student's t quantile (SciPy's `stats.t.ppf`, without its per-call overhead)."""
    return float(special.stdtrit(df, q))


def t_two_sided(t: float, df: float) -> float:
    """The two-sided p-value of `t` on `df` degrees of freedom."""
    return float(2.0 * special.stdtr(df, -abs(t)))


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
            # Welch's interval and test in closed form: SciPy's `ttest_ind` computes the
            # same numbers behind about a millisecond of argument handling a call, and a
            # study compares every row of every GPU.
            nb, nh = base.size, head.size
            se = math.sqrt(vb / nb + vh / nh)
            df = se**4 / ((vb / nb) ** 2 / (nb - 1) + (vh / nh) ** 2 / (nh - 1))
            q = t_quantile(1 - alpha / 2, df)
            lo, hi = d - q * se, d + q * se
            p = t_two_sided(d / se, df)
            mde = (q + t_quantile(power, df)) * se
    return _result(scale, base, head, d, lo, hi, p, mde)


def _result(
    scale: Literal["log", "diff"],
    base: FloatArray,
    head: FloatArray,
    d: float,
    lo: float | None,
    hi: float | None,
    p: float | None,
    mde: float | None,
) -> Comparison:
    """The comparison as head/base − 1 from a difference `d` (and its interval) on the
    log scale, or relative to the base's mean on the difference scale."""
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


def paired_fit(d: FloatArray, head_second: npt.NDArray[np.bool_]) -> tuple[float, float, int]:
    """The mean pair difference, its standard error and degrees of freedom.

    With each order (head second, head first) at least twice and n ≥ 4: OLS of
    d = μ + γ·s (s = +1 when head ran second, −1 when first), so an order effect — the
    second burst of a pair running faster or slower — is neither in the estimate nor in
    the noise. With ±1 coding that fit is closed-form: μ̂ is the mean of the two order
    groups' means, γ̂ half their difference, the residuals the deviations within each
    group (df n − 2). Otherwise a one-sample t on d (df n − 1).
    """
    n = int(d.size)
    second, first = d[head_second], d[~head_second]
    if n >= 4 and second.size >= 2 and first.size >= 2:
        m2, m1 = float(second.mean()), float(first.mean())
        rss = float(((second - m2) ** 2).sum() + ((first - m1) ** 2).sum())
        var = rss / (n - 2)
        se = math.sqrt(var / 4.0 * (1.0 / second.size + 1.0 / first.size))
        return 0.5 * (m2 + m1), se, n - 2
    return float(d.mean()), float(d.std(ddof=1)) / math.sqrt(n) if n > 1 else math.nan, n - 1


def compare_paired(
    base: FloatArray,
    head: FloatArray,
    head_second: npt.NDArray[np.bool_],
    scale: Literal["log", "diff"],
    alpha: float = 0.05,
    power: float = 0.8,
) -> Comparison:
    """Compare per-pair values (`base[i]` and `head[i]` measured as pair i, `head_second[i]`
    when head ran second); pairs with a missing figure are left out. The same fields as
    `compare`; no interval from fewer than two pairs."""
    ok = np.isfinite(base) & np.isfinite(head)
    base, head, second = base[ok], head[ok], head_second[ok]
    if base.size == 0:
        return _EMPTY
    if scale == "log" and (base.min() <= 0 or head.min() <= 0):
        scale = "diff"  # as in `compare`: a zero or negative figure has no ratio
    d = np.log(head) - np.log(base) if scale == "log" else head - base
    mu, se, df = paired_fit(d, second)
    lo = hi = p = mde = None
    if df >= 1:
        if se == 0.0:
            lo = hi = mu  # identical differences: the difference is exact
            p = 1.0 if mu == 0.0 else 0.0
            mde = 0.0
        else:
            q = t_quantile(1 - alpha / 2, df)
            lo, hi = mu - q * se, mu + q * se
            p = t_two_sided(mu / se, df)
            mde = (q + t_quantile(power, df)) * se
    return _result(scale, base, head, mu, lo, hi, p, mde)


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
