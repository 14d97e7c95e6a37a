"""The bundle recorded on a real H200 by the runner (tests/fixtures/h200-reference)."""

from __future__ import annotations

from pathlib import Path

from evidence.build import Inputs, build

BUNDLE = Path(__file__).parent / "fixtures" / "h200-reference" / "rsi-bundle-v-h200ref-h200.zip"


def test_real_h200_bundle_shows_the_cuda_graph_gain_with_intervals() -> None:
    ev, sources = build(Inputs(bundles=[BUNDLE]))
    m = sources[0].manifest
    assert m.complete
    assert len(m.runs) == 20
    assert all(r.status == "ok" for r in m.runs)
    assert ev.gpus["H200"].fingerprint["base"]["gpu_name"] == "NVIDIA H200"
    assert ev.verdict == "improved"
    assert not [f for f in ev.audit if f.severity == "error"]
    for mode in ("streaming", "non-streaming"):
        row = next(r for r in ev.study if r.metric == "throughput_qps" and r.mode == mode)
        assert row.verdict == "improved"
        assert row.ci_low_pct is not None
        assert row.ci_low_pct > 40  # CUDA graphs roughly double throughput here
    startup = ev.gpus["H200"].startup_s
    assert startup["base"] is not None
    assert 1 < startup["base"] < 60
    vram = ev.gpus["H200"].peak_vram_mib
    assert vram["head"] is not None
    assert vram["head"] > 1000
    # The audit notices what this batching server really does: under load some streamed
    # requests get their first chunk only at the end, and graph rounds vary a lot.
    codes = {f.code for f in ev.audit}
    assert {"first-chunk-at-end", "noisy-rounds"} <= codes


AA_GRAPH = BUNDLE.parent / "rsi-bundle-v-autoaag-h200.zip"


def test_real_h200_a_a_with_adaptive_rounds_is_no_change_within_the_threshold() -> None:
    """The same CUDA-graph server on both sides, `--rounds auto`: the runner stopped when
    the interval fit inside ±3%, and the engine, judging the bundle on its own, agrees."""
    ev, sources = build(Inputs(bundles=[AA_GRAPH]))
    m = sources[0].manifest
    assert m.complete
    assert ev.verdict == "no-change"
    assert not [f for f in ev.audit if f.severity == "error"]
    row = next(r for r in ev.study if r.metric == "throughput_qps")
    assert row.verdict == "no-change"
    assert row.ci_low_pct is not None
    assert row.ci_high_pct is not None
    assert -3 < row.ci_low_pct < 0 < row.ci_high_pct < 3
    ok = [r for r in m.runs if r.status == "ok"]
    assert len(ok) == 16  # 8 rounds a side, then decided


AUTO_GRAPH = BUNDLE.parent / "rsi-bundle-v-autograph-h200.zip"


def test_real_h200_eager_to_graph_with_adaptive_rounds_decides_in_two_rounds() -> None:
    """eager → CUDA graph, `--rounds auto`: improved after 2 rounds a side; one base run
    whose four warm-up passes kept climbing (30.7 → 57.2 requests/s) is named."""
    ev, sources = build(Inputs(bundles=[AUTO_GRAPH]))
    m = sources[0].manifest
    assert ev.verdict == "improved"
    assert len([r for r in m.runs if r.status == "ok"]) == 4
    (warm,) = [f for f in ev.audit if f.code == "warm-up-unsteady"]
    assert warm.severity == "warning"
    assert warm.runs == ["r2-base-stream-c16"]
    assert "30.7 → 49.1 → 52.5 → 57.2" in warm.message


def test_a_steady_warm_up_is_not_a_finding() -> None:
    """In the CUDA-graph A/A every warm-up settled but one, whose third pass dropped to
    15 requests/s; only that run is named."""
    ev, _ = build(Inputs(bundles=[AA_GRAPH]))
    (warm,) = [f for f in ev.audit if f.code == "warm-up-unsteady"]
    assert warm.runs == ["r7-head-stream-c16"]


def test_a_hostile_warm_up_record_is_shown_safely_not_a_crash(tmp_path: Path) -> None:
    """`server.json` is bundle content: a warm-up record with integers too large for a
    float, strings and markup is named by its runs, never shown raw, never a crash."""
    import json
    import zipfile

    member = "runs/r2-base-stream-c16/server.json"
    hostile = tmp_path / "hostile.zip"
    with zipfile.ZipFile(AUTO_GRAPH) as src, zipfile.ZipFile(hostile, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == member:
                doc = json.loads(data)
                doc["warmup"] = {
                    "steady": False,
                    "steady_pct": "<img src=x> @someone",
                    "rates": [10**400, "x", 30.5, -(10**400)],
                }
                data = json.dumps(doc).encode()
            dst.writestr(item, data)
    ev, _ = build(Inputs(bundles=[hostile]))
    (warm,) = [f for f in ev.audit if f.code == "warm-up-unsteady"]
    assert warm.runs == ["r2-base-stream-c16"]
    assert "30.5 requests/s" in warm.message
    assert "the task's margin" in warm.message
    assert "<img" not in warm.message
    assert "@someone" not in warm.message


AA_EAGER = BUNDLE.parent / "rsi-bundle-v-autoaa-h200.zip"


def test_real_h200_eager_a_a_that_ran_out_of_budget_is_inconclusive_and_names_the_host() -> None:
    """The eager A/A: the machine's own CPU changed speed (a fixed Python loop, 7.1–13.7 ms
    before each round), the rounds spread 13–16%, the budget ran out: *inconclusive*, never
    *no-change*, and the audit names the host rather than the code."""
    ev, sources = build(Inputs(bundles=[AA_EAGER]))
    m = sources[0].manifest
    assert not m.complete
    assert ev.verdict == "inconclusive"
    row = next(r for r in ev.study if r.metric == "throughput_qps")
    assert row.verdict == "inconclusive"
    assert row.ci_low_pct is not None
    assert row.ci_low_pct < -3
    (host,) = [f for f in ev.audit if f.code == "host-cpu-unsteady"]
    assert host.severity == "warning"
    assert host.numbers["cv_pct"] == 23.83
    assert "7.05–13.7 ms" in host.message
    assert "over 17 runs" in host.message
    assert len(host.runs) == 17
    failed = [r for r in m.runs if r.status == "failed"]
    assert [r.id for r in failed] == ["r9-head-stream-c16"]


def test_a_steady_host_is_not_a_finding() -> None:
    """The CUDA-graph A/A predates `host_cpu_ms`; no record, no finding."""
    ev, _ = build(Inputs(bundles=[AA_GRAPH]))
    assert not [f for f in ev.audit if f.code == "host-cpu-unsteady"]
