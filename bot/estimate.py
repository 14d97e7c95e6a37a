"""A verification's GPU minutes, estimated before it runs.

From what this repository's runners recorded for the task (the evidence's `cost` per GPU
kind, kept in each published verification's headline): the seconds a server start took,
the GPU seconds a run or burst took besides, how many starts the design made, and how
many rounds runs until decided took. The plan says the rest: rows (modes × the task's
concurrencies), rounds (fixed, or at most `rounds` when adaptive) and the budget cap.

    minutes(n) = (starts(n) × start-up + 2 × n × rows × (1 + control) × run) / 60

`starts(n)` is what the design makes: a resident design's few starts (2, 3 with the null
control, 4 on two GPUs) whatever n; sequential rounds 2 × n, times the rows when the
server's command changes with the row (as recorded). With fixed rounds the range is the
spread of the recorded unit costs, at least ±25%; with rounds until decided it runs from
the first look (2 rounds a side) to the cap (`rounds`, and the budget's minutes), and
`typical` is at the median rounds earlier rounds until decided stopped at (halfway when
none did, or past where one stopped undecided). `run` is the mean of the two commits'
own seconds a run where either was measured before (a PR's base mostly was), else the
task's median; `control` the null control's runs per real run in the latest record. No
estimate without a recorded run of the task: the first verification records one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from statistics import fmean, median
from typing import Any, TypeGuard

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.models import Verification
from evidence.bounds import finite

log = logging.getLogger(__name__)

HISTORY = 10  # the most recent published verifications of the task read
FIRST_LOOK = 2  # rounds a side before rounds until decided can stop
SPREAD = 1.25  # fixed rounds: the range is at least typical / SPREAD to typical × SPREAD


@dataclass(frozen=True)
class Unit:
    """Recorded unit costs of one task on one GPU kind (medians over `samples`)."""

    design: str
    startup_s: float
    run_s: float
    run_s_range: tuple[float, float]
    startup_s_range: tuple[float, float]
    starts_fixed: float  # resident designs: starts a verification
    starts_per_round: float  # sequential: starts a side and round
    rows_per_mode: float
    rounds: float | None  # median rounds a side until decided (None: none recorded)
    samples: int
    gpu: str  # the GPU kind the figures were recorded on
    # Seconds a run of a commit measured before (by SHA, its latest record): a PR's base
    # is mostly the same commit at every verification, and its head the previous head's
    # near neighbour; the task's median (`run_s`) is the figure for a commit never seen.
    by_commit: dict[str, float] = field(default_factory=dict)
    control_share: float = 0.0  # null-control runs per real run (the latest record's)
    # Rounds until decided that were stopped before deciding (a budget, the wall-clock
    # limit) say only that deciding would have taken at least this many rounds a side.
    rounds_at_least: float | None = None


@dataclass(frozen=True)
class GpuEstimate:
    low: float
    typical: float
    high: float
    basis: str  # the GPU kind whose records it used, and how many
    capped: bool = False  # `high` is the budget's cap


@dataclass(frozen=True)
class Estimate:
    gpus: dict[str, GpuEstimate]

    @property
    def low(self) -> float:
        return sum(g.low for g in self.gpus.values())

    @property
    def typical(self) -> float:
        return sum(g.typical for g in self.gpus.values())

    @property
    def high(self) -> float:
        return sum(g.high for g in self.gpus.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": {g: asdict(e) for g, e in self.gpus.items()},
            "low": round(self.low, 3),
            "typical": round(self.typical, 3),
            "high": round(self.high, 3),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> Estimate | None:
        """The stored estimate, or None when there is none or it is not one."""
        if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), dict):
            return None
        out: dict[str, GpuEstimate] = {}
        for g, e in doc["gpus"].items():
            if not isinstance(e, dict):
                return None
            nums = [e.get(k) for k in ("low", "typical", "high")]
            if not all(
                isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
                for x in nums
            ):
                return None
            out[str(g)] = GpuEstimate(
                float(e["low"]),
                float(e["typical"]),
                float(e["high"]),
                str(e.get("basis") or ""),
                e.get("capped") is True,
            )
        return cls(out) if out else None


def units(s: Session, repo: str, task: str) -> dict[str, Unit]:
    """Per GPU kind, the unit costs this repository's runners recorded for `task`."""
    rows = s.scalars(
        select(Verification)
        .where(
            Verification.repo == repo,
            Verification.task == task,
            Verification.published_at.is_not(None),
        )
        .order_by(Verification.published_at.desc())
        .limit(HISTORY)
    )
    costs: dict[str, list[dict[str, Any]]] = {}
    for v in rows:
        if not isinstance(v.headline, dict):  # a damaged row: no record to read
            continue
        for gpu, h in v.headline.items():
            c = (h or {}).get("cost") if isinstance(h, dict) else None
            if isinstance(c, dict) and _usable(c):
                seen = {"base_sha": v.base_sha, "head_sha": v.head_sha, "stopped": h.get("stopped")}
                costs.setdefault(str(gpu), []).append({**c, **seen})
    return {gpu: _unit(gpu, cs) for gpu, cs in costs.items()}


