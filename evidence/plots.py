"""The report's plots: rounds, latency and TTFA distributions, deltas, the search trajectory.

Each plot is drawn from data prepared by a small pure function (`rounds_series`,
`distribution_panels`, `ecdf`, `delta_rows`, `trajectory_points`, `best_so_far`), so tests
assert on that data rather than on pixels. Drawing uses matplotlib's object-oriented API on
the Agg backend (no pyplot, no global state); a plot without data is skipped, never drawn
empty. Each figure's margins are set once, from the sizes of the texts around its axes
(`_fit`), rather than by matplotlib's constrained layout, which measured every artist
twice at every draw: a quarter of the CPU time a plot took (bench/plots.py). A plot
whose data this process drew lately is written again from its PNG (`DRAWN`), not drawn.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import math
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.text import Annotation, Text
from PIL import Image

from evidence.load import Source
from evidence.model import (
    Candidate,
    Evidence,
    EvolveState,
    Harness,
    Mode,
    Plot,
    RunStatus,
    Side,
    StudyRow,
    Verdict,
)
from evidence.records import FloatArray

DPI = 100
MAX_ECDF_POINTS = 20_000
MAX_ANNOTATED_REJECTS = 5
SIDE_COLOURS: dict[Side, str] = {"base": "#1f77b4", "head": "#ff7f0e"}
VERDICT_COLOURS: dict[Verdict, str] = {
    "improved": "#2ca02c",
    "regressed": "#d62728",
    "no-change": "#7f7f7f",
    "inconclusive": "#bcbd22",
}
REJECT_COLOUR = "#d62728"
# Font sizes in points of titles, axis labels and tick labels: `_fit` makes room for them.
TITLE_PT, LABEL_PT, TICK_PT = 9, 8, 7
# True: matplotlib's constrained layout places the axes instead of `_fit`, as before; the
# reference of bench/plots.py.
CONSTRAINED_LAYOUT = False

# --------------------------------------------------------------------- data preparation


@dataclass(frozen=True)
class RoundPoint:
    """One run of the per-round plot; `x` is its place in the bundle's execution order."""

    x: int
    gpu: str
    mode: Mode
    concurrency: int
    side: Side
    round: int
    run_id: str
    throughput_qps: float | None
    status: RunStatus

    @property
    def failed(self) -> bool:
        return self.status != "ok"


PanelKey = tuple[str, Mode]


def rounds_series(ev: Evidence) -> dict[PanelKey, list[RoundPoint]]:
    """Runs per (GPU, mode), each panel in execution order (failed and skipped runs kept)."""
    panels: dict[PanelKey, list[RoundPoint]] = defaultdict(list)
    for r in ev.rounds:
        qps = r.throughput_qps
        if qps is not None and not math.isfinite(qps):
            qps = None
        panels[(r.gpu, r.mode)].append(
            RoundPoint(
                x=r.order,
                gpu=r.gpu,
                mode=r.mode,
                concurrency=r.concurrency,
                side=r.side,
                round=r.round,
                run_id=r.run_id,
                throughput_qps=qps,
                status=r.status,
            )
        )
    return {k: sorted(panels[k], key=lambda p: p.x) for k in sorted(panels)}


def config_segments(points: list[RoundPoint]) -> list[tuple[int, list[RoundPoint]]]:
    """Consecutive runs of one concurrency: the configuration blocks of a panel."""
    segments: list[tuple[int, list[RoundPoint]]] = []
    for p in points:
        if segments and segments[-1][0] == p.concurrency:
            segments[-1][1].append(p)
        else:
            segments.append((p.concurrency, [p]))
    return segments


def ecdf(values: FloatArray, max_points: int = MAX_ECDF_POINTS) -> tuple[FloatArray, FloatArray]:
    """The empirical CDF of the finite values: (x, F(x)), at most `max_points` points.

    Small samples give every point; large ones give `max_points` evenly spaced quantiles,
    which draw the same curve at a fraction of the cost. The quantiles are those of
    `np.quantile` (linear method), read off one sort: `np.quantile` itself partitions once
    per quantile and takes about a second for 20,000 quantiles of 50,000 values.
    """
    v = np.asarray(values, dtype=np.float64)
    v = np.sort(v[np.isfinite(v)])
    n = v.size
    if n == 0:
        return np.empty(0, dtype=np.float64), np.empty(0, dtype=np.float64)
    if n <= max_points:
        return v, np.arange(1, n + 1, dtype=np.float64) / n
    probs = np.linspace(0.0, 1.0, max(2, max_points))
    pos = probs * (n - 1)
    lo = np.floor(pos).astype(np.intp)
    hi = np.minimum(lo + 1, n - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo), probs


