"""Plots: the files, their names and URLs, and the data each one is drawn from."""

from __future__ import annotations

import dataclasses
import io
import itertools
from pathlib import Path

import matplotlib
import numpy as np
import orjson
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from evidence import plots as plotting
from evidence.build import Inputs, build
from evidence.load import Source, load
from evidence.model import (
    Candidate,
    Evidence,
    EvolveState,
    Harness,
    HeadRef,
    RoundValue,
    TrajectoryPoint,
)
from evidence.plots import (
    best_so_far,
    config_segments,
    delta_rows,
    distribution_panels,
    draw_deltas,
    draw_latency,
    draw_rounds,
    draw_trajectory,
    ecdf,
    make_plots,
    rounds_series,
    trajectory_points,
)
from evidence.synth import BASE_SHA, HEAD_SHA, SynthSpec, schedule, write_bundle

FIXTURES = Path(__file__).parent / "fixtures" / "real"
EVOLVE_STATE = FIXTURES / "ace-playbook-repair.evolve_state.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PUBLIC_URL = "https://rsi.example/e/v-demo01/"

Study = tuple[Evidence, list[Source]]


def _renders(fig: Figure | None) -> bool:
    """Draw the figure for real (a bad artist fails only when drawn)."""
    assert fig is not None
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue().startswith(PNG_MAGIC)


def _study(root: Path, spec: SynthSpec) -> Study:
    path = write_bundle(root / "b", spec)
    return build(Inputs(bundles=[path]))


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Study:
    spec = SynthSpec(speedup=0.1, rounds=3, requests=40, concurrencies=(4,))
    return _study(tmp_path_factory.mktemp("study"), spec)


@pytest.fixture(scope="module")
def evolve_state() -> EvolveState:
    return EvolveState.model_validate(orjson.loads(EVOLVE_STATE.read_bytes()))


def _candidate(trajectory: list[TrajectoryPoint] | EvolveState) -> Candidate:
    return Candidate(
        candidate_id="cosyvoice3-idle-threads-r14",
        task="cosyvoice3",
        repo="sgl-project/sglang-omni",
        base_sha=BASE_SHA,
        head=HeadRef(repo="openrsi-bot/sglang-omni", ref="rsi/x", sha=HEAD_SHA),
        title="CosyVoice3: idle encoder threads sleep instead of spinning",
        harness=Harness(run_id="run-1", trajectory=trajectory),
    )


ARTICLE = [
    TrajectoryPoint(hour=0.4, reward=1.2),
    TrajectoryPoint(hour=1.589, reward=1.399, passed=False, failed_guards=["CosyVoice3 WER"]),
    TrajectoryPoint(hour=2.5, reward=1.1),
    TrajectoryPoint(hour=3.0, reward=1.5389),
]


# ------------------------------------------------------------------------- the files


def test_make_plots_writes_every_plot_as_png(
    study: Study, evolve_state: EvolveState, tmp_path: Path
) -> None:
    ev, sources = study
    plots = make_plots(ev, sources, _candidate(evolve_state), tmp_path, PUBLIC_URL)
    assert [p.name for p in plots] == ["rounds", "latency", "ttfa", "deltas", "trajectory"]
    for p in plots:
        assert p.path == f"plots/{p.name}.png"
        assert p.url == f"https://rsi.example/e/v-demo01/plots/{p.name}.png"
        assert p.title
        data = (tmp_path / p.path).read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) < 150_000
    assert sorted(f.name for f in (tmp_path / "plots").iterdir()) == sorted(
        f"{p.name}.png" for p in plots
    )


def test_without_public_url_or_candidate(study: Study, tmp_path: Path) -> None:
    ev, sources = study
    plots = make_plots(ev, sources, None, tmp_path, None)
    assert [p.name for p in plots] == ["rounds", "latency", "ttfa", "deltas"]
    assert all(p.url is None for p in plots)


