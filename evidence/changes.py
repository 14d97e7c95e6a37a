"""Change detection over the default branch: one paired verification a merge.

Each merge to the default branch is measured against its first parent (head against
parent, interleaved bursts): a `Point` holds the estimated log-ratio change of that merge,
its standard error and degrees of freedom, from `pairs` burst pairs. Because every merge
is paired against its own parent, a step caused by merge j shows in that merge's point
only; later merges measure their own changes. Levels across sessions are not compared at
all (on a shared machine they differ by up to 2× within an hour).

The detector (docs/statistics.md, "Watching main: change detection") is an e-detector
(Shin, Ramdas and Rinaldo): for each side — regressions and improvements, each with half
of the false-alarm budget — and each alternative (a *step*: one merge moves the level by
the policy's threshold δ; a *creep*: merges that each move it by a fraction of δ), a
CUSUM of per-point e-values, M_k = max(M_{k−1}, 1) · e_k, mixed with fixed weights. An
alarm is raised when the mixture reaches 2/α (α: false alarms a merge, both sides); the
average run length to a false alarm is then at least 2/α per side, whenever and however
the points arrive.

The per-point e-value is a likelihood ratio of the point's t statistic, so it is valid
whatever the true noise: u = (∓estimate − bias) / se, under no change beyond the side
bias margin at most Student t with the point's degrees of freedom; the e-value is the
noncentral-t density (noncentrality λ = the alternative's shift over a standard error
predicted from the noise of earlier points) over the central one. It is monotone in u and
bounded for finite degrees of freedom: few pairs carry little evidence, however extreme
their statistic. A point whose statistic makes its side *suspect* (past the confirm
level, short of an alarm) asks for the merge to be measured again; the new point of the
same commit multiplies in like any other.

Pure: no I/O; the state is a plain dict through `DetectorState.record`/`from_record`,
so the App can feed one merge at a time and resume after a restart.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from scipy import stats

Side = Literal["regression", "improvement"]
SIDES: tuple[Side, Side] = ("regression", "improvement")
_SIGN: dict[Side, float] = {"regression": -1.0, "improvement": 1.0}
_LOG_FLOOR = -50.0  # an e-value below e^-50 is read as e^-50 (no practical difference)
_U_MAX = 1e3  # statistics beyond this are read as this: the e-value is monotone, so lower
_NORMAL_DOF = 200.0  # from here the t is read as a normal (known variance)


@dataclass(frozen=True)
class Point:
    """One merge's paired verification against its first parent.

    `estimate_log`: log(head/parent) of the row's primary metric, higher is better (for a
    metric where lower is better, pass the negative). `se`: its standard error, `dof` its
    degrees of freedom (math.inf for a known variance), `pairs` the burst pairs it came
    from. A verification that failed or measured fewer than two pairs is passed with
    `se=None`: it carries no evidence and is recorded as such."""

    commit: str
    estimate_log: float
    se: float | None
    dof: float
    pairs: int
    when: str = ""

    @property
    def usable(self) -> bool:
        return (
            self.se is not None
            and math.isfinite(self.se)
            and self.se > 0.0
            and math.isfinite(self.estimate_log)
            and self.dof >= 1.0
            and self.pairs >= 2
        )

    @property
    def pair_sd(self) -> float | None:
        """The noise of one pair this point implies (se·√pairs), for later points' λ."""
        if not self.usable or self.se is None:
            return None
        return self.se * math.sqrt(self.pairs)

    def record(self) -> dict[str, object]:
        return {
            "commit": self.commit,
            "estimate_log": self.estimate_log,
            "se": self.se,
            "dof": None if math.isinf(self.dof) else self.dof,
            "pairs": self.pairs,
            "when": self.when,
        }

    @classmethod
    def from_record(cls, r: Mapping[str, object]) -> Point:
        se, dof = r.get("se"), r.get("dof")
        return cls(
            commit=str(r["commit"]),
            estimate_log=_float(r["estimate_log"]),
            se=None if se is None else _float(se),
            dof=math.inf if dof is None else _float(dof),
            pairs=int(_float(r["pairs"])),
            when=str(r.get("when", "")),
        )