@dataclass
class DistPanel:
    """Per-request values of one GPU x mode at its highest concurrency, by side."""

    gpu: str
    mode: Mode
    concurrency: int
    base: FloatArray
    head: FloatArray


def side_values(
    sources: list[Source], gpu: str, mode: Mode, concurrency: int, column: str
) -> dict[Side, FloatArray]:
    """The finite values of `column` of successful requests, all rounds of each side."""
    parts: dict[Side, list[FloatArray]] = {"base": [], "head": []}
    for src in sources:
        if src.gpu != gpu:
            continue
        for lr in src.runs:
            run = lr.run
            if run.status != "ok" or run.mode != mode or run.concurrency != concurrency:
                continue
            rec = lr.records
            if rec is None or column not in rec.cols:
                continue
            col = rec.cols[column]
            if col.shape != rec.success.shape:
                continue
            v = col[rec.success]
            parts[run.side].append(v[np.isfinite(v)])
    return {
        side: (np.concatenate(arrs) if arrs else np.empty(0, dtype=np.float64))
        for side, arrs in parts.items()
    }


def distribution_panels(
    sources: list[Source], column: str, streaming_only: bool = False
) -> list[DistPanel]:
    """One panel per GPU x mode, at the highest concurrency that has values of `column`."""
    configs: dict[PanelKey, set[int]] = defaultdict(set)
    for src in sources:
        for lr in src.runs:
            if lr.run.status != "ok" or lr.records is None:
                continue
            if streaming_only and lr.run.mode != "streaming":
                continue
            configs[(src.gpu, lr.run.mode)].add(lr.run.concurrency)
    panels: list[DistPanel] = []
    for gpu, mode in sorted(configs):
        for conc in sorted(configs[(gpu, mode)], reverse=True):
            vals = side_values(sources, gpu, mode, conc, column)
            if vals["base"].size or vals["head"].size:
                panels.append(DistPanel(gpu, mode, conc, vals["base"], vals["head"]))
                break
    return panels


@dataclass(frozen=True)
class DeltaPoint:
    label: str
    delta_pct: float
    ci_low_pct: float | None
    ci_high_pct: float | None
    verdict: Verdict
    primary: bool
    guard_failed: bool

    @property
    def has_interval(self) -> bool:
        return self.ci_low_pct is not None and self.ci_high_pct is not None


def row_label(row: StudyRow) -> str:
    """`H200 streaming c=16 throughput`."""
    return f"{row.gpu} {row.mode} c={row.concurrency} {row.label}"


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def delta_rows(ev: Evidence) -> list[DeltaPoint]:
    """Primary and guarded rows that have a point estimate, in the study's order."""
    out: list[DeltaPoint] = []
    for row in ev.study:
        if not (row.primary or row.guard):
            continue
        delta = _finite(row.delta_pct)
        if delta is None:
            continue
        out.append(
            DeltaPoint(
                label=row_label(row),
                delta_pct=delta,
                ci_low_pct=_finite(row.ci_low_pct),
                ci_high_pct=_finite(row.ci_high_pct),
                verdict=row.verdict,
                primary=row.primary,
                guard_failed=row.guard_failed,
            )
        )
    return out


@dataclass(frozen=True)
class TrajPoint:
    """One evaluated candidate of the harness search."""

    hour: float
    reward: float | None
    passed: bool
    reasons: tuple[str, ...] = field(default_factory=tuple)  # failed guards or status
    name: str | None = None  # the harness round, when known


