"""The null control (`control: aa`): base measured against the base code again.

Pairing cancels the host's drift, not a side bias: whatever goes with the head's slot
(its user, cgroup, port, start order) is in every pair alike and reads as an effect of
the change. A null control puts a third server, the base code again, in the head's
place for control pairs interleaved with the real ones, so the machine's own bias and
noise at that moment are measured, not assumed away (docs/statistics.md, "The null
control"). Its runs are read like the real ones (evidence.load) but never enter the
study's rows: here they become one `ControlRow` per configuration, compared on the
primary metric with the engine's own estimator, and a primary row whose change the
control matched is demoted to inconclusive.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from evidence import inert
from evidence.load import LoadedRun, Source
from evidence.metrics import BY_NAME, Metric
from evidence.model import ControlResult, ControlRow, Mode, StudyRow
from evidence.policy import Policy
from evidence.study import Cell, _compare, _pct, _values, _verdict, cells, row_threshold
from evidence.verdict import fmt_change

# The engine's words for each kind of control it knows (the runner's are only quoted).
SUMMARY = {"aa": "base against the base code again, resident in its own server in the head's place"}
TITLE = "Null control (base against base"  # what a maintainer reads before the figures


def control_rows(sources: list[Source], policy: Policy, metric_name: str) -> list[ControlRow]:
    """One row per GPU × mode × concurrency of every bundle with a control: the control
    server (in the head's place) against base, on `metric_name`, compared as the real
    rows of that bundle are (paired for a paired design, else Welch)."""
    metric = BY_NAME[metric_name]
    out: list[ControlRow] = []
    for src in sources:
        if src.control is None:
            continue
        ctl = Source(src.path, src.kind, src.manifest, src.gpu, src.control_runs)
        found = cells([ctl])
        planned = sorted({(lr.run.mode, lr.run.concurrency) for lr in src.control_runs})
        for mode, conc in planned:
            cell = found.get((src.gpu, mode, conc))
            out.append(_row(src.gpu, mode, conc, cell, metric, policy))
    return out


def _row(
    gpu: str, mode: Mode, conc: int, cell: Cell | None, metric: Metric, policy: Policy
) -> ControlRow:
    """A configuration's control row; inconclusive, saying why, when nothing compares."""
    limit = row_threshold(metric, policy)
    row = ControlRow(
        gpu=gpu,
        mode=mode,
        concurrency=conc,
        metric=metric.name,
        label=metric.label,
        better=metric.better,
        delta_pct=None,
        ci_low_pct=None,
        ci_high_pct=None,
        method="welch",
        verdict="inconclusive",
        threshold_pct=None if metric.scale == "diff" else limit,
        threshold_abs=limit if metric.scale == "diff" else None,
    )
    if cell is None:
        row.note = "no usable control run"
        return row
    row.method = "welch" if cell.pairs is None else "paired"
    b, h = _values(cell.base, metric.name), _values(cell.head, metric.name)
    if not np.isfinite(b).any() or not np.isfinite(h).any():
        row.note = f"no control run has {metric.label} on both sides"
        return row
    c, b, h = _compare(cell, metric, policy)
    row.delta_pct, row.ci_low_pct, row.ci_high_pct = _pct(c.delta), _pct(c.lo), _pct(c.hi)
    row.delta_abs, row.ci_low_abs, row.ci_high_abs = c.delta_abs, c.lo_abs, c.hi_abs
    row.p_value, row.mde_pct = c.p, _pct(c.mde)
    row.n_base, row.n_control = int(np.isfinite(b).sum()), int(np.isfinite(h).sum())
    row.verdict = _verdict(metric, c, c.p, policy)
    notes = []
    if cell.pairs is not None:
        row.pairs = int(b.size)
        left_out = len(cell.pairs) + cell.incomplete - row.pairs
        if left_out:
            notes.append(f"{left_out} incomplete control pair(s) left out")
    if c.lo is None:
        notes.append("too few control runs for an interval")
    row.note = "; ".join(notes) or None
    row.moved = row.verdict in ("improved", "regressed") or _past(row, metric)
    return row


def _past(row: ControlRow, metric: Metric) -> bool:
    """The control's point estimate past the threshold, whatever its interval."""
    if metric.scale == "diff":
        return row.delta_abs is not None and abs(row.delta_abs) > (row.threshold_abs or 0)
    return row.delta_pct is not None and abs(row.delta_pct) >= (row.threshold_pct or 0)


def _moved_by(row: StudyRow | ControlRow) -> float | None:
    """The change the verdict is judged on: relative, or absolute for a rate."""
    return row.delta_abs if BY_NAME[row.metric].scale == "diff" else row.delta_pct


def demote(rows: list[StudyRow], controls: Iterable[ControlRow]) -> None:
    """A primary row improved (regressed) while the control of its configuration moved
    the same way by at least as much becomes inconclusive: base against base moved that
    far, so the change cannot be told from the machine's bias between the slots."""
    by_config = {(c.gpu, c.mode, c.concurrency, c.metric): c for c in controls}
    for r in rows:
        if not r.primary or r.verdict not in ("improved", "regressed"):
            continue
        c = by_config.get((r.gpu, r.mode, r.concurrency, r.metric))
        if c is None:
            continue
        rd, cd = _moved_by(r), _moved_by(c)
        if rd is None or cd is None or rd == 0 or not (cd >= rd if rd > 0 else cd <= rd):
            continue
        r.demoted_from, r.demoted_by = r.verdict, "control"
        r.verdict = "inconclusive"
        why = (
            f"would be {r.demoted_from}, but the null control (base against base) moved "
            f"{fmt_change(c)} in this configuration, at least as much: the machine's bias "
            "between the slots can explain the whole change"
        )
        r.note = f"{why}; {r.note}" if r.note else why


def favoured(c: ControlRow) -> str:
    """Which slot the machine favoured: the head's when the control (in the head's
    place) did better than base."""
    d = _moved_by(c) or 0.0
    gain = d if c.better == "higher" else -d
    return "the head's slot over the base's" if gain > 0 else "the base's slot over the head's"


def runs_of(src: Source, c: ControlRow) -> list[LoadedRun]:
    return [
        lr
        for lr in src.control_runs
        if (lr.run.mode, lr.run.concurrency) == (c.mode, c.concurrency)
    ]


def control_result(src: Source, rows: list[ControlRow]) -> ControlResult | None:
    """A GPU's control for the evidence: the engine's words for its kind, its GPU cost,
    its rows, and the runner's own summary kept apart, bounded."""
    ctl = src.control
    if ctl is None:
        return None
    said = inert.bound(inert.clean(ctl.summary).strip(), inert.TEXT_LIMIT) if ctl.summary else None
    return ControlResult(
        kind=ctl.kind,
        summary=SUMMARY[ctl.kind],
        runs=len(src.control_runs),
        gpu_minutes=ctl.gpu_minutes,
        rows=[r for r in rows if r.gpu == src.gpu],
        runner_summary=said,
    )