@dataclass(frozen=True)
class ChangePolicy:
    """The detector's settings; the defaults are the ones calibrated in
    tests/test_change_detection.py and stated in docs/statistics.md."""

    threshold_pct: float = 5.0  # δ: the step to detect, either way
    # The bound on false alarms, both sides together, per 100 points (verifications):
    # 0.8 keeps it under 1 per 100 merges while re-measurements stay under 25% of merges.
    false_alarms_per_100: float = 0.8
    bias_pct: float = 0.3  # a side bias of the machine up to this is no change
    creep_fraction: float = 0.25  # the creep alternative: merges of δ × this each
    step_weight: float = 0.5  # the step alternative's share of the mixture
    pair_sd_pct: float = 2.0  # the pair noise assumed until `min_history` points
    sd_window: int = 12  # the pair noise is the median of this many earlier points
    min_history: int = 3
    max_lambda: float = 12.0
    confirm_fraction: float = 0.25  # suspect from threshold^this (≈ 3.9): measure again

    @property
    def threshold(self) -> float:
        """The alarm level of one side's statistic: 2/α."""
        return 2.0 * 100.0 / self.false_alarms_per_100

    @property
    def confirm_level(self) -> float:
        return float(self.threshold**self.confirm_fraction)

    @property
    def components(self) -> tuple[tuple[str, float, float], ...]:
        """(name, per-merge shift in log units, weight) of each alternative."""
        delta = math.log1p(self.threshold_pct / 100.0)
        return (
            ("step", delta, self.step_weight),
            ("creep", delta * self.creep_fraction, 1.0 - self.step_weight),
        )


def log_e_value(u: float, dof: float, lam: float) -> float:
    """log of the e-value for a statistic `u` that is at most Student t(`dof`) under no
    change and noncentral t(`dof`, `lam`) under the alternative: the density ratio.
    Its expectation under the null is 1 (at most 1 for a null stochastically below)."""
    return log_e_values([(u, lam)], dof)[0]


def _t_logpdf(u: float, dof: float) -> float:
    return (
        math.lgamma(0.5 * (dof + 1.0))
        - math.lgamma(0.5 * dof)
        - 0.5 * math.log(dof * math.pi)
        - 0.5 * (dof + 1.0) * math.log1p(u * u / dof)
    )


def log_e_values(points: list[tuple[float, float]], dof: float) -> list[float]:
    """`log_e_value` of each (u, lam) at the same `dof`: one call into scipy for all of
    them, since its per-call overhead is most of the cost (a watch replays every point)."""
    us = [min(u, _U_MAX) for u, _ in points]
    out = [0.0] * len(points)
    todo = [i for i, (_, lam) in enumerate(points) if lam > 0.0]
    if dof >= _NORMAL_DOF:
        for i in todo:
            lam = points[i][1]
            out[i] = max(_LOG_FLOOR, lam * us[i] - 0.5 * lam * lam)
        return out
    if not todo:
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            alt = np.atleast_1d(
                stats.nct.logpdf([us[i] for i in todo], dof, [points[i][1] for i in todo])
            )
            vs = [float(a) - _t_logpdf(us[i], dof) for i, a in zip(todo, alt, strict=True)]
        except (OverflowError, FloatingPointError, ValueError):
            vs = [math.nan] * len(todo)
    for i, v in zip(todo, vs, strict=True):
        # nan: far in the null's direction, no evidence for the change
        out[i] = _LOG_FLOOR if math.isnan(v) else max(_LOG_FLOOR, min(v, 700.0))
    return out


@dataclass(frozen=True)
class Alarm:
    """A change found: its side, the points it spans (first to last commit), the summed
    estimate over the distinct merges of that span with a 95% interval (log units), the
    statistic when raised, and whether it was handled."""

    side: Side
    first_commit: str
    last_commit: str
    commits: tuple[str, ...]
    component: str
    estimate_log: float
    lo_log: float
    hi_log: float
    statistic: float
    at_point: int
    handled: bool = False

    @property
    def change_pct(self) -> float:
        return 100.0 * math.expm1(self.estimate_log)

    def record(self) -> dict[str, object]:
        return {
            "side": self.side,
            "first_commit": self.first_commit,
            "last_commit": self.last_commit,
            "commits": list(self.commits),
            "component": self.component,
            "estimate_log": self.estimate_log,
            "lo_log": self.lo_log,
            "hi_log": self.hi_log,
            "statistic": self.statistic,
            "at_point": self.at_point,
            "handled": self.handled,
        }

    @classmethod
    def from_record(cls, r: Mapping[str, object]) -> Alarm:
        side = str(r["side"])
        if side not in SIDES:
            raise ValueError(f"unknown side {side!r}")
        commits = r.get("commits", [])
        if not isinstance(commits, list):
            raise ValueError("commits must be a list")
        return cls(
            side="regression" if side == "regression" else "improvement",
            first_commit=str(r["first_commit"]),
            last_commit=str(r["last_commit"]),
            commits=tuple(str(c) for c in commits),
            component=str(r["component"]),
            estimate_log=_float(r["estimate_log"]),
            lo_log=_float(r["lo_log"]),
            hi_log=_float(r["hi_log"]),
            statistic=_float(r["statistic"]),
            at_point=int(_float(r["at_point"])),
            handled=bool(r.get("handled", False)),
        )