def trajectory_points(harness: Harness | None) -> list[TrajPoint]:
    """The search trajectory in time order, from either form the intake accepts.

    Article form (`hour`, `reward`, `passed`, `failed_guards`) is taken as is. An
    RSI-Harness `evolve_state.json` gives hours since the first submission; a submission
    whose status is not `completed` (e.g. `verifier_error`) is a rejected one.
    """
    traj = harness.trajectory if harness is not None else None
    if traj is None:
        return []
    points: list[TrajPoint] = []
    if isinstance(traj, EvolveState):
        subs = sorted((s for s in traj.submissions if math.isfinite(s.at)), key=lambda s: s.at)
        if not subs:
            return []
        t0 = subs[0].at
        for s in subs:
            ok = s.status == "completed"
            points.append(
                TrajPoint(
                    hour=(s.at - t0) / 3600.0,
                    reward=_finite(s.score),
                    passed=ok,
                    reasons=() if ok else (s.status,),
                    name=s.round,
                )
            )
        return points
    for tp in traj:
        if not math.isfinite(tp.hour):
            continue
        points.append(
            TrajPoint(
                hour=tp.hour,
                reward=_finite(tp.reward),
                passed=tp.passed,
                reasons=tuple(tp.failed_guards),
            )
        )
    return sorted(points, key=lambda p: p.hour)


def best_so_far(points: list[TrajPoint]) -> tuple[FloatArray, FloatArray]:
    """(hours, best reward so far) over the passed candidates that have a reward."""
    kept = sorted((p for p in points if p.passed and p.reward is not None), key=lambda p: p.hour)
    hours = np.array([p.hour for p in kept], dtype=np.float64)
    rewards = np.array([p.reward for p in kept], dtype=np.float64)
    return hours, np.maximum.accumulate(rewards) if rewards.size else rewards


# --------------------------------------------------------------------------- drawing


def _grid(fig: Figure, n: int, ncols: int) -> list[Axes]:
    nrows = math.ceil(n / ncols)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    flat: list[Axes] = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return flat[:n]


def _figure(width: float, height: float) -> Figure:
    return Figure(
        figsize=(width, height), dpi=DPI, layout="constrained" if CONSTRAINED_LAYOUT else None
    )


# matplotlib's defaults, in inches: a tick's length plus its label's distance from it, an
# axis label's and a title's distance from what they label.
_TICK_IN = (3.5 + 3.5) / 72
_LABELPAD_IN = 4 / 72
_TITLEPAD_IN = 6 / 72
_PAD_IN = 3 / 72  # between the outermost texts and the figure's edge, and between panels
MIN_AXES_WIDTH = 3.0  # inches: longer labels widen the figure rather than squeeze the axes


@dataclass(frozen=True)
class _Ticks:
    """The ticks an axis will draw at its present length: where, labels, offset text."""

    at: list[float]
    labels: list[str]
    offset: str

    @classmethod
    def of(cls, axis: Axis) -> _Ticks:
        lo, hi = sorted(axis.get_view_interval())
        eps = 1e-10 * (hi - lo)
        at = [float(v) for v in axis.get_majorticklocs() if lo - eps <= v <= hi + eps]
        fmt = axis.get_major_formatter()
        return cls(at, fmt.format_ticks(at), fmt.get_offset())


@functools.cache
def _measurer(dpi: float) -> RendererAgg:
    """A renderer that only measures text. One for all figures, so that matplotlib's cache
    of text sizes (by renderer, text, font) serves them all: legends are measured with it."""
    return RendererAgg(1, 1, dpi)  # type: ignore[no-untyped-call]


@functools.lru_cache(maxsize=4096)
def _text_size(text: str, points: float, dpi: float) -> tuple[float, float, float]:
    """Width, height and descent in inches of one line of `text`, as `Text` lays it out."""
    measure = _measurer(dpi).get_text_width_height_descent
    prop = FontProperties(size=points)
    w, h, d = measure(text, prop, ismath=False)  # type: ignore[no-untyped-call]
    _, lp_h, lp_d = measure("lp", prop, ismath=False)  # type: ignore[no-untyped-call]
    return w / dpi, max(h, lp_h) / dpi, max(d, lp_d) / dpi


