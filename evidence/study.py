"""The serving study: one row per GPU × mode × concurrency × metric, base against head.

Primary rows (the claim's metric and mode on every GPU and concurrency; without a claim,
request throughput everywhere) are Holm-corrected and decide the verdict. Other rows keep
their own 95% intervals and decide nothing except through guards (latency and TTFA p95
everywhere; the primary metric and request throughput on the rows that are not primary).

A bundle whose manifest says `design.paired` (base and head of the same mode, concurrency
and round measured close in time) is compared pair by pair (`stats.compare_paired`);
every other bundle, and every one written before designs were recorded, by Welch's t on
the rounds of each side.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from evidence.load import LoadedRun, Source
from evidence.metrics import ACCURACY, BY_NAME, METRICS, Metric, canonical
from evidence.model import ClaimSpec, Manifest, Mode, StudyRow, Verdict
from evidence.policy import Policy
from evidence.records import FloatArray
from evidence.stats import Comparison, compare, compare_paired, holm
from runners import seqstats

ConfigKey = tuple[str, Mode, int]


Pair = tuple[LoadedRun, LoadedRun]  # (base, head) of one round


@dataclass
class Cell:
    """The usable runs of one configuration, by side; in a paired design also its
    complete pairs (`pairs` is None for an unpaired one) and how many were incomplete."""

    base: list[LoadedRun]
    head: list[LoadedRun]
    requests_per_round: int
    pairs: list[Pair] | None = None
    incomplete: int = 0


@dataclass
class _Pairing:
    rounds: dict[tuple[int, int], dict[str, list[LoadedRun]]] = field(default_factory=dict)
    unpaired: bool = False  # a source of this configuration is not of a paired design
    by_round: bool = False  # a source of it is of sequential rounds (`rounds_paired`)


def is_paired(manifest: Manifest) -> bool:
    """Whether a bundle's runs are analysed as pairs: its design pairs them and is one
    the engine knows (`Design.analysed_paired`)."""
    return manifest.measured_by.analysed_paired


def cells(sources: list[Source]) -> dict[ConfigKey, Cell]:
    by_key: dict[ConfigKey, dict[str, list[LoadedRun]]] = defaultdict(
        lambda: {"base": [], "head": []}
    )
    reqs: dict[ConfigKey, list[int]] = defaultdict(list)
    pairing: dict[ConfigKey, _Pairing] = defaultdict(_Pairing)
    for si, src in enumerate(sources):
        paired = is_paired(src.manifest)
        by_round = src.manifest.measured_by.analysed_rounds
        for lr in src.runs:
            key = (src.gpu, lr.run.mode, lr.run.concurrency)
            if paired:  # every planned run counts, so a failed burst shows as incomplete
                pairing[key].by_round |= by_round
                rounds = pairing[key].rounds.setdefault((si, lr.run.round), {})
                rounds.setdefault(lr.run.side, [])
                if lr.usable:
                    rounds[lr.run.side].append(lr)
            if not lr.usable:
                continue
            if not paired:
                pairing[key].unpaired = True
            by_key[key][lr.run.side].append(lr)
            if lr.records is not None:
                reqs[key].append(int(lr.records.success.sum()))
            elif lr.run.requests:
                reqs[key].append(lr.run.requests)
    out: dict[ConfigKey, Cell] = {}
    for k, v in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        cell = Cell(v["base"], v["head"], min(reqs[k]) if reqs[k] else 0)
        pg = pairing.get(k)
        if pg is not None and not pg.unpaired and pg.rounds:
            cell.pairs = []
            for _, sides in sorted(pg.rounds.items()):
                b, h = sides.get("base", []), sides.get("head", [])
                if len(b) == 1 and len(h) == 1:
                    cell.pairs.append((b[0], h[0]))
                else:
                    cell.incomplete += 1
            if pg.by_round and not seqstats.rounds_paired(
                [h.order > b.order for b, h in cell.pairs]
            ):
                cell.pairs, cell.incomplete = None, 0  # too few rounds: Welch, as before
        out[k] = cell
    return out


def _values(runs: list[LoadedRun], metric: str) -> np.ndarray:
    return np.array([lr.metrics.get(metric) for lr in runs], dtype=np.float64)


def _compare(
    cell: Cell, metric: Metric, policy: Policy
) -> tuple[Comparison, FloatArray, FloatArray]:
    """The row's comparison and the values it compared, per side (paired: of the pairs
    that have the metric on both sides)."""
    if cell.pairs is None:
        b, h = _values(cell.base, metric.name), _values(cell.head, metric.name)
        return compare(b, h, metric.scale, policy.alpha, policy.power), b, h
    b = _values([p[0] for p in cell.pairs], metric.name)
    h = _values([p[1] for p in cell.pairs], metric.name)
    second = np.array([hr.order > br.order for br, hr in cell.pairs], dtype=np.bool_)
    ok = np.isfinite(b) & np.isfinite(h)
    c = compare_paired(b[ok], h[ok], second[ok], metric.scale, policy.alpha, policy.power)
    return c, b[ok], h[ok]


def _pct(x: float | None) -> float | None:
    return None if x is None else round(100.0 * x, 4)


def _verdict(metric: Metric, c: Comparison, p: float | None, policy: Policy) -> Verdict:
    """Improved or regressed: an interval that excludes zero (or the Holm-adjusted p) and
    a practical effect. No change: the interval lies inside ± the practical threshold (the
    figures are equivalent). Anything else is inconclusive: the interval is too wide to say.
    """
    limit = row_threshold(metric, policy)
    if metric.scale == "diff":
        lo, hi, delta = c.lo_abs, c.hi_abs, c.delta_abs
    else:
        lo, hi, delta = c.lo, c.hi, c.delta
        limit /= 100
    if delta is None or p is None:
        return "inconclusive"
    big = abs(delta) > limit if metric.scale == "diff" else abs(delta) >= limit
    if p < policy.alpha and big:
        gain = delta if metric.better == "higher" else -delta
        return "improved" if gain > 0 else "regressed"
    if lo is not None and hi is not None and -limit < lo and hi < limit:
        return "no-change"
    return "inconclusive"


def row_threshold(metric: Metric, policy: Policy) -> float:
    """The change that counts for this metric: percent, or absolute for rates (WER,
    failure rate), whose change is judged as a difference."""
    if metric.scale == "diff":
        return policy.wer_increase_max if metric.name in ACCURACY else policy.failure_rate_max
    return policy.threshold_pct


def primary_metric(claim: ClaimSpec | None) -> tuple[str, Mode | None]:
    if claim is None:
        return "throughput_qps", None
    mode = None if claim.mode == "unspecified" else claim.mode
    return canonical(claim.metric), mode


def build_study(
    sources: list[Source], policy: Policy, claim: ClaimSpec | None
) -> tuple[list[StudyRow], bool]:
    """All rows, and whether the claim's metric/mode was measured at all."""
    rows: list[StudyRow] = []
    comps: list[Comparison] = []
    pmetric, pmode = primary_metric(claim)
    for (gpu, mode, conc), cell in cells(sources).items():
        for metric in METRICS:
            b, h = _values(cell.base, metric.name), _values(cell.head, metric.name)
            if not np.isfinite(b).any() or not np.isfinite(h).any():
                continue
            c, b, h = _compare(cell, metric, policy)
            if cell.pairs is not None and b.size == 0:
                continue  # no pair has the figure on both sides: nothing to compare
            note = None
            tail_short = (
                metric.tail is not None and cell.requests_per_round * (1 - metric.tail / 100) < 1
            )
            if tail_short:
                note = (
                    f"p{metric.tail:g} from {cell.requests_per_round} requests a round is "
                    "not a finding (tails need samples)"
                )
            row = StudyRow(
                gpu=gpu,
                mode=mode,
                concurrency=conc,
                metric=metric.name,
                label=metric.label,
                unit=metric.unit,
                better=metric.better,
                base=float(np.nanmean(b)),
                head=float(np.nanmean(h)),
                n_base=int(np.isfinite(b).sum()),
                n_head=int(np.isfinite(h).sum()),
                delta_pct=_pct(c.delta),
                ci_low_pct=_pct(c.lo),
                ci_high_pct=_pct(c.hi),
                delta_abs=c.delta_abs,
                ci_low_abs=c.lo_abs,
                ci_high_abs=c.hi_abs,
                p_value=c.p,
                mde_pct=_pct(c.mde),
                verdict="inconclusive" if tail_short else _verdict(metric, c, c.p, policy),
                primary=metric.name == pmetric and (pmode is None or mode == pmode),
                guard=policy.guard_pct(metric.name) is not None,
                threshold_pct=None if metric.scale == "diff" else policy.threshold_pct,
                threshold_abs=row_threshold(metric, policy) if metric.scale == "diff" else None,
                note=note,
                method="welch" if cell.pairs is None else "paired",
                pairs=None if cell.pairs is None else int(b.size),
            )
            if cell.pairs is None and (row.n_base < 2 or row.n_head < 2):
                row.note = "fewer than 2 rounds on a side: no interval"
            elif cell.pairs is not None:
                _note_pairs(row, len(cell.pairs) + cell.incomplete - int(b.size))
            rows.append(row)
            comps.append(c)
    measured = any(r.primary for r in rows)
    if not measured:  # the claim's metric was not measured: judge throughput instead
        for r in rows:
            r.primary = r.metric == "throughput_qps"
    _correct_primary(rows, comps, policy)
    _defer_to_runner(rows, sources)
    _apply_guards(rows, policy)
    return rows, measured or claim is None