def test_non_streaming_only_study_has_no_ttfa(tmp_path: Path) -> None:
    spec = SynthSpec(rounds=3, requests=40, concurrencies=(4,), modes=("non-streaming",))
    ev, sources = _study(tmp_path, spec)
    assert distribution_panels(sources, "audio_ttfp_s", streaming_only=True) == []
    names = [p.name for p in make_plots(ev, sources, None, tmp_path / "out", None)]
    assert names == ["rounds", "latency", "deltas"]
    assert not (tmp_path / "out" / "plots" / "ttfa.png").exists()


def test_nothing_to_draw_writes_nothing(study: Study, tmp_path: Path) -> None:
    ev, _ = study
    empty = ev.model_copy(update={"rounds": [], "study": []})
    assert make_plots(empty, [], None, tmp_path, PUBLIC_URL) == []


def test_per_run_only_source_has_no_distributions(study: Study, tmp_path: Path) -> None:
    ev, _ = study
    per_run = load(FIXTURES / "pr1445-h100-ab.results-summary.json")
    assert distribution_panels([per_run], "latency_s") == []
    names = [p.name for p in make_plots(ev, [per_run], None, tmp_path, None)]
    assert names == ["rounds", "deltas"]


# ------------------------------------------------------------- plots drawn once


def _written(folder: Path) -> dict[str, bytes]:
    return {f.stem: f.read_bytes() for f in sorted((folder / "plots").iterdir())}


def test_the_same_data_is_written_again_byte_for_byte_without_drawing(
    study: Study, evolve_state: EvolveState, tmp_path: Path
) -> None:
    ev, sources = study
    cand = _candidate(evolve_state)
    plotting.DRAWN.clear()
    make_plots(ev, sources, cand, tmp_path / "first", PUBLIC_URL)
    assert (plotting.DRAWN.hits, plotting.DRAWN.misses) == (0, 5)
    make_plots(ev, sources, cand, tmp_path / "again", PUBLIC_URL)
    assert (plotting.DRAWN.hits, plotting.DRAWN.misses) == (5, 5)
    plotting.DRAWN.clear()  # and what a fresh drawing writes is what the cache wrote
    make_plots(ev, sources, cand, tmp_path / "fresh", PUBLIC_URL)
    assert plotting.DRAWN.misses == 5
    first, again = _written(tmp_path / "first"), _written(tmp_path / "again")
    assert len(first) == 5
    assert first == again == _written(tmp_path / "fresh")


def test_any_drawn_value_changed_draws_that_plot_again(study: Study, tmp_path: Path) -> None:
    ev, sources = study
    cand = _candidate(ARTICLE)
    plotting.DRAWN.clear()
    make_plots(ev, sources, cand, tmp_path / "before", None)
    before = _written(tmp_path / "before")
    r0 = ev.rounds[0]
    assert r0.throughput_qps is not None

    def rounds(factor: float) -> Evidence:
        qps = r0.model_copy(update={"throughput_qps": r0.throughput_qps * factor})
        return ev.model_copy(update={"rounds": [qps, *ev.rounds[1:]]})

    changed = {
        "rounds": (rounds(1.5), sources, cand),
        "deltas": (ev.model_copy(update={"threshold_pct": ev.threshold_pct + 1}), sources, cand),
        "trajectory": (
            ev,
            sources,
            cand.model_copy(update={"harness": Harness(run_id="run-2", trajectory=ARTICLE)}),
        ),
        "latency": (ev, [_nudged(sources[0], "latency_s"), *sources[1:]], cand),
        "ttfa": (ev, [_nudged(sources[0], "audio_ttfp_s"), *sources[1:]], cand),
    }
    for name, (e, srcs, c) in changed.items():
        misses = plotting.DRAWN.misses
        make_plots(e, srcs, c, tmp_path / name, None)
        assert plotting.DRAWN.misses == misses + 1, name  # that plot, and only that one
        after = _written(tmp_path / name)
        assert {k for k in after if after[k] != before[k]} == {name}
    # A change too small to see is still a change: drawn, not taken from the cache.
    misses = plotting.DRAWN.misses
    make_plots(rounds(1 + 1e-12), sources, cand, tmp_path / "tiny", None)
    assert plotting.DRAWN.misses == misses + 1