def _fit(fig: Figure, axes: list[Axes], ncols: int = 1) -> None:
    """Set the margins and gaps of the subplot grid of `axes` so that the texts around each
    fit: titles, axis labels, tick labels, figure legends (above the axes, where an
    `outside` loc puts them) and texts in the axes that run on to the right.

    Every text is measured once, as Agg will draw it; the y tick labels after the heights
    are set, since how many ticks an axis gets depends on its length. A column narrower
    than its titles or MIN_AXES_WIDTH widens the figure.
    """
    if CONSTRAINED_LAYOUT:
        return

    def size(text: str, points: float) -> tuple[float, float, float]:
        return _text_size(text, points, fig.dpi)

    def points(t: Text) -> float:
        return float(t.get_fontproperties().get_size_in_points())

    line = {pt: size("lp", pt)[1] for pt in (TITLE_PT, LABEL_PT, TICK_PT)}
    # A title's baseline is _TITLEPAD_IN above the axes: its descent hangs into the pad.
    title_ascent = line[TITLE_PT] - size("lp", TITLE_PT)[2]
    width, height = fig.get_size_inches()
    rows = [axes[i : i + ncols] for i in range(0, len(axes), ncols)]
    cols = [axes[j::ncols] for j in range(ncols)]

    def above(ax: Axes, offset: bool) -> float:
        title = ax.get_title("left") or ax.get_title()
        space = title_ascent + _TITLEPAD_IN if title else 0.0
        return space + (size("lp", points(ax.yaxis.offsetText))[1] if offset else 0.0)

    def below(ax: Axes, offset: bool) -> float:
        space = _TICK_IN + line[TICK_PT]
        space += size("lp", points(ax.xaxis.offsetText))[1] if offset else 0.0
        return space + (_LABELPAD_IN + line[LABEL_PT] if ax.get_xlabel() else 0.0)

    legends = sum(  # each `borderaxespad` below the edge (or the one above), then a pad
        leg.borderaxespad * leg.prop.get_size_in_points() / 72
        + leg.get_window_extent(_measurer(fig.dpi)).height / fig.dpi
        + _PAD_IN
        for leg in fig.legends
    )

    def set_heights(y_offset: set[Axes], x_offset: set[Axes]) -> None:
        tops = [max(above(ax, ax in y_offset) for ax in row) for row in rows]
        bottoms = [max(below(ax, ax in x_offset) for ax in row) for row in rows]
        top = _PAD_IN + legends + tops[0]
        bottom = _PAD_IN + bottoms[-1]
        gap = max(
            (b + t + _PAD_IN for b, t in zip(bottoms[:-1], tops[1:], strict=True)), default=0.0
        )
        ax_height = (height - top - bottom - (len(rows) - 1) * gap) / len(rows)
        fig.subplots_adjust(top=1 - top / height, bottom=bottom / height, hspace=gap / ax_height)

    set_heights(set(), set())
    yticks = {ax: _Ticks.of(ax.yaxis) for ax in axes}
    xticks = {ax: _Ticks.of(ax.xaxis) for ax in axes}
    y_offset = {ax for ax in axes if yticks[ax].offset}
    x_offset = {ax for ax in axes if xticks[ax].offset}
    if y_offset or x_offset:
        set_heights(y_offset, x_offset)

    def left_of(ax: Axes) -> float:
        labels = yticks[ax].labels
        space = max((size(t, TICK_PT)[0] for t in labels), default=0.0)
        space += _TICK_IN if labels else 0.0
        return space + (_LABELPAD_IN + line[LABEL_PT] if ax.get_ylabel() else 0.0)

    def reaches(ax: Axes) -> list[tuple[float, float]]:
        """(where on the axes' width, inches to the right of it) of what may pass its edge:
        the last x tick label, centred on its tick, and each text in the axes (all of this
        module's are left-aligned at a data x, annotations offset in points)."""
        lo, hi = ax.get_xlim()
        out: list[tuple[float, float]] = []
        ticks = xticks[ax]
        if ticks.labels:
            out.append(((ticks.at[-1] - lo) / (hi - lo), size(ticks.labels[-1], TICK_PT)[0] / 2))
        for t in ax.texts:
            x, dx = (
                (t.xy[0], t.xyann[0] / 72)
                if isinstance(t, Annotation)
                else (t.get_position()[0], 0.0)
            )
            out.append(((x - lo) / (hi - lo), dx + size(t.get_text(), points(t))[0]))
        return out

    lefts = [max(left_of(ax) for ax in col) for col in cols]
    left = _PAD_IN + lefts[0]
    gap = max((_PAD_IN + w for w in lefts[1:]), default=0.0)
    n = len(cols)

    def right_for(width: float) -> float:
        # The last column spans [W - R - A, W - R] with A = (W - L - R - (n-1)·gap)/n; a
        # text at fraction f of it reaching e inches further ends at most _PAD_IN from the
        # edge when R ≥ (_PAD_IN + e - (1-f)·K/n) / (1 - (1-f)/n), K = W - L - (n-1)·gap.
        k = width - left - (n - 1) * gap
        right = _PAD_IN
        for f, e in (r for ax in cols[-1] for r in reaches(ax)):
            if 0.0 < f <= 1.0:
                right = max(right, (_PAD_IN + e - (1 - f) * k / n) / (1 - (1 - f) / n))
        return right

    right = right_for(width)
    # A title may run on over the gap to the next column, or the margin, to _PAD_IN of it.
    titles = max(size(ax.get_title("left") or ax.get_title(), TITLE_PT)[0] for ax in axes)
    room = right if n == 1 else min(gap, right)
    wanted = max(MIN_AXES_WIDTH, titles - room + _PAD_IN)
    if (width - left - right - (n - 1) * gap) / n < wanted:
        width = left + right + (n - 1) * gap + n * wanted
        right = right_for(width)
        fig.set_size_inches(width, height)
    ax_width = (width - left - right - (n - 1) * gap) / n
    fig.subplots_adjust(left=left / width, right=1 - right / width, wspace=gap / ax_width)