# What a recorded cost may say and still be believed (a task's start-up within a day,
# a run within a day, at most this many rows, rounds, starts and runs).
BOUNDS = {
    "startup_s": (0.0, 86_400.0),
    "run_s": (0.0, 86_400.0),
    "rounds": (1.0, 1_000.0),
    "rows": (1.0, 1_000.0),
    "modes": (1.0, 10.0),
    "starts": (0.0, 100_000.0),
    "runs": (0.0, 1_000_000.0),
}


def _usable(c: Any) -> bool:
    """A recorded cost whose figures are all numbers within `BOUNDS` (rows written by
    older builds, or damaged, are left out rather than believed)."""
    if not isinstance(c, dict):
        return False
    return all(
        _within(c.get(key, 0 if key in ("starts", "runs") else None), lo, hi)
        for key, (lo, hi) in BOUNDS.items()
    )


def _unit(gpu: str, cs: list[dict[str, Any]], design: str | None = None) -> Unit:
    """The unit costs of `cs` (most recent first) recorded under `design`, else under the
    latest's design (a task's runs keep their design)."""
    mine = [c for c in cs if design is not None and c.get("design") == design]
    latest = (mine or cs)[0]
    same = [c for c in cs if c.get("design") == latest.get("design")]
    startup = [float(c["startup_s"]) for c in same]
    run = [float(c["run_s"]) for c in same]
    starts = [float(c.get("starts") or 0) for c in same]
    per_round = [
        float(c.get("starts") or 0) / (2.0 * float(c["rounds"])) for c in same if c["rounds"]
    ]
    decided = [c for c in same if c.get("adaptive") is True and c.get("stopped") not in CENSORED]
    censored = [c for c in same if c.get("adaptive") is True and c.get("stopped") in CENSORED]
    return Unit(
        design=str(latest.get("design") or "sequential"),
        startup_s=median(startup),
        run_s=median(run),
        run_s_range=(min(run), max(run)),
        startup_s_range=(min(startup), max(startup)),
        starts_fixed=median(starts),
        starts_per_round=max(1.0, median(per_round)) if per_round else 1.0,
        rows_per_mode=float(latest["rows"]) / float(latest["modes"]),
        rounds=_rounds(decided),
        samples=len(same),
        gpu=gpu,
        by_commit=_by_commit(same),
        control_share=_control_share(latest),
        rounds_at_least=_rounds(censored),
    )


# Why rounds until decided stopped without deciding: the rounds they ran are a floor.
CENSORED = ("budget", "cut-short")


def _within(x: object, lo: float, hi: float) -> TypeGuard[int | float]:
    """`x` is a number (not a bool) from `lo` to `hi`; an integer past any float is not."""
    return finite(x) and lo <= x <= hi


def _seconds(x: Any) -> float | None:
    return float(x) if _within(x, *BOUNDS["run_s"]) else None