def _defer_to_runner(rows: list[StudyRow], sources: list[Source]) -> None:
    """With `--rounds auto` the runner looked after every pair (round) and stopped when
    its repeated interval decided; the engine's fixed 95% interval over the same runs
    does not allow for those looks, and at high noise it calls an A/A improved or
    regressed in about 8% of stopped bundles (docs/statistics.md). So a primary
    throughput row is improved or regressed only if the runner's test said so too."""
    decisions: dict[str, dict[str, str]] = {}
    for src in sources:
        a = src.manifest.adaptive
        if a is not None and a.decisions and not (a.method or "").startswith("fixed rounds"):
            decisions[src.gpu] = a.decisions
    for r in rows:
        if not r.primary or r.metric != "throughput_qps" or r.verdict not in _MOVED:
            continue
        runner = decisions.get(r.gpu, {}).get(f"{r.mode} c{r.concurrency}")
        if runner is None or runner == r.verdict:
            continue
        r.demoted_from, r.demoted_by = r.verdict, "sequential"
        r.verdict = "inconclusive"
        why = (
            f"would be {r.demoted_from} by its fixed interval, but the runner's sequential "
            f"test, which allows for its looks after every pair, ended it {runner}"
        )
        r.note = f"{why}; {r.note}" if r.note else why