def draw_rounds(ev: Evidence) -> Figure | None:
    return _draw_rounds(rounds_series(ev))


def _draw_rounds(panels: dict[PanelKey, list[RoundPoint]]) -> Figure | None:
    if not panels:
        return None
    fig = _figure(8.0, 0.6 + 2.0 * len(panels))
    axes = _grid(fig, len(panels), 1)
    for ax, ((gpu, mode), points) in zip(axes, panels.items(), strict=True):
        segments = config_segments(points)
        for i, (conc, seg) in enumerate(segments):
            if i:
                ax.axvline(seg[0].x - 0.5, color="#555555", lw=0.8, ls="--")
            ax.text(
                seg[0].x - 0.4,
                0.97,
                f"c={conc}",
                transform=ax.get_xaxis_transform(),
                fontsize=7,
                va="top",
                ha="left",
                color="#555555",
            )
            for side in ("base", "head"):
                xy = [
                    (p.x, p.throughput_qps)
                    for p in seg
                    if p.side == side and p.throughput_qps is not None
                ]
                if xy:
                    ax.plot(
                        [x for x, _ in xy],
                        [y for _, y in xy],
                        "o-",
                        color=SIDE_COLOURS[side],
                        lw=0.7,
                        ms=4,
                    )
        ax.set_xlim(points[0].x - 0.6, points[-1].x + 0.6)
        ax.margins(y=0.15)
        failed = [p for p in points if p.failed or p.throughput_qps is None]
        for p in failed:
            ax.plot(
                [p.x],
                [0.03],
                "x",
                color=SIDE_COLOURS[p.side],
                ms=7,
                mew=1.5,
                transform=ax.get_xaxis_transform(),
                clip_on=False,
            )
        ax.set_title(f"{gpu} {mode}", fontsize=TITLE_PT, loc="left", parse_math=False)
        ax.set_ylabel("req/s", fontsize=LABEL_PT)
        ax.tick_params(labelsize=TICK_PT)
        ax.grid(True, axis="y", alpha=0.3)
        if not any(p.throughput_qps is not None for p in points):
            ax.set_yticks([])
    axes[-1].set_xlabel("run, in execution order", fontsize=LABEL_PT)
    handles = [
        Line2D([], [], marker="o", color=SIDE_COLOURS["base"], lw=0.7, ms=4, label="base"),
        Line2D([], [], marker="o", color=SIDE_COLOURS["head"], lw=0.7, ms=4, label="head"),
        Line2D([], [], marker="x", color="#555555", lw=0, ms=6, label="failed / skipped run"),
    ]
    fig.legend(handles=handles, loc="outside upper right", ncols=3, fontsize=7, frameon=False)
    _fit(fig, axes)
    return fig