@dataclass(frozen=True)
class Step:
    """What one point did: its e-values (log) per side and component, each side's
    statistic after it, and what it raised: an alarm, or a request to measure a commit
    again (`confirm`: the side is suspect)."""

    index: int
    commit: str
    usable: bool
    log_e: dict[str, dict[str, float]]
    statistic: dict[str, float]
    alarms: tuple[Alarm, ...]
    confirm: tuple[tuple[Side, str], ...]


@dataclass
class DetectorState:
    """Everything the detector needs to go on: the points so far (their summaries), and
    per side and component the CUSUM's log value and where its current run starts."""

    points: list[Point] = field(default_factory=list)
    log_m: dict[str, dict[str, float]] = field(default_factory=dict)
    start: dict[str, dict[str, int]] = field(default_factory=dict)
    alarms: list[Alarm] = field(default_factory=list)

    def statistic(self, side: Side, policy: ChangePolicy) -> float:
        """The side's mixture Σ wₖ·Mₖ (with Mₖ ≥ 1 read as at least 1 for the sum)."""
        return sum(
            w * math.exp(min(700.0, self.log_m.get(side, {}).get(name, 0.0)))
            for name, _, w in policy.components
        )

    @property
    def open_alarms(self) -> list[Alarm]:
        return [a for a in self.alarms if not a.handled]

    def record(self) -> dict[str, object]:
        return {
            "points": [p.record() for p in self.points],
            "log_m": {s: dict(v) for s, v in self.log_m.items()},
            "start": {s: dict(v) for s, v in self.start.items()},
            "alarms": [a.record() for a in self.alarms],
        }

    @classmethod
    def from_record(cls, r: Mapping[str, object]) -> DetectorState:
        pts, alarms = r.get("points", []), r.get("alarms", [])
        log_m, start = r.get("log_m", {}), r.get("start", {})
        if not (isinstance(pts, list) and isinstance(alarms, list)):
            raise ValueError("points and alarms must be lists")
        if not (isinstance(log_m, dict) and isinstance(start, dict)):
            raise ValueError("log_m and start must be mappings")
        return cls(
            points=[Point.from_record(p) for p in pts],
            log_m={str(s): {str(k): _float(v) for k, v in d.items()} for s, d in log_m.items()},
            start={
                str(s): {str(k): int(_float(v)) for k, v in d.items()} for s, d in start.items()
            },
            alarms=[Alarm.from_record(a) for a in alarms],
        )


def pair_sd(state: DetectorState, policy: ChangePolicy) -> float:
    """The pair noise predicted for the next point: the median of the last `sd_window`
    usable points' se·√pairs, the policy's assumption until `min_history` of them."""
    sds: list[float] = []
    for p in reversed(state.points):
        sd = p.pair_sd
        if sd is not None:
            sds.append(sd)
            if len(sds) >= policy.sd_window:
                break
    if len(sds) < policy.min_history:
        return policy.pair_sd_pct / 100.0
    return statistics.median(sds)


def point_log_e(point: Point, sd: float, policy: ChangePolicy) -> dict[str, dict[str, float]]:
    """log e-values of one point, per side and component, given the predicted pair noise
    `sd` (which must not depend on this point)."""
    bias = math.log1p(policy.bias_pct / 100.0)
    keys = [(side, name, shift) for side in SIDES for name, shift, _ in policy.components]
    if not point.usable or point.se is None:
        values = [0.0] * len(keys)
    else:
        se = point.se
        values = log_e_values(
            [
                (
                    (_SIGN[side] * point.estimate_log - bias) / se,
                    min(policy.max_lambda, max(0.0, shift - bias) * math.sqrt(point.pairs) / sd),
                )
                for side, _, shift in keys
            ],
            point.dof,
        )
    out: dict[str, dict[str, float]] = {side: {} for side in SIDES}
    for (side, name, _), v in zip(keys, values, strict=True):
        out[side][name] = v
    return out


