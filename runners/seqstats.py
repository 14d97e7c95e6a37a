"""Sequential decisions for `--rounds auto`, with the standard library alone.

After every pair of rounds (one base run and one head run of a mode and concurrency) the
runner asks `decide` whether the primary metric — throughput, compared as the log ratio
of head to base per-round values (Welch's t, as the evidence engine does) — is already
decided; in a paired design, `decide_paired` asks it of the pairs' differences. The
intervals are *repeated confidence intervals* (Jennison & Turnbull): their critical
values come from Lan-DeMets alpha spending, so the chance that any look of the sequence
errs stays within alpha however many looks are taken (docs/statistics.md, "Adaptive
rounds").

- improved / regressed: the efficacy interval (two-sided, `alpha` split over the primary
  rows, Pocock-type spending: most of it is available early, so a large effect stops
  after two or three rounds) excludes zero and the estimate is past the threshold;
- equivalent: the equivalence interval (two one-sided tests at `alpha_eq`, O'Brien-
  Fleming-type spending: kept for the later looks, where an interval can be narrow
  enough) lies inside ±threshold;
- otherwise the next pair of rounds runs, until the budget is spent: *inconclusive*,
  with the effect the last look could have detected.

The boundaries are computed for a normal statistic by recursive numerical integration
(Armitage, McPherson & Rowe) at the information fractions actually reached, then
applied to the t statistic at the same nominal level. The t distribution is computed
through the regularized incomplete beta function (continued fraction, Lentz).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

# ------------------------------------------------------------------ distributions

_SQRT2 = math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / _SQRT2)


def norm_sf(x: float) -> float:
    return 0.5 * math.erfc(x / _SQRT2)


def norm_pdf(x: float) -> float:
    return math.exp(-0.5 * x * x - _LOG_SQRT_2PI)


def norm_ppf(p: float) -> float:
    """The standard normal quantile (Acklam's start, two Newton steps on erfc)."""
    if not 0.0 < p < 1.0:
        if p == 0.0:
            return -math.inf
        if p == 1.0:
            return math.inf
        raise ValueError(f"p must lie in [0, 1], not {p}")
    a = (-39.69683028665376, 220.9460984245205, -275.9285104469687, 138.3577518672690,
         -30.66479806614716, 2.506628277459239)  # fmt: skip
    b = (-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972,
         -13.28068155288572)  # fmt: skip
    c = (-7.784894002430293e-03, -0.3223964580411365, -2.400758277161838, -2.549732539343734,
         4.374664141464968, 2.938163982698783)  # fmt: skip
    d = (7.784695709041462e-03, 0.3224671290700398, 2.445134137142996, 3.754408661907416)
    q = min(p, 1.0 - p)
    if q < 0.02425:
        r = math.sqrt(-2.0 * math.log(q))
        x = (((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) / (
            (((d[0] * r + d[1]) * r + d[2]) * r + d[3]) * r + 1.0
        )
    else:
        r = q - 0.5
        s = r * r
        x = (
            (((((a[0] * s + a[1]) * s + a[2]) * s + a[3]) * s + a[4]) * s + a[5])
            * r
            / (((((b[0] * s + b[1]) * s + b[2]) * s + b[3]) * s + b[4]) * s + 1.0)
        )
    for _ in range(2):  # x is the q-quantile (≤ 0); refine on the lower tail
        e = norm_cdf(x) - q
        x -= e / max(norm_pdf(x), 1e-300)
    return -x if p > 0.5 else x


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if a <= 0 or b <= 0:
        raise ValueError("a and b must be positive")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` (real, > 0) degrees of freedom."""
    if df <= 0:
        raise ValueError("df must be positive")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(0.5 * df, 0.5, df / (df + t * t))  # P(T > |t|)
    return tail if t >= 0 else 1.0 - tail


def t_cdf(t: float, df: float) -> float:
    return t_sf(-t, df)


def t_pdf(t: float, df: float) -> float:
    ln = (
        math.lgamma(0.5 * (df + 1.0))
        - math.lgamma(0.5 * df)
        - 0.5 * math.log(df * math.pi)
        - 0.5 * (df + 1.0) * math.log1p(t * t / df)
    )
    return math.exp(ln)


@lru_cache(maxsize=16384)
def t_isf(p: float, df: float) -> float:
    """The t with P(T > t) = p (the upper quantile): Newton on log P, safeguarded by a
    bracket, from the normal quantile. Cached: a sequential study asks for the same few
    levels at the same degrees of freedom at every look, and each costs ~80 µs."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie in (0, 1), not {p}")
    if p > 0.5:
        return -t_isf(1.0 - p, df)
    if p == 0.5:
        return 0.0
    lo, hi = 0.0, math.inf
    t = max(-norm_ppf(p), 1e-3)
    target = math.log(p)
    for _ in range(100):
        s = t_sf(t, df)
        if s > p:
            lo = t
        else:
            hi = t
        f = math.log(s) - target
        if abs(f) < 1e-13:
            return t
        step = f * s / t_pdf(t, df)  # d log S / dt = -pdf / S
        nxt = t + step
        if not lo < nxt < hi:
            nxt = 2.0 * t if math.isinf(hi) else 0.5 * (lo + hi)
        if abs(nxt - t) <= 1e-12 * max(1.0, abs(t)):
            return nxt
        t = nxt
    return t


def t_ppf(p: float, df: float) -> float:
    return -t_isf(p, df)


# ------------------------------------------------------------------ alpha spending


def spend_pocock(frac: float, alpha: float) -> float:
    """Lan-DeMets Pocock-type spending: α·ln(1 + (e − 1)·t)."""
    return alpha * math.log1p((math.e - 1.0) * min(max(frac, 0.0), 1.0))


def spend_obrien_fleming(frac: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending of a one-sided `alpha`:
    2·(1 − Φ(z_{1−α/2} / √t))."""
    t = min(max(frac, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    return 2.0 * norm_sf(norm_ppf(1.0 - alpha / 2.0) / math.sqrt(t))


SPENDING: dict[str, Callable[[float, float], float]] = {
    "pocock": spend_pocock,
    "obrien-fleming": spend_obrien_fleming,
}

_GRID = 48  # Simpson intervals over each look's continuation region
_FLOOR = -10.0  # the lower end of a one-sided region (z)


def _simpson(a: float, b: float) -> tuple[list[float], list[float]]:
    n = _GRID
    h = (b - a) / n
    xs = [a + i * h for i in range(n + 1)]
    ws = [h / 3.0 * (1 if i in (0, n) else 4 if i % 2 else 2) for i in range(n + 1)]
    return xs, ws


@lru_cache(maxsize=4096)
def _boundaries(
    fracs: tuple[float, ...], alpha: float, spending: str, two_sided: bool
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """Critical z values at the looks `fracs` (increasing information fractions), and
    the sub-density of Z at the last look on its continuation region (grid, weights,
    values) for the next look. Two-sided: |Z| ≥ c stops; one-sided: Z ≥ c."""
    spend = SPENDING[spending]
    k = len(fracs)
    t = fracs[-1]
    # two-sided: alpha/2 a side, as is usual (it matters for the non-linear spendings)
    side = alpha / 2.0 if two_sided else alpha
    target = spend(t, side) - (spend(fracs[-2], side) if k > 1 else 0.0)
    target = 2.0 * target if two_sided else target
    if k == 1:
        # one look so far: Z ~ N(0, 1)
        def exit_prob(c: float) -> float:
            return 2.0 * norm_sf(c) if two_sided else norm_sf(c)

        xs: list[float] = []
        ws: list[float] = []
        gs: list[float] = []
        crits: tuple[float, ...] = ()
    else:
        prev_crits, xs_t, ws_t, gs_t = _boundaries(fracs[:-1], alpha, spending, two_sided)
        crits = prev_crits
        xs, ws, gs = list(xs_t), list(ws_t), list(gs_t)
        t0 = fracs[-2]
        r0, r1, sd = math.sqrt(t0), math.sqrt(t), math.sqrt(t - t0)

        def exit_prob(c: float) -> float:
            total = 0.0
            for u, w, g in zip(xs, ws, gs, strict=True):
                up = norm_sf((c * r1 - u * r0) / sd)
                if two_sided:
                    up += norm_cdf((-c * r1 - u * r0) / sd)
                total += w * g * up
            return total

    if target <= 0.0:
        c = math.inf
    else:
        lo, hi = 0.0, 40.0
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            if exit_prob(mid) > target:
                lo = mid
            else:
                hi = mid
            if hi - lo < 1e-10:
                break
        c = 0.5 * (lo + hi)
    # the sub-density on the continuation region, for the next look
    top = min(c, 12.0)
    bottom = -top if two_sided else _FLOOR
    nx, nw = _simpson(bottom, top)
    if k == 1:
        ng = [norm_pdf(z) for z in nx]
    else:
        t0 = fracs[-2]
        r0, r1, sd = math.sqrt(t0), math.sqrt(t), math.sqrt(t - t0)
        scale = r1 / sd
        ng = [
            sum(
                w * g * norm_pdf((z * r1 - u * r0) / sd) for u, w, g in zip(xs, ws, gs, strict=True)
            )
            * scale
            for z in nx
        ]
    return (*crits, c), tuple(nx), tuple(nw), tuple(ng)


def boundaries(
    fracs: Sequence[float], alpha: float, spending: str = "pocock", two_sided: bool = True
) -> tuple[float, ...]:
    """Lan-DeMets critical z values at the information fractions `fracs` (increasing,
    in (0, 1]). Two-sided: P(some |Z_k| ≥ c_k) = alpha under no effect; one-sided:
    P(some Z_k ≥ c_k) = alpha."""
    fs = tuple(round(min(max(f, 1e-9), 1.0), 12) for f in fracs)
    if any(b <= a for a, b in itertools.pairwise(fs)):
        raise ValueError("information fractions must increase")
    return _boundaries(fs, alpha, spending, two_sided)[0]


# ------------------------------------------------------------------ the decision

IMPROVED, REGRESSED, EQUIVALENT, CONTINUE, INCONCLUSIVE = (
    "improved",
    "regressed",
    "equivalent",
    "continue",
    "inconclusive",
)


@dataclass(frozen=True)
class Design:
    """The sequential plan of one verification; the same for every primary row."""

    max_rounds: int = 10
    threshold_pct: float = 3.0
    alpha: float = 0.05  # efficacy, two-sided, shared by the primary rows (Bonferroni)
    alpha_eq: float = 0.05  # equivalence: each one-sided test, per row
    rows: int = 1
    power: float = 0.8  # for the detectable effect
    efficacy_spending: str = "pocock"
    equivalence_spending: str = "obrien-fleming"
    min_rounds: int = 2

    @property
    def method(self) -> str:
        return (
            f"group-sequential Welch t on log(head/base) per round: repeated confidence "
            f"intervals, Lan-DeMets {self.efficacy_spending}-type spending for improved/"
            f"regressed (two-sided alpha {self.alpha:g} over {self.rows} primary row(s)), "
            f"{self.equivalence_spending}-type for equivalence (two one-sided tests at "
            f"{self.alpha_eq:g})"
        )

    @property
    def rounds_method(self) -> str:
        """`method` for the sequential design's rounds (`decide_paired`, `rounds`)."""
        return self.paired_method.replace(
            "per pair, adjusted for which side ran second",
            "per round (a round's base and head run are a pair), adjusted for which side "
            "ran second from 3 rounds of each order",
        )

    @property
    def paired_method(self) -> str:
        """`method` for a paired design (`decide_paired`)."""
        return (
            f"group-sequential paired t on log(head/base) per pair, adjusted for which side "
            f"ran second: repeated confidence intervals, Lan-DeMets {self.efficacy_spending}-"
            f"type spending for improved/regressed (two-sided alpha {self.alpha:g} over "
            f"{self.rows} primary row(s)), {self.equivalence_spending}-type for equivalence "
            f"(two one-sided tests at {self.alpha_eq:g}); information: pairs over "
            f"{self.max_rounds}"
        )


@dataclass
class Look:
    """One look at one row: the estimate and both intervals, relative (head/base − 1)."""

    base_rounds: int
    head_rounds: int
    fraction: float
    delta: float | None
    lo: float | None  # efficacy interval
    hi: float | None
    eq_lo: float | None  # equivalence interval
    eq_hi: float | None
    detectable: float | None
    verdict: str

    def record(self) -> dict[str, object]:
        def pct(v: float | None) -> float | None:
            return None if v is None else round(100.0 * v, 3)

        return {
            "base_rounds": self.base_rounds,
            "head_rounds": self.head_rounds,
            "fraction": round(self.fraction, 4),
            "delta_pct": pct(self.delta),
            "ci_pct": [pct(self.lo), pct(self.hi)],
            "equivalence_ci_pct": [pct(self.eq_lo), pct(self.eq_hi)],
            "detectable_pct": pct(self.detectable),
            "verdict": self.verdict,
        }


def welch(base: Sequence[float], head: Sequence[float]) -> tuple[float, float, float]:
    """Mean difference of head − base, its standard error and Welch's degrees of freedom."""
    nb, nh = len(base), len(head)
    mb, mh = sum(base) / nb, sum(head) / nh
    vb = sum((x - mb) ** 2 for x in base) / (nb - 1)
    vh = sum((x - mh) ** 2 for x in head) / (nh - 1)
    sb, sh = vb / nb, vh / nh
    se2 = sb + sh
    if se2 == 0.0:
        return mh - mb, 0.0, math.inf
    den = (sb * sb / (nb - 1) if nb > 1 else 0.0) + (sh * sh / (nh - 1) if nh > 1 else 0.0)
    return mh - mb, math.sqrt(se2), se2 * se2 / den


@dataclass
class Row:
    """The looks taken at one row so far: their information fractions fix the boundaries."""

    design: Design
    fracs: list[float] = field(default_factory=list)
    looks: list[Look] = field(default_factory=list)


def fraction(design: Design, nb: int, nh: int) -> float:
    """Information over the most the plan allows: (1/nb + 1/nh)⁻¹ against N/2."""
    return min(1.0, (2.0 / design.max_rounds) / (1.0 / nb + 1.0 / nh))


def decide(seq: Row, base: Sequence[float], head: Sequence[float]) -> Look:
    """Look at a row's per-round values (throughput, > 0) and decide, or go on.

    A look that adds no information (a failed run) repeats the last verdict-free state:
    it takes no new boundary, so it spends no alpha."""
    d = seq.design
    nb, nh = len(base), len(head)
    if nb < d.min_rounds or nh < d.min_rounds:
        look = Look(nb, nh, 0.0, None, None, None, None, None, None, CONTINUE)
        seq.looks.append(look)
        return look
    xb = [math.log(v) for v in base]
    xh = [math.log(v) for v in head]
    diff, se, df = welch(xb, xh)
    return _judge(seq, nb, nh, fraction(d, nb, nh), diff, se, df)


def _judge(
    seq: Row,
    nb: int,
    nh: int,
    frac: float,
    diff: float,
    se: float,
    df: float,
    union: bool = False,
) -> Look:
    """The look at an estimate (log ratio), its standard error and degrees of freedom
    at information fraction `frac`: repeated intervals from the spending boundaries.
    `union`: the efficacy interval takes this look's own share of alpha (the spending
    increment) as its level, a union bound that holds whatever the looks' correlation."""
    d = seq.design
    new = not seq.fracs or frac > seq.fracs[-1] + 1e-9
    if new:
        seq.fracs.append(frac)
    fr = tuple(seq.fracs)
    c_eff = boundaries(fr, d.alpha / d.rows, d.efficacy_spending, True)[-1]
    c_eq = boundaries(fr, d.alpha_eq, d.equivalence_spending, False)[-1]
    thr = math.log1p(d.threshold_pct / 100.0)
    if se == 0.0:
        t_eff = t_eq = t_pow = 0.0
    else:
        t_eff = _t_at(_increment(seq, d) if union else norm_sf(c_eff), df)
        t_eq = _t_at(norm_sf(c_eq), df)
        t_pow = t_isf(1.0 - d.power, df)
    lo, hi = diff - t_eff * se, diff + t_eff * se
    eq_lo, eq_hi = diff - t_eq * se, diff + t_eq * se
    if not new:
        verdict = CONTINUE  # nothing new was learnt: no decision on the same information
    elif lo > 0.0 and diff > thr:
        verdict = IMPROVED
    elif hi < 0.0 and diff < -thr:
        verdict = REGRESSED
    elif eq_lo > -thr and eq_hi < thr:
        verdict = EQUIVALENT
    else:
        verdict = CONTINUE
    detectable = (t_eff + t_pow) * se if math.isfinite(t_eff) else None
    look = Look(
        nb,
        nh,
        frac,
        math.expm1(diff),
        _rel(lo),
        _rel(hi),
        _rel(eq_lo),
        _rel(eq_hi),
        None if detectable is None else _rel(detectable),
        verdict,
    )
    seq.looks.append(look)
    return look


def paired_fit(d: Sequence[float], head_second: Sequence[bool]) -> tuple[float, float, float]:
    """The mean pair difference, its standard error and degrees of freedom, as the engine
    computes them (evidence/stats.py `paired_fit`): with each order at least twice and
    n ≥ 4, OLS of d = μ + γ·s (s = +1 when head ran second), whose μ̂ is the mean of the
    two order groups' means and whose residuals are the deviations within each group
    (df n − 2), so who went first is neither in the estimate nor in the noise; otherwise
    a one-sample t (df n − 1)."""
    n = len(d)
    second = [x for x, s2 in zip(d, head_second, strict=True) if s2]
    first = [x for x, s2 in zip(d, head_second, strict=True) if not s2]
    if n >= 4 and len(second) >= 2 and len(first) >= 2:
        m2, m1 = sum(second) / len(second), sum(first) / len(first)
        rss = sum((x - m2) ** 2 for x in second) + sum((x - m1) ** 2 for x in first)
        se2 = rss / (n - 2) / 4.0 * (1.0 / len(second) + 1.0 / len(first))
        return 0.5 * (m2 + m1), math.sqrt(se2), float(n - 2)
    m = sum(d) / n
    if n < 2:
        return m, math.nan, 0.0  # one pair: an estimate, no interval
    var = sum((x - m) ** 2 for x in d) / (n - 1)
    return m, math.sqrt(var / n), float(n - 1)


def rounds_paired(head_second: Sequence[bool]) -> bool:
    """Whether a sequential design's rounds are compared as pairs (`paired_fit`, order
    term included): from three rounds of each order. With fewer, Welch on the rounds (as
    before pairing): at 4 rounds a side the pairs' t has 2 or 3 degrees of freedom against
    Welch's ~6, and on a quiet machine Welch found a planted −8% at 3% run noise in 88% of
    studies, the pairs in 54–74%. Not trimmed: a trimmed mean would leave out a pair a
    level shift of the host put far out, but equally the runs a head is slow in (each run
    is a server start of its own: a head slow in one start of five was called improved in
    56% of studies trimmed, 9% not)."""
    second = sum(1 for s2 in head_second if s2)
    return second >= 3 and len(head_second) - second >= 3


def decide_paired(
    seq: Row,
    base: Sequence[float],
    head: Sequence[float],
    head_second: Sequence[bool],
) -> Look:
    """`decide` for a paired design: `base[i]` and `head[i]` are pair i's throughput
    (> 0), measured close in time, `head_second[i]` true when head ran second. The
    statistic is the pairs' log ratio (`paired_fit`), the information fraction
    n / max_rounds (max_rounds: the most pairs); spending and verdicts as in `decide`.
    Pairs in which a side failed are the caller's to leave out.

    One difference: the efficacy interval of each look is taken at that look's own share
    of alpha (a union bound), not at the boundary's nominal level. With one pair a look
    and n − 1 degrees of freedom the variance estimate moves so much from look to look
    that the t statistics are far less correlated than the normal ones the boundaries
    assume: at the nominal level an A/A at pair SD 20% came out improved or regressed in
    5.3% of 1,000 studies, with the union bound in 1.9% (tests/test_calibration_drift.py).
    """
    d = seq.design
    n = len(base)
    if len(head) != n or len(head_second) != n:
        raise ValueError("base, head and head_second must have one entry a pair")
    if n < d.min_rounds:
        look = Look(n, n, 0.0, None, None, None, None, None, None, CONTINUE)
        seq.looks.append(look)
        return look
    diffs = [math.log(h) - math.log(b) for b, h in zip(base, head, strict=True)]
    diff, se, df = paired_fit(diffs, head_second)
    return _judge(seq, n, n, min(1.0, n / d.max_rounds), diff, se, df, union=True)


def _increment(seq: Row, d: Design) -> float:
    """The efficacy alpha (one side) spent at the row's last look."""
    spend = SPENDING[d.efficacy_spending]
    side = d.alpha / d.rows / 2.0
    prev = spend(seq.fracs[-2], side) if len(seq.fracs) > 1 else 0.0
    return spend(seq.fracs[-1], side) - prev


def _t_at(p: float, df: float) -> float:
    """The t critical value at nominal one-sided level p (∞ when none is spent)."""
    if p <= 0.0:
        return math.inf
    if math.isinf(df):
        return -norm_ppf(p)
    return t_isf(p, df)


def _rel(v: float) -> float | None:
    return None if math.isnan(v) or abs(v) > 700.0 else math.expm1(v)


# ------------------------------------------------------------------ simulation


def simulate_row(rng: random.Random, cv: float, effect: float, design: Design) -> tuple[str, int]:
    """One row simulated without processes: per-round throughput log-normal with round
    CV `cv`, the head `effect` faster (0.05: +5%); pairs run and are looked at through
    `decide` exactly as the runner does. Returns the verdict and the rounds a side."""
    sd = math.sqrt(math.log1p(cv * cv))
    row = Row(design)
    base: list[float] = []
    head: list[float] = []
    for n in range(1, design.max_rounds + 1):
        base.append(100.0 * math.exp(rng.gauss(0.0, sd)))
        head.append(100.0 * (1.0 + effect) * math.exp(rng.gauss(0.0, sd)))
        if n >= design.min_rounds:
            verdict = decide(row, base, head).verdict
            if verdict != CONTINUE:
                return verdict, n
    return INCONCLUSIVE, design.max_rounds