def _draw_distributions(panels: list[DistPanel], xlabel: str) -> Figure | None:
    if not panels:
        return None
    ncols = min(2, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = _figure(4.0 * ncols, 0.4 + 2.6 * nrows)
    axes = _grid(fig, len(panels), ncols)
    for ax, panel in zip(axes, panels, strict=True):
        side_data: dict[Side, FloatArray] = {"base": panel.base, "head": panel.head}
        for side, vals in side_data.items():
            x, y = ecdf(vals)
            if x.size == 0:
                continue
            med = float(np.median(vals))
            ax.plot(
                x,
                y,
                drawstyle="steps-post",
                color=SIDE_COLOURS[side],
                lw=1.2,
                label=f"{side} (n={vals.size}, p50 {med:.3g} s)",
            )
        ax.set_title(
            f"{panel.gpu} {panel.mode} c={panel.concurrency}",
            fontsize=TITLE_PT,
            loc="left",
            parse_math=False,
        )
        ax.set_xlabel(xlabel, fontsize=LABEL_PT)
        ax.set_ylabel("fraction of requests", fontsize=LABEL_PT)
        ax.set_ylim(0, 1.02)
        ax.tick_params(labelsize=TICK_PT)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right", frameon=False)
    _fit(fig, axes, ncols)
    return fig


def draw_latency(sources: list[Source]) -> Figure | None:
    return _draw_distributions(distribution_panels(sources, "latency_s"), "latency (s)")


def draw_ttfa(sources: list[Source]) -> Figure | None:
    panels = distribution_panels(sources, "audio_ttfp_s", streaming_only=True)
    return _draw_distributions(panels, "time to first audio (s)")


def draw_deltas(ev: Evidence) -> Figure | None:
    return _draw_deltas((delta_rows(ev), ev.threshold_pct))


def _draw_deltas(data: tuple[list[DeltaPoint], float]) -> Figure | None:
    rows, thr = data
    if not rows:
        return None
    n = len(rows)
    fig = _figure(8.0, 1.1 + 0.26 * n)
    ax = fig.add_subplot()
    if thr > 0:
        ax.axvspan(-thr, thr, color="#cccccc", alpha=0.5, lw=0)
    ax.axvline(0.0, color="black", lw=0.8)
    for i, r in enumerate(rows):
        y = n - 1 - i
        colour = VERDICT_COLOURS[r.verdict]
        lo, hi = r.ci_low_pct, r.ci_high_pct
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [y, y], color=colour, lw=2, solid_capstyle="butt")
            ax.plot([r.delta_pct], [y], "o", color=colour, ms=6)
        else:
            ax.plot([r.delta_pct], [y], "o", mfc="white", mec=colour, mew=1.5, ms=6)
        if r.guard_failed:
            ax.plot([r.delta_pct], [y], "s", mfc="none", mec="black", ms=10, mew=1)
    ax.set_yticks(range(n))
    ax.set_yticklabels(
        [r.label + ("" if r.primary else " (guard)") for r in reversed(rows)],
        fontsize=TICK_PT,
        parse_math=False,
    )
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("head vs base, % (95% interval)", fontsize=LABEL_PT)
    ax.tick_params(axis="x", labelsize=TICK_PT)
    ax.grid(True, axis="x", alpha=0.3)
    handles = [
        Line2D([], [], marker="o", color=c, lw=2, ms=5, label=v) for v, c in VERDICT_COLOURS.items()
    ]
    handles.append(
        Line2D([], [], marker="o", mfc="white", mec="#555555", lw=0, ms=5, label="no interval")
    )
    if thr > 0:
        handles.append(Line2D([], [], color="#cccccc", lw=6, label=f"±{thr:g}% threshold"))
    fig.legend(
        handles=handles, loc="outside upper center", ncols=len(handles), fontsize=7, frameon=False
    )
    _fit(fig, [ax])
    return fig


def draw_trajectory(candidate: Candidate | None) -> Figure | None:
    return _draw_trajectory(_trajectory_data(candidate))


def _trajectory_data(candidate: Candidate | None) -> tuple[list[TrajPoint], str | None]:
    """The search's points and its run id (the plot's title)."""
    harness = candidate.harness if candidate is not None else None
    return trajectory_points(harness), harness.run_id if harness is not None else None