def _nudged(src: Source, column: str) -> Source:
    """`src` with the first successful request's `column` of its first run a hair longer."""
    runs = list(src.runs)
    for i, lr in enumerate(runs):
        rec = lr.records
        if rec is None or lr.run.status != "ok" or column not in rec.cols:
            continue
        if lr.run.mode != "streaming" or not rec.success.any():
            continue
        col = rec.cols[column].copy()
        first = int(np.flatnonzero(rec.success)[0])
        col[first] *= 1.5
        cols = {**rec.cols, column: col}
        runs[i] = dataclasses.replace(lr, records=dataclasses.replace(rec, cols=cols))
        return dataclasses.replace(src, runs=runs)
    raise AssertionError(f"no run with {column}")


def test_the_drawn_plots_are_bounded_by_size_oldest_first() -> None:
    drawn = plotting._Drawn(max_bytes=10)
    drawn.put(b"a", b"1234")
    drawn.put(b"b", b"1234")
    assert drawn.get(b"a") == b"1234"  # a is now the most recently used
    drawn.put(b"c", b"1234")
    assert drawn.get(b"b") is None
    assert drawn.get(b"a") == drawn.get(b"c") == b"1234"
    drawn.put(b"huge", b"x" * 11)  # larger than the bound: never kept
    assert drawn.get(b"huge") is None


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ([1, 2], [[1], 2]),
        ("1", 1),
        (0.0, -0.0),
        (1, True),
        ({"a": 1}, [("a", 1)]),
        (("ab", "c"), ("a", "bc")),
    ],
)
def test_the_key_tells_apart_what_draws_differently(one: object, other: object) -> None:
    assert plotting._digest("p", one) != plotting._digest("p", other)
    assert plotting._digest("p", one) == plotting._digest("p", one)
    with pytest.raises(TypeError):
        plotting._digest("p", object())


def test_the_key_tells_apart_arrays_by_shape_and_type() -> None:
    flat, column = np.array([1.0, 2.0]), np.array([[1.0], [2.0]])
    assert plotting._digest("p", flat) != plotting._digest("p", column)
    wide, narrow = np.array([1, 2], dtype=np.int64), np.array([1, 2], dtype=np.int32)
    assert plotting._digest("p", wide) != plotting._digest("p", narrow)
    assert plotting._digest("p", flat) == plotting._digest("p", flat.copy())


def _apart(fig: Figure | None) -> Figure:
    """Drawn, each panel with its texts and each figure legend lie inside the figure and
    clear of one another."""
    assert fig is not None
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # type: ignore[no-untyped-call]
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_visible()]
    boxes += [legend.get_window_extent(renderer) for legend in fig.legends]
    page = fig.bbox
    for b in boxes:
        assert page.x0 <= b.x0 <= b.x1 <= page.x1, (b, page)
        assert page.y0 <= b.y0 <= b.y1 <= page.y1, (b, page)
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)
    return fig


def test_layout_keeps_long_texts_inside_and_apart(study: Study) -> None:
    ev, sources = study
    late = RoundValue(
        gpu="H200",
        mode="streaming",
        concurrency=128,  # its `c=128` label starts at the right edge
        side="head",
        round=4,
        order=99,
        run_id="r4-head-stream-c128",
        throughput_qps=None,
        status="failed",
    )
    _apart(draw_rounds(ev.model_copy(update={"rounds": [*ev.rounds, late]})))
    other = [dataclasses.replace(s, gpu="AMD Instinct MI300X OAM") for s in sources]
    _apart(draw_latency([*sources, *other]))  # 2 × 2 panels
    long_rows = [
        r.model_copy(
            update={
                "gpu": "NVIDIA H200 SXM5 141GB HBM3e",
                "label": f"{r.label} of the long-form multilingual prompt set",
            }
        )
        for r in ev.study
    ]
    wide = _apart(draw_deltas(ev.model_copy(update={"study": long_rows})))
    assert wide.get_size_inches()[0] > 8.0  # widened rather than the axes squeezed
    reason = "output length shrank by more than the allowed 2% on every sample"
    last = TrajectoryPoint(hour=3.2, reward=1.6, passed=False, failed_guards=[reason])
    _apart(draw_trajectory(_candidate([*ARTICLE, last])))