_MOVED = ("improved", "regressed")


def _note_pairs(row: StudyRow, left_out: int) -> None:
    """A paired row says when it has no interval, and how many pairs it left out."""
    notes = [row.note] if row.note else []
    if (row.pairs or 0) < 2:
        notes.append("fewer than 2 complete pairs: no interval")
    if left_out:
        notes.append(
            f"{left_out} incomplete pair(s) left out (a side's run failed or lacks the figure)"
        )
    row.note = "; ".join(notes) or None


def _correct_primary(rows: list[StudyRow], comps: list[Comparison], policy: Policy) -> None:
    idx = [i for i, r in enumerate(rows) if r.primary and r.p_value is not None]
    adjusted = holm([rows[i].p_value or 1.0 for i in idx])
    for i, p_adj in zip(idx, adjusted, strict=True):
        row = rows[i]
        row.p_adjusted = p_adj
        if row.note and row.note.startswith("p"):
            continue
        new = _verdict(BY_NAME[row.metric], comps[i], p_adj, policy)
        if new != row.verdict and len(idx) > 1:
            holm_note = (
                f"not significant after Holm correction over {len(idx)} primary rows "
                f"(adjusted p = {p_adj:.3g})"
            )
            # a paired row's note on left-out pairs stays (an unpaired row has none here)
            row.note = f"{holm_note}; {row.note}" if row.note else holm_note
        row.verdict = new


def _apply_guards(rows: list[StudyRow], policy: Policy) -> None:
    """Guarded rows: the tail latencies everywhere, and the primary metric and request
    throughput on every row that is not primary (another mode or concurrency). A row
    regressed past its guard lowers the verdict."""
    pmetric = next((r.metric for r in rows if r.primary), "throughput_qps")
    for r in rows:
        limit = policy.guard_pct(r.metric)
        if limit is None and not r.primary:
            limit = policy.guard_other_pct(r.metric, pmetric)
            r.guard = r.guard or limit is not None
        r.guard_pct = limit
        if limit is None or r.delta_pct is None:
            continue
        loss = r.delta_pct if r.better == "lower" else -r.delta_pct
        r.guard_failed = r.verdict == "regressed" and loss > limit