def _draw_trajectory(data: tuple[list[TrajPoint], str | None]) -> Figure | None:
    points, run_id = data
    if not any(p.reward is not None or not p.passed for p in points):
        return None  # nothing scored and nothing rejected: no trajectory to show
    fig = _figure(8.0, 3.2)
    ax = fig.add_subplot()
    hours, best = best_so_far(points)
    if hours.size:
        end = max(p.hour for p in points)
        ax.step(
            np.append(hours, end),
            np.append(best, best[-1]),
            where="post",
            color="#1f77b4",
            lw=1.5,
            label="best so far",
        )
    passed = [(p.hour, p.reward) for p in points if p.passed and p.reward is not None]
    if passed:
        ax.plot(
            [h for h, _ in passed],
            [r for _, r in passed],
            "o",
            color="#1f77b4",
            ms=4,
            alpha=0.6,
            label="passed",
        )
    rejected = [p for p in points if not p.passed]
    if rejected:
        with_reward = [(p.hour, p.reward) for p in rejected if p.reward is not None]
        if with_reward:
            ax.plot(
                [h for h, _ in with_reward],
                [r for _, r in with_reward],
                "x",
                color=REJECT_COLOUR,
                ms=8,
                mew=2,
                label="rejected",
            )
        without = [p for p in rejected if p.reward is None]
        if without:
            ax.plot(
                [p.hour for p in without],
                [0.04] * len(without),
                "x",
                color=REJECT_COLOUR,
                ms=8,
                mew=2,
                transform=ax.get_xaxis_transform(),
                clip_on=False,
                label="rejected (no score)" if not with_reward else None,
            )
        for p in rejected[:MAX_ANNOTATED_REJECTS]:
            text = ", ".join(p.reasons) or "rejected"
            if p.name:
                text = f"{p.name}: {text}"
            if p.reward is not None:
                ax.annotate(
                    text,
                    (p.hour, p.reward),
                    xytext=(4, 4),
                    textcoords="offset points",
                    fontsize=7,
                    color=REJECT_COLOUR,
                    parse_math=False,
                )
            else:
                ax.annotate(
                    text,
                    (p.hour, 0.04),
                    xycoords=ax.get_xaxis_transform(),
                    xytext=(4, 4),
                    textcoords="offset points",
                    fontsize=7,
                    color=REJECT_COLOUR,
                    parse_math=False,
                )
    title = "harness search"
    if run_id:
        title += f" {run_id}"
    ax.set_title(title, fontsize=TITLE_PT, loc="left", parse_math=False)
    ax.set_xlabel("hours since the search began", fontsize=LABEL_PT)
    ax.set_ylabel("reward", fontsize=LABEL_PT)
    ax.tick_params(labelsize=TICK_PT)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right", frameon=False)
    _fit(fig, [ax])
    return fig


# --------------------------------------------------------------------------- output


def plot_url(public_url: str | None, name: str) -> str | None:
    return f"{public_url.rstrip('/')}/plots/{name}.png" if public_url else None


def _png(fig: Figure) -> bytes:
    """The figure as a 256-colour palette PNG.

    A plot has few colours besides the anti-aliasing shades, so a palette (without
    dithering) looks the same and is about a third of the size of Agg's RGBA file.
    """
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # type: ignore[no-untyped-call]  # savefig draws twice with a layout engine
    width, height = canvas.get_width_height(physical=True)
    rgba = canvas.buffer_rgba()  # type: ignore[no-untyped-call]
    img = Image.frombuffer("RGBA", (width, height), rgba, "raw", "RGBA", 0, 1)
    pal = img.convert("RGB").quantize(
        colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE
    )
    fig.clear()
    out = io.BytesIO()
    pal.save(out, format="PNG")
    return out.getvalue()


def _save(fig: Figure, out_dir: Path, name: str) -> None:
    """Write `plots/<name>.png`."""
    _write(_png(fig), out_dir, name)


def _write(png: bytes, out_dir: Path, name: str) -> None:
    folder = out_dir / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.png").write_bytes(png)


def _feed(h: Any, value: object) -> None:
    """Feed `value` to the hash `h`, unambiguously: every part tagged with its type and,
    where it has parts, their number. Floats by `repr`, which is exact."""
    if isinstance(value, np.ndarray):
        h.update(f"a{value.dtype.str}{value.shape}:".encode())
        h.update(np.ascontiguousarray(value))  # its buffer, not a copy
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        h.update(f"d{type(value).__name__}{len(fields)}:".encode())
        for f in fields:
            _feed(h, getattr(value, f.name))
    elif isinstance(value, dict):
        h.update(f"m{len(value)}:".encode())
        for k, v in value.items():
            _feed(h, k)
            _feed(h, v)
    elif isinstance(value, list | tuple):
        h.update(f"l{len(value)}:".encode())
        for v in value:
            _feed(h, v)
    elif value is None or isinstance(value, bool | int | float | str):
        text = repr(value)
        h.update(f"s{type(value).__name__}{len(text)}:{text}".encode())
    else:
        raise TypeError(f"no digest for {type(value).__name__}")