# ------------------------------------------------------------------------- rounds


def test_rounds_series_in_execution_order(study: Study) -> None:
    ev, sources = study
    series = rounds_series(ev)
    assert list(series) == [("H200", "non-streaming"), ("H200", "streaming")]
    expected_sides = [side for side, _ in schedule(3, "balanced")]
    manifest_ids = [r.id for r in sources[0].manifest.runs]
    for (_, mode), points in series.items():
        xs = [p.x for p in points]
        assert xs == sorted(xs)
        assert [p.side for p in points] == expected_sides
        assert [p.run_id for p in points] == [
            i for i in manifest_ids if ("-stream-" in i) == (mode == "streaming")
        ]
        assert all(p.throughput_qps is not None and p.throughput_qps > 0 for p in points)
        assert not any(p.failed for p in points)


def test_failed_runs_stay_in_the_series(study: Study) -> None:
    ev, _ = study
    failed = RoundValue(
        gpu="H200",
        mode="streaming",
        concurrency=8,
        side="head",
        round=4,
        order=99,
        run_id="r4-head-stream-c8",
        throughput_qps=None,
        status="failed",
    )
    ev2 = ev.model_copy(update={"rounds": [*ev.rounds, failed]})
    points = rounds_series(ev2)[("H200", "streaming")]
    assert points[-1].run_id == "r4-head-stream-c8"
    assert points[-1].failed
    assert [c for c, _ in config_segments(points)] == [4, 8]
    assert _renders(draw_rounds(ev2))


# ------------------------------------------------------------------------- distributions


def test_distribution_panels_pool_rounds_at_highest_concurrency(study: Study) -> None:
    _, sources = study
    panels = distribution_panels(sources, "latency_s")
    assert [(p.gpu, p.mode, p.concurrency) for p in panels] == [
        ("H200", "non-streaming", 4),
        ("H200", "streaming", 4),
    ]
    for p in panels:  # 3 rounds a side, 40 successful requests each
        assert p.base.size == 120
        assert p.head.size == 120
    ttfa = distribution_panels(sources, "audio_ttfp_s", streaming_only=True)
    assert [p.mode for p in ttfa] == ["streaming"]
    assert np.isfinite(ttfa[0].base).all()


def test_ecdf_caps_the_point_count() -> None:
    values = np.random.default_rng(1).lognormal(0.0, 0.3, 100_000)
    values[::1000] = np.nan
    x, f = ecdf(values, max_points=1_000)
    assert x.size == f.size == 1_000
    finite = values[np.isfinite(values)]
    assert x[0] == finite.min()
    assert x[-1] == finite.max()
    assert np.all(np.diff(x) >= 0)
    assert np.allclose(x, np.quantile(finite, f))  # the same quantiles as numpy's


def test_ecdf_of_small_and_empty_samples() -> None:
    x, f = ecdf(np.array([3.0, 1.0, np.nan, 2.0]))
    assert x.tolist() == [1.0, 2.0, 3.0]
    assert f.tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    x, f = ecdf(np.array([], dtype=np.float64))
    assert x.size == f.size == 0


# ------------------------------------------------------------------------- deltas


def test_delta_rows_are_primary_and_guarded_rows(study: Study) -> None:
    ev, _ = study
    rows = delta_rows(ev)
    wanted = [r for r in ev.study if (r.primary or r.guard) and r.delta_pct is not None]
    assert len(rows) == len(wanted) > 0
    labels = [r.label for r in rows]
    assert "H200 streaming c=4 throughput" in labels
    assert "H200 streaming c=4 time to first audio p95" in labels
    assert all(r.has_interval for r in rows)
    # A row without an interval is kept (drawn hollow), not dropped.
    study_rows = [r.model_copy(update={"ci_low_pct": None, "ci_high_pct": None}) for r in ev.study]
    ev2 = ev.model_copy(update={"study": study_rows})
    assert not any(r.has_interval for r in delta_rows(ev2))
    assert _renders(draw_deltas(ev2))