def _by_commit(cs: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds a run of each commit took, from its latest record (`cs` latest first)."""
    out: dict[str, float] = {}
    for c in cs:
        for side in ("base", "head"):
            sha, x = c.get(f"{side}_sha"), _seconds(c.get(f"{side}_run_s"))
            if isinstance(sha, str) and sha and x is not None:
                out.setdefault(sha, x)
    return out


def _control_share(c: dict[str, Any]) -> float:
    """Null-control runs per real run in record `c` (a repository keeps its control)."""
    ctl, runs = c.get("control_runs"), c.get("runs")
    if not _within(ctl, *BOUNDS["runs"]) or not _within(runs, 1.0, BOUNDS["runs"][1]):
        return 0.0
    return min(float(ctl) / float(runs), 4.0)


def _rounds(cs: list[dict[str, Any]]) -> float | None:
    """Rounds a side that rounds until decided took, on average over a verification's
    rows (rows decided early ran fewer); the median over `cs` (None: none)."""
    if not cs:
        return None
    return median(float(c.get("runs") or 0) / (2.0 * float(c["rows"])) for c in cs)


def minutes(u: Unit, rounds: float, modes: int, startup_s: float, run_s: float) -> float:
    rows = u.rows_per_mode * modes
    starts = 2.0 * rounds * u.starts_per_round if u.design == "sequential" else u.starts_fixed
    runs = 2.0 * rounds * rows * (1.0 + u.control_share)
    return (starts * startup_s + runs * run_s) / 60.0


def estimate(
    recorded: dict[str, Unit],
    gpus: Sequence[str],
    *,
    rounds: int,
    modes: int,
    adaptive: bool,
    cap: float | None,
    base_sha: str | None = None,
    head_sha: str | None = None,
    control: bool | None = None,
) -> Estimate | None:
    """The plan's GPU minutes per GPU kind, or None when no GPU kind of it (nor any other
    of the task) has a recorded run. A GPU kind without records of its own uses another
    kind's, and says so in `basis`. A commit measured before (`base_sha`, `head_sha`)
    runs as long as it did then; the other as the task's median. `control`: the plan has
    a null control (None: as the latest record had)."""
    if not recorded:
        return None
    out: dict[str, GpuEstimate] = {}
    for gpu in gpus:
        u = _with_control(recorded.get(gpu) or next(iter(recorded.values())), control)
        lo_s, hi_s = u.startup_s_range
        shas = [sha for sha in (base_sha, head_sha) if sha]
        run_s = fmean(u.by_commit.get(sha, u.run_s) for sha in shas) if shas else u.run_s
        lo_r, hi_r = min(u.run_s_range[0], run_s), max(u.run_s_range[1], run_s)
        if adaptive:
            first = min(FIRST_LOOK, rounds)
            # where rounds until decided stopped before; with no record, halfway, or past
            # where a verification stopped before it decided
            likely = u.rounds if u.rounds is not None else (first + rounds) / 2.0
            if u.rounds is None and u.rounds_at_least is not None:
                likely = max(likely, u.rounds_at_least)
            low = minutes(u, first, modes, lo_s, lo_r)
            typical = minutes(u, min(max(likely, first), rounds), modes, u.startup_s, run_s)
            high = minutes(u, rounds, modes, hi_s, hi_r)
        else:
            # the recorded spread, and at least ±SPREAD: a few records show little of it
            typical = minutes(u, rounds, modes, u.startup_s, run_s)
            low = min(minutes(u, rounds, modes, lo_s, lo_r), typical / SPREAD)
            high = max(minutes(u, rounds, modes, hi_s, hi_r), typical * SPREAD)
        capped = adaptive and cap is not None and high > cap
        if adaptive and cap is not None:
            low, typical, high = min(low, cap), min(typical, cap), min(high, cap)
        runs = "run" if u.samples == 1 else "runs"
        basis = f"{u.samples} earlier {runs} on {u.gpu}"
        if u.gpu != gpu:
            basis = f"none on {gpu} yet, so {u.gpu}'s {u.samples} earlier {runs}"
        out[gpu] = GpuEstimate(
            round(low, 2), round(typical, 2), round(high, 2), basis, capped=capped
        )
    return Estimate(out)


def _with_control(u: Unit, control: bool | None) -> Unit:
    """`u` for a plan with (True) or without (False) a null control. The control runs as
    many bursts as the real pairs (as recorded, else one a real one) from a start of its
    own, which a resident design's recorded starts hold only where the records had one."""
    if control is None or control == (u.control_share > 0):
        return u
    if control:
        return replace(u, control_share=1.0, starts_fixed=u.starts_fixed + 1)
    return replace(u, control_share=0.0, starts_fixed=max(u.starts_fixed - 1, 2.0))


def for_verification(s: Session, v: Verification, control: bool | None = None) -> Estimate | None:
    """The estimate of `v`'s plan from its repository's records of its task; None, and a
    log line, if anything about it fails (an estimate never stops a verification)."""
    try:
        est = _for(s, v, control)
    except (ArithmeticError, ValueError, TypeError):
        log.exception("%s: no GPU-minute estimate for %s", v.repo, v.task)
        return None
    if est is not None and not all(math.isfinite(x) and x >= 0 for x in (est.low, est.high)):
        return None
    return est


def _for(s: Session, v: Verification, control: bool | None) -> Estimate | None:
    return estimate(
        units(s, v.repo, v.task),
        list(v.gpus or []),
        rounds=v.rounds,
        modes=len(v.modes or []) or 1,
        adaptive=bool(v.adaptive),
        cap=v.gpu_budget_minutes,
        base_sha=v.base_sha,
        head_sha=v.head_sha,
        control=control,
    )


def error_pct(v: Verification) -> float | None:
    """How far the estimate's `typical` was from what the verification recorded, in % of
    the recorded minutes (None: no estimate, or nothing recorded)."""
    est = Estimate.from_json(v.estimate)
    if est is None:
        return None
    actual = 0.0
    for gpu in est.gpus:
        m = ((v.headline or {}).get(gpu) or {}).get("gpu_minutes") or {}
        if not isinstance(m.get("total"), int | float):
            return None
        actual += float(m["total"])
    if actual <= 0:
        return None
    return 100.0 * (est.typical - actual) / actual