def _style() -> str:
    """What drawing reads besides its data: matplotlib's version and settings (a style an
    embedding sets) and this module's colours and sizes."""
    constants: list[object] = [DPI, CONSTRAINED_LAYOUT, SIDE_COLOURS, VERDICT_COLOURS]
    constants += [REJECT_COLOUR, TITLE_PT, LABEL_PT, TICK_PT, MIN_AXES_WIDTH]
    constants += [MAX_ANNOTATED_REJECTS, MAX_ECDF_POINTS]
    constants += [_TICK_IN, _LABELPAD_IN, _TITLEPAD_IN, _PAD_IN]
    settings = sorted((k, repr(v)) for k, v in matplotlib.rcParams.items())
    return repr((matplotlib.__version__, constants, settings))


def _digest(name: str, data: object, style: str = "") -> bytes:
    h = hashlib.blake2b(digest_size=32)
    _feed(h, (name, style or _style(), data))
    return h.digest()


class _Drawn:
    """The plots this process drew last, by what they show: at most `max_bytes` of PNG.

    A plot is a pure function of the data it is drawn from, and drawing is most of what
    building the evidence costs. The same runs are drawn again whenever their evidence is
    built again (a publish retried after GitHub failed, the check run written again, a
    second look at the same bundles) and, above all, in the App's tests, which publish
    the same few bundles hundreds of times. The key is a digest of everything a drawing
    reads, so a hit is the PNG that drawing would have written, byte for byte.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._pngs: OrderedDict[bytes, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes) -> bytes | None:
        with self._lock:
            png = self._pngs.get(key)
            if png is None:
                self.misses += 1
                return None
            self._pngs.move_to_end(key)
            self.hits += 1
            return png

    def put(self, key: bytes, png: bytes) -> None:
        with self._lock:
            if key in self._pngs or len(png) > self.max_bytes:
                return
            self._pngs[key] = png
            self._size += len(png)
            while self._size > self.max_bytes:
                _, old = self._pngs.popitem(last=False)
                self._size -= len(old)

    def clear(self) -> None:
        with self._lock:
            self._pngs.clear()
            self._size = 0
            self.hits = self.misses = 0


DRAWN = _Drawn(max_bytes=16 * 1024 * 1024)


def make_plots(
    ev: Evidence,
    sources: list[Source],
    candidate: Candidate | None,
    out_dir: Path,
    public_url: str | None,
) -> list[Plot]:
    """Write the plots that have data into `out_dir/plots` and describe them."""
    # The data of each plot is prepared only when its turn comes: a large bundle's latency
    # and TTFA values are not held at once.
    specs: list[tuple[str, str, Callable[[], object], Callable[[Any], Figure | None]]] = [
        (
            "rounds",
            "Throughput per round, in execution order",
            lambda: rounds_series(ev),
            _draw_rounds,
        ),
        (
            "latency",
            "Latency distribution, base vs head",
            lambda: distribution_panels(sources, "latency_s"),
            functools.partial(_draw_distributions, xlabel="latency (s)"),
        ),
        (
            "ttfa",
            "Time to first audio, base vs head (streaming)",
            lambda: distribution_panels(sources, "audio_ttfp_s", streaming_only=True),
            functools.partial(_draw_distributions, xlabel="time to first audio (s)"),
        ),
        (
            "deltas",
            "Change per configuration with 95% intervals",
            lambda: (delta_rows(ev), ev.threshold_pct),
            _draw_deltas,
        ),
        (
            "trajectory",
            "How the candidate was found: harness search",
            lambda: _trajectory_data(candidate),
            _draw_trajectory,
        ),
    ]
    plots: list[Plot] = []
    style = _style()
    for name, title, prepare, draw in specs:
        data = prepare()
        key = _digest(name, data, style)
        png = DRAWN.get(key)
        if png is None:
            fig = draw(data)
            if fig is not None:
                png = _png(fig)
                DRAWN.put(key, png)
        del data
        if png is None:
            # An earlier build's plot in a reused DIR would read as this study's.
            (out_dir / "plots" / f"{name}.png").unlink(missing_ok=True)
            continue
        _write(png, out_dir, name)
        plots.append(
            Plot(name=name, title=title, path=f"plots/{name}.png", url=plot_url(public_url, name))
        )
    return plots
