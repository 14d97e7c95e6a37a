"""`--rounds auto`: which runs of the plan to run, decided after every pair of rounds.

The plan is the fixed schedule at `max_rounds` (runners/schedule.py: per mode and
concurrency, pairs base-head, head-base, …). `Rounds.runs` walks it row by row and,
after each pair of a row, reads the pair's throughput from the client's speed file and
asks `seqstats.decide`; a decided row skips its remaining pairs. Rows stop too when
their share of the GPU-minute budget is spent (*inconclusive*, with the effect the last
look could have detected). Fixed rounds walk the same plan without deciding.

GPU minutes are the wall time each side held the GPU: a run's `run_s` less its wait
for an idle GPU (the server's start-up included).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners import seqstats
from runners.schedule import Planned

FALLBACK_ROUNDS = 5  # a client whose output has no throughput: fixed rounds, this many


def throughput(speed: Path) -> float | None:
    """The primary metric of one run: `summary.throughput_qps` of SGLang-Omni's
    `speed_results.json` (None for another shape, or a value that is not positive)."""
    try:
        doc = json.loads(speed.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    summary = doc.get("summary") if isinstance(doc, dict) else None
    v = summary.get("throughput_qps") if isinstance(summary, dict) else None
    if isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < float("inf"):
        return float(v)
    return None


def held_minutes(runs: list[dict[str, Any]]) -> dict[str, float]:
    """`{base, head, total}`: minutes each side held the GPU, start-ups included."""
    out = {"base": 0.0, "head": 0.0}
    for r in runs:
        s = r.get("run_s")
        if isinstance(s, int | float) and r.get("side") in out:
            out[r["side"]] += max(0.0, float(s) - float(r.get("gpu_wait_s") or 0.0)) / 60.0
    return {
        "base": round(out["base"], 4),
        "head": round(out["head"], 4),
        "total": round(out["base"] + out["head"], 4),
    }


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 0


def row_name(mode: str, concurrency: int) -> str:
    return f"{mode} c{concurrency}"


@dataclass
class Rounds:
    plan: list[Planned]
    adaptive: bool
    max_rounds: int
    threshold_pct: float = 3.0
    gpu_minutes: float | None = None
    alpha: float = 0.05
    warn: Callable[[str], None] = print
    progress: Callable[[str], None] | None = None  # a line after each look, as it happens
    root: Path = Path(".")  # the bundle folder: the records' `files` are relative to it
    cursor: int = 0  # index in `plan` of the run handed out last
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    looks: list[dict[str, Any]] = field(default_factory=list)
    fallback: bool = False
    paired: bool = False  # look at pairs (seqstats.decide_paired)
    rounds: bool = False  # … the sequential design's rounds (seqstats.rounds_paired)
    _left: list[Planned] | None = None  # `blocks`: the runs not handed out yet

    def _groups(self) -> list[tuple[str, list[list[int]]]]:
        """Per row, in plan order: its pairs, as indices into `plan`."""
        rows: dict[str, dict[int, list[int]]] = {}
        for i, p in enumerate(self.plan):
            rows.setdefault(row_name(p.mode, p.concurrency), {}).setdefault(p.round, []).append(i)
        return [(name, [pair for _, pair in sorted(r.items())]) for name, r in rows.items()]

    def runs(self, done: Callable[[], list[dict[str, Any]]]) -> Iterator[Planned]:
        """The runs to make, in order; `done()` gives the records so far (each run's
        record is in it when the next is asked for)."""
        groups = self._groups()
        design = self._design(len(groups))
        for gi, (name, pairs) in enumerate(groups):
            row = seqstats.Row(design)
            state: dict[str, Any] = {"verdict": None, "stopped": None, "rounds": 0}
            self.rows[name] = state
            spent0 = held_minutes(done())["total"]
            allowance = (
                None
                if self.gpu_minutes is None
                else spent0 + max(0.0, self.gpu_minutes - spent0) / (len(groups) - gi)
            )
            for pi, pair in enumerate(pairs):
                if self.adaptive and self.fallback and pi >= min(FALLBACK_ROUNDS, len(pairs)):
                    state["stopped"] = "max-rounds"
                    break
                if allowance is not None and self.adaptive and not self._fits(done(), allowance):
                    state["stopped"] = "budget"
                    break
                for i in pair:
                    self.cursor = i
                    yield self.plan[i]
                if self._look(done(), name, pi, len(pairs), row):
                    break
            else:
                state["stopped"] = state["stopped"] or "max-rounds"
        self.cursor = len(self.plan)

    def blocks(self, done: Callable[[], list[dict[str, Any]]]) -> Iterator[list[Planned]]:
        """The runs to make round by round, for a server every row can share: per round,
        each side's runs of the rows still undecided, one block per server start (a
        sequential round of 6 rows starts 2 servers, not 12). Each row is looked at after
        every round, as `runs` does."""
        groups = self._groups()
        design = self._design(len(groups))
        rows = {name: seqstats.Row(design) for name, _ in groups}
        pairs = dict(groups)
        for name, _ in groups:
            self.rows[name] = {"verdict": None, "stopped": None, "rounds": 0}
        live = [name for name, _ in groups]
        self._left = list(self.plan)
        for pi in range(max((len(x) for x in pairs.values()), default=0)):
            for name in [n for n in live if pi >= len(pairs[n])]:
                self.rows[name]["stopped"] = self.rows[name]["stopped"] or "max-rounds"
                live.remove(name)
            if not live:
                break
            if self.adaptive and self.fallback and pi >= FALLBACK_ROUNDS:
                break
            if (
                self.gpu_minutes is not None
                and self.adaptive
                and not self._round_fits(done(), self.gpu_minutes, len(live))
            ):
                for name in live:
                    self.rows[name]["stopped"] = "budget"
                live = []
                break
            for k in range(2):  # the round's two sides, in its order (base, head or back)
                block = [self.plan[pairs[n][pi][k]] for n in live]
                yield block  # still pending: an interruption skips what it did not run
                handed = {id(p) for p in block}
                self._left = [p for p in self._left if id(p) not in handed]
            for name in list(live):
                if self._look(done(), name, pi, len(pairs[name]), rows[name]):
                    live.remove(name)
                    self._left = [p for p in self._left if row_name(p.mode, p.concurrency) != name]
        for name in live:
            self.rows[name]["stopped"] = self.rows[name]["stopped"] or "max-rounds"
        self._left = []
        self.cursor = len(self.plan)

    def pending(self) -> list[Planned]:
        """The runs the walk may still hand out (and those handed out last, which may be
        recorded already): what an interruption skips."""
        if self._left is not None:
            return list(self._left)
        return self.plan[self.cursor :]

    def _design(self, rows: int) -> seqstats.Design:
        return seqstats.Design(
            max_rounds=self.max_rounds,
            threshold_pct=self.threshold_pct,
            alpha=self.alpha,
            rows=rows,
        )

    def _look(
        self, runs: list[dict[str, Any]], name: str, pi: int, planned: int, row: seqstats.Row
    ) -> bool:
        """After pair `pi` of row `name`: look at what it measured; whether the row is
        done (decided)."""
        state = self.rows[name]
        if not self.adaptive or self.fallback:
            state["rounds"] = pi + 1
            return False
        values = self._values(runs, name)
        if values is None:
            self.fallback = True
            state["rounds"] = pi + 1
            self.warn(
                "--rounds auto: the client's speed file has no summary.throughput_qps, "
                f"so the rounds are fixed ({min(FALLBACK_ROUNDS, planned)} a side)"
            )
            return False
        measured = (len(values[0]), len(values[1]))
        state["rounds"] = min(measured)  # rounds a side that were measured
        if measured == state.get("measured"):
            return False  # the pair failed or was skipped: nothing new to look at
        state["measured"] = measured
        if min(measured) < 2:
            return False
        pb, ph, second = self._pairs(runs, name) if self.paired else ([], [], [])
        if self.paired and self.rounds and not seqstats.rounds_paired(second):
            look = seqstats.decide(row, values[0], values[1])  # too few rounds yet
        elif self.paired:
            if len(pb) < 2:
                return False
            look = seqstats.decide_paired(row, pb, ph, second)
        else:
            look = seqstats.decide(row, values[0], values[1])
        minutes = held_minutes(runs)["total"]
        rec = {"row": name, "round": pi + 1, **look.record(), "gpu_minutes": minutes}
        self.looks.append(rec)
        state["last"] = look
        if self.progress is not None:
            self.progress(look_line(name, pi + 1, look, minutes, self.threshold_pct))
        if look.verdict == seqstats.CONTINUE:
            return False
        state["verdict"] = look.verdict
        state["stopped"] = "decided"
        return True

    def _fits(self, runs: list[dict[str, Any]], allowance: float) -> bool:
        """Whether one more pair fits in the allowance (from the mean GPU minutes of the
        runs so far)."""
        spent = held_minutes(runs)["total"]
        measured = [r for r in runs if isinstance(r.get("run_s"), int | float)]
        per_run = held_minutes(measured)["total"] / len(measured) if measured else 0.0
        return spent + 2 * per_run <= allowance + 1e-9

    def _round_fits(self, runs: list[dict[str, Any]], allowance: float, rows: int) -> bool:
        """Whether one more round of `rows` rows on shared servers fits: two starts (the
        mean start-up so far) and 2 × `rows` runs (their mean time besides start-ups)."""
        spent = held_minutes(runs)["total"]
        measured = [r for r in runs if isinstance(r.get("run_s"), int | float)]
        starts = [float(r["startup_s"]) for r in measured if _number(r.get("startup_s"))]
        start_min = sum(starts) / len(starts) / 60.0 if starts else 0.0
        rest = held_minutes(measured)["total"] - sum(starts) / 60.0
        per_run = max(0.0, rest) / len(measured) if measured else 0.0
        return spent + 2 * start_min + 2 * rows * per_run <= allowance + 1e-9

    def _values(
        self, runs: list[dict[str, Any]], name: str
    ) -> tuple[list[float], list[float]] | None:
        """The row's per-round throughput per side, from the speed files of its good runs
        (None when a good run's file has no throughput: another client's shape)."""
        out: dict[str, list[float]] = {"base": [], "head": []}
        for r in runs:
            if row_name(str(r.get("mode")), int(r.get("concurrency") or 0)) != name:
                continue
            if r.get("status") != "ok" or "speed" not in r.get("files", {}):
                continue
            v = throughput(self.root / str(r["files"]["speed"]))
            if v is None:
                return None
            out[str(r["side"])].append(v)
        return out["base"], out["head"]

    def _pairs(
        self, runs: list[dict[str, Any]], name: str
    ) -> tuple[list[float], list[float], list[bool]]:
        """The row's complete pairs, in round order: base and head throughput, and
        whether the head ran second (runs are recorded in execution order)."""
        got: dict[int, dict[str, tuple[int, float]]] = {}
        for i, r in enumerate(runs):
            if row_name(str(r.get("mode")), int(r.get("concurrency") or 0)) != name:
                continue
            if r.get("status") != "ok" or "speed" not in r.get("files", {}):
                continue
            v = throughput(self.root / str(r["files"]["speed"]))
            if v is not None:
                got.setdefault(int(r.get("round") or 0), {})[str(r["side"])] = (i, v)
        base: list[float] = []
        head: list[float] = []
        second: list[bool] = []
        for _, pair in sorted(got.items()):
            if "base" in pair and "head" in pair:
                base.append(pair["base"][1])
                head.append(pair["head"][1])
                second.append(pair["head"][0] > pair["base"][0])
        return base, head, second

    def manifest(self, cut_short: bool) -> dict[str, Any] | None:
        """The manifest's `adaptive` (None for fixed rounds)."""
        if not self.adaptive:
            return None
        design = seqstats.Design(
            self.max_rounds, self.threshold_pct, self.alpha, rows=len(self.rows) or 1
        )
        rows: dict[str, Any] = {}
        decisions: dict[str, str] = {}
        for name, st in self.rows.items():
            last: seqstats.Look | None = st.get("last")
            verdict = st["verdict"] or seqstats.INCONCLUSIVE
            stopped = "cut-short" if cut_short and st["verdict"] is None else st["stopped"]
            decisions[name] = verdict
            rows[name] = {
                "verdict": verdict,
                "stopped": stopped,
                "rounds": st["rounds"],
                "detectable_pct": None
                if last is None or last.detectable is None
                else round(100.0 * last.detectable, 3),
                "reason": _reason(verdict, stopped, st["rounds"], last, self),
            }
        stops = {r["stopped"] for r in rows.values()}
        if cut_short:
            stopped_all = "cut-short"
        elif "budget" in stops:
            stopped_all = "budget"
        elif "max-rounds" in stops or self.fallback:
            stopped_all = "max-rounds"
        else:
            stopped_all = "decided"
        return {
            "method": "fixed rounds (the client's output has no throughput)"
            if self.fallback
            else (
                design.rounds_method
                if self.paired and self.rounds
                else design.paired_method
                if self.paired
                else design.method
            ),
            "threshold_pct": self.threshold_pct,
            "alpha": self.alpha,
            "max_rounds": self.max_rounds,
            "gpu_minutes_budget": self.gpu_minutes,
            "looks": self.looks,
            "stopped": stopped_all,
            "decisions": decisions,
            "rows": rows,
        }


