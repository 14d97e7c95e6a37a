"""The report's plots: rounds, latency and TTFA distributions, deltas, the search trajectory.

Each plot is drawn from data prepared by a small pure function (`rounds_series`,
`distribution_panels`, `ecdf`, `delta_rows`, `trajectory_points`, `best_so_far`), so tests
assert on that data rather than on pixels. Drawing uses matplotlib's object-oriented API on
the Agg backend (no pyplot, no global state); a plot without data is skipped, never drawn
empty.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
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


def draw_rounds(ev: Evidence) -> Figure | None:
    panels = rounds_series(ev)
    if not panels:
        return None
    fig = Figure(figsize=(8.0, 0.6 + 2.0 * len(panels)), dpi=DPI, layout="constrained")
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
        ax.set_title(f"{gpu} {mode}", fontsize=9, loc="left")
        ax.set_ylabel("req/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, axis="y", alpha=0.3)
        if not any(p.throughput_qps is not None for p in points):
            ax.set_yticks([])
    axes[-1].set_xlabel("run, in execution order", fontsize=8)
    handles = [
        Line2D([], [], marker="o", color=SIDE_COLOURS["base"], lw=0.7, ms=4, label="base"),
        Line2D([], [], marker="o", color=SIDE_COLOURS["head"], lw=0.7, ms=4, label="head"),
        Line2D([], [], marker="x", color="#555555", lw=0, ms=6, label="failed / skipped run"),
    ]
    fig.legend(handles=handles, loc="outside upper right", ncols=3, fontsize=7, frameon=False)
    return fig


def _draw_distributions(panels: list[DistPanel], xlabel: str) -> Figure | None:
    if not panels:
        return None
    ncols = min(2, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(4.0 * ncols, 0.4 + 2.6 * nrows), dpi=DPI, layout="constrained")
    for ax, panel in zip(_grid(fig, len(panels), ncols), panels, strict=True):
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
        ax.set_title(f"{panel.gpu} {panel.mode} c={panel.concurrency}", fontsize=9, loc="left")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel("fraction of requests", fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right", frameon=False)
    return fig


def draw_latency(sources: list[Source]) -> Figure | None:
    return _draw_distributions(distribution_panels(sources, "latency_s"), "latency (s)")


def draw_ttfa(sources: list[Source]) -> Figure | None:
    panels = distribution_panels(sources, "audio_ttfp_s", streaming_only=True)
    return _draw_distributions(panels, "time to first audio (s)")


def draw_deltas(ev: Evidence) -> Figure | None:
    rows = delta_rows(ev)
    if not rows:
        return None
    n = len(rows)
    fig = Figure(figsize=(8.0, 1.1 + 0.26 * n), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    thr = ev.threshold_pct
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
        [r.label + ("" if r.primary else " (guard)") for r in reversed(rows)], fontsize=7
    )
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("head vs base, % (95% interval)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
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
    return fig


def draw_trajectory(candidate: Candidate | None) -> Figure | None:
    harness = candidate.harness if candidate is not None else None
    points = trajectory_points(harness)
    if not any(p.reward is not None or not p.passed for p in points):
        return None  # nothing scored and nothing rejected: no trajectory to show
    fig = Figure(figsize=(8.0, 3.2), dpi=DPI, layout="constrained")
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
                )
    title = "harness search"
    if harness is not None and harness.run_id:
        title += f" {harness.run_id}"
    ax.set_title(title, fontsize=9, loc="left")
    ax.set_xlabel("hours since the search began", fontsize=8)
    ax.set_ylabel("reward", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right", frameon=False)
    return fig


# --------------------------------------------------------------------------- output


def plot_url(public_url: str | None, name: str) -> str | None:
    return f"{public_url.rstrip('/')}/plots/{name}.png" if public_url else None


def _save(fig: Figure, out_dir: Path, name: str) -> None:
    """Write `plots/<name>.png` as a 256-colour palette PNG.

    A plot has few colours besides the anti-aliasing shades, so a palette (without
    dithering) looks the same and is about a third of the size of Agg's RGBA file.
    """
    folder = out_dir / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # type: ignore[no-untyped-call]  # savefig draws twice with a layout engine
    width, height = canvas.get_width_height(physical=True)
    rgba = canvas.buffer_rgba()  # type: ignore[no-untyped-call]
    img = Image.frombuffer("RGBA", (width, height), rgba, "raw", "RGBA", 0, 1)
    pal = img.convert("RGB").quantize(
        colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE
    )
    fig.clear()
    pal.save(folder / f"{name}.png", format="PNG")


def make_plots(
    ev: Evidence,
    sources: list[Source],
    candidate: Candidate | None,
    out_dir: Path,
    public_url: str | None,
) -> list[Plot]:
    """Write the plots that have data into `out_dir/plots` and describe them."""
    specs: list[tuple[str, str, Callable[[], Figure | None]]] = [
        ("rounds", "Throughput per round, in execution order", lambda: draw_rounds(ev)),
        ("latency", "Latency distribution, base vs head", lambda: draw_latency(sources)),
        ("ttfa", "Time to first audio, base vs head (streaming)", lambda: draw_ttfa(sources)),
        ("deltas", "Change per configuration with 95% intervals", lambda: draw_deltas(ev)),
        (
            "trajectory",
            "How the candidate was found: harness search",
            lambda: draw_trajectory(candidate),
        ),
    ]
    plots: list[Plot] = []
    for name, title, draw in specs:
        fig = draw()
        if fig is None:
            # An earlier build's plot in a reused DIR would read as this study's.
            (out_dir / "plots" / f"{name}.png").unlink(missing_ok=True)
            continue
        _save(fig, out_dir, name)
        plots.append(
            Plot(name=name, title=title, path=f"plots/{name}.png", url=plot_url(public_url, name))
        )
    return plots