# ------------------------------------------------------------------------- trajectory


def test_best_so_far_on_the_real_evolve_state(evolve_state: EvolveState) -> None:
    points = trajectory_points(Harness(trajectory=evolve_state))
    assert len(points) == len(evolve_state.submissions) == 30
    assert points[0].hour == 0.0
    assert all(a.hour <= b.hour for a, b in itertools.pairwise(points))
    hours, best = best_so_far(points)
    assert np.all(np.diff(best) >= 0)
    assert best[-1] == pytest.approx(0.73)
    assert best[0] == pytest.approx(0.565)
    assert hours.size == 29  # agent-2 has no score and is not a step
    rejected = [p for p in points if not p.passed]
    assert [(p.name, p.reasons) for p in rejected] == [("agent-2", ("verifier_error",))]
    assert rejected[0].reward is None


def test_article_form_marks_the_failed_guard() -> None:
    points = trajectory_points(Harness(trajectory=ARTICLE))
    failed = [p for p in points if not p.passed]
    assert len(failed) == 1
    assert failed[0].hour == pytest.approx(1.589)
    assert failed[0].reasons == ("CosyVoice3 WER",)
    hours, best = best_so_far(points)
    # The rejected 1.399 is never the best so far.
    assert hours.tolist() == [0.4, 2.5, 3.0]
    assert best.tolist() == [1.2, 1.2, 1.5389]
    assert _renders(draw_trajectory(_candidate(ARTICLE)))


def test_no_trajectory_without_harness_data() -> None:
    assert trajectory_points(None) == []
    assert trajectory_points(Harness(trajectory=None)) == []
    assert trajectory_points(Harness(trajectory=[])) == []
    assert trajectory_points(Harness(trajectory=EvolveState(submissions=[]))) == []
    empty = best_so_far([])
    assert empty[0].size == empty[1].size == 0


def test_a_style_set_in_the_process_draws_again(study: Study, tmp_path: Path) -> None:
    """What a drawing reads besides its data (matplotlib's settings) is in the key: a hit
    is what drawing now would write."""
    ev, sources = study
    plotting.DRAWN.clear()
    make_plots(ev, sources, None, tmp_path / "before", None)
    with matplotlib.rc_context({"axes.facecolor": "#000000", "font.size": 20}):
        make_plots(ev, sources, None, tmp_path / "styled", None)
        assert plotting.DRAWN.hits == 0
        plotting.DRAWN.clear()
        make_plots(ev, sources, None, tmp_path / "fresh", None)
    styled, fresh = _written(tmp_path / "styled"), _written(tmp_path / "fresh")
    assert styled == fresh
    assert styled["rounds"] != _written(tmp_path / "before")["rounds"]


def test_dollar_signs_in_the_texts_are_drawn_as_they_are(study: Study, tmp_path: Path) -> None:
    """A harness run id, a guard's name, a search round's status: text from the bundle and
    candidate, never a formula for matplotlib to parse (`$\\nope$` failed the build)."""
    ev, sources = study
    trajectory = [
        TrajectoryPoint(hour=0.0, reward=1.0),
        TrajectoryPoint(hour=1.0, reward=2.0, passed=False, failed_guards=["cost $\\nope$"]),
        TrajectoryPoint(hour=2.0, passed=False, failed_guards=["$x^$"]),
    ]
    cand = _candidate(trajectory).model_copy(
        update={"harness": Harness(run_id="run $\\frac{", trajectory=trajectory)}
    )
    names = [p.name for p in make_plots(ev, sources, cand, tmp_path, None)]
    assert "trajectory" in names