def look_line(name: str, rnd: int, look: seqstats.Look, minutes: float, thr: float) -> str:
    """One look, for the operator watching a run: the row, its interval, what it says."""
    if look.delta is None or look.lo is None or look.hi is None:
        where = "no interval yet"
    else:
        where = f"{100 * look.delta:+.1f}% [{100 * look.lo:+.1f}%, {100 * look.hi:+.1f}%]"
    said = (
        f"goes on (±{thr:g}% not decided yet)"
        if look.verdict == seqstats.CONTINUE
        else f"decided: {look.verdict}"
    )
    return (
        f"{name} after round {rnd}: head vs base {where}; {said}; {minutes:.1f} GPU minutes so far"
    )


def _reason(
    verdict: str, stopped: str | None, rounds: int, last: seqstats.Look | None, r: Rounds
) -> str:
    if verdict in (seqstats.IMPROVED, seqstats.REGRESSED):
        return f"{verdict} past ±{r.threshold_pct:g}% after {rounds} round(s) a side"
    if verdict == seqstats.EQUIVALENT:
        return f"the interval lies inside ±{r.threshold_pct:g}% after {rounds} round(s) a side"
    if stopped == "budget":
        why = f"the GPU-minute budget ({r.gpu_minutes or 0:g}) was spent"
    elif stopped == "max-rounds":
        why = f"the most rounds ({r.max_rounds} a side) were run"
    elif stopped == "cut-short":
        why = "the verification was cut short"
    else:
        why = "no decision was reached"
    if r.fallback:
        why = "the client's output has no throughput to decide on; rounds were fixed"
    det = (
        ""
        if last is None or last.detectable is None
        else f"; it could have detected about ±{100.0 * last.detectable:.1f}%"
    )
    return f"{why} before a decision{det}"