def update(state: DetectorState, point: Point, policy: ChangePolicy) -> Step:
    """Feed one point (in merge order; a point of a commit already seen is a new
    measurement of it). Changes `state` in place and says what happened. A side that
    alarms starts afresh at once: the next alarm needs new evidence."""
    sd = pair_sd(state, policy)
    log_e = point_log_e(point, sd, policy)
    index = len(state.points)
    state.points.append(point)
    raised: list[Alarm] = []
    confirm: list[tuple[Side, str]] = []
    stat: dict[str, float] = {}
    for side in SIDES:
        lm = state.log_m.setdefault(side, {})
        st = state.start.setdefault(side, {})
        for name, _, _ in policy.components:
            prev = lm.get(name, 0.0)
            if prev <= 0.0:
                st[name] = index  # a new run starts here
            lm[name] = max(prev, 0.0) + log_e[side][name]
        stat[side] = state.statistic(side, policy)
        if stat[side] >= policy.threshold:
            raised.append(_alarm(state, side, policy, index, stat[side]))
            lm.clear()
            st.clear()
        elif stat[side] >= policy.confirm_level and point.usable:
            confirm.append((side, _strongest(state, side, policy, index)))
    state.alarms.extend(raised)
    return Step(index, point.commit, point.usable, log_e, stat, tuple(raised), tuple(confirm))


def detect(
    points: Iterable[Point], policy: ChangePolicy | None = None, state: DetectorState | None = None
) -> DetectorState:
    """Feed `points` one by one into `state` (a new one by default) and return it."""
    policy = policy or ChangePolicy()
    state = state if state is not None else DetectorState()
    for p in points:
        update(state, p, policy)
    return state


def handle(state: DetectorState, alarm: Alarm) -> DetectorState:
    """Mark an alarm handled (a revert, a fix, or accepted): it stays in the record."""
    state.alarms = [replace(a, handled=True) if a == alarm else a for a in state.alarms]
    return state


def reset(state: DetectorState, side: Side | None = None) -> DetectorState:
    """Start one side (or both) afresh, as after a change that is accepted as the new
    normal; the points are kept (they still predict the noise)."""
    for s in SIDES if side is None else (side,):
        state.log_m.pop(s, None)
        state.start.pop(s, None)
    return state


def _component_now(state: DetectorState, side: Side, policy: ChangePolicy) -> str:
    lm = state.log_m.get(side, {})
    return max(
        policy.components, key=lambda c: math.log(c[2]) + lm.get(c[0], 0.0) if c[2] > 0 else -1e9
    )[0]


def _strongest(state: DetectorState, side: Side, policy: ChangePolicy, index: int) -> str:
    """The commit of the run's point with the most evidence for the side's leading
    alternative: the one to measure again."""
    name = _component_now(state, side, policy)
    first = state.start.get(side, {}).get(name, index)
    sign = _SIGN[side]
    best = max(
        (p for p in state.points[first : index + 1] if p.usable and p.se is not None),
        key=lambda p: sign * p.estimate_log / (p.se or 1.0),
        default=state.points[index],
    )
    return best.commit


def _alarm(
    state: DetectorState, side: Side, policy: ChangePolicy, index: int, statistic: float
) -> Alarm:
    name = _component_now(state, side, policy)
    first = state.start.get(side, {}).get(name, index)
    span = state.points[first : index + 1]
    commits = tuple(dict.fromkeys(p.commit for p in span))
    est, var = 0.0, 0.0
    for c in commits:  # repeated measurements of one commit: inverse-variance mean
        ms = [p for p in span if p.commit == c and p.usable and p.se is not None]
        if not ms:
            continue
        w = [1.0 / (p.se or 1.0) ** 2 for p in ms]
        est += sum(wi * p.estimate_log for wi, p in zip(w, ms, strict=True)) / sum(w)
        var += 1.0 / sum(w)
    half = 1.96 * math.sqrt(var)
    return Alarm(
        side=side,
        first_commit=commits[0],
        last_commit=commits[-1],
        commits=commits,
        component=name,
        estimate_log=est,
        lo_log=est - half,
        hi_log=est + half,
        statistic=statistic,
        at_point=index,
    )


def _float(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"not a number: {v!r}")
    return float(v)
