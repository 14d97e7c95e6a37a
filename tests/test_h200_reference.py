"""The bundle recorded on a real H200 by the runner (tests/fixtures/h200-reference)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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


# ---------------------------------------------------------------- the measurement designs

DESIGNS = BUNDLE.parent


def _throughput(name: str) -> dict[str, Any]:
    ev, sources = build(Inputs(bundles=[DESIGNS / name]))
    rows = {r.mode: r for r in ev.study if r.metric == "throughput_qps"}
    return {"ev": ev, "rows": rows, "manifest": sources[0].manifest}


@pytest.mark.parametrize(
    "name", ["rsi-bundle-v-alt-aag-h200.zip", "rsi-bundle-v-alt-aag-swap-h200.zip"]
)
def test_alternate_a_a_on_the_h200_is_equivalent_within_a_percent_or_two(name: str) -> None:
    """Both CUDA-graph servers resident, bursts in pairs: each mode equivalent within ±3%
    in about a GPU minute for both modes (the sequential design took 2.8 for one)."""
    got = _throughput(name)
    assert got["ev"].verdict == "no-change"
    assert not [f for f in got["ev"].audit if f.severity == "error"]
    for row in got["rows"].values():
        assert (row.verdict, row.method) == ("no-change", "paired")
        assert row.ci_low_pct is not None
        assert row.ci_high_pct is not None
        assert -2.5 < row.ci_low_pct < row.ci_high_pct < 2.5
    assert got["manifest"].gpu_minutes is not None
    assert got["manifest"].gpu_minutes.total is not None
    assert got["manifest"].gpu_minutes.total < 1.5


def test_alternate_finds_a_planted_five_percent_both_ways_round() -> None:
    """graph+5 → graph is improved by about 5% in both modes; graph → graph+5 regressed."""
    up, down = (
        _throughput("rsi-bundle-v-alt-plant-h200.zip"),
        _throughput("rsi-bundle-v-alt-plant-swap-h200.zip"),
    )
    assert (up["ev"].verdict, down["ev"].verdict) == ("improved", "regressed")
    for mode in ("streaming", "non-streaming"):
        u, d = up["rows"][mode], down["rows"][mode]
        assert (u.verdict, d.verdict) == ("improved", "regressed")
        assert u.delta_pct is not None
        assert d.delta_pct is not None
        assert 3 < u.delta_pct < 8
        assert -8 < d.delta_pct < -3


def test_the_sequential_design_finds_the_planted_gain_too_at_twice_the_cost() -> None:
    got = _throughput("rsi-bundle-v-seq-plant-h200.zip")
    row = got["rows"]["streaming"]
    assert (row.verdict, row.method) == ("improved", "welch")
    m = got["manifest"]
    assert m.gpu_minutes is not None
    assert m.gpu_minutes.total is not None
    assert m.gpu_minutes.total > 1.0  # one mode; the alternate design spent ~0.5 a mode


def test_alternate_a_a_shows_no_side_bias_in_either_orientation() -> None:
    """The mean of the A/A rows over both orientations (head = the second or the first of
    two identical commits) stays within ±1%."""
    deltas = [
        r.delta_pct
        for name in (
            "rsi-bundle-v-alt-aag-h200.zip",
            "rsi-bundle-v-alt-aag-swap-h200.zip",
            "rsi-bundle-v-alt-aagctl-h200.zip",
        )
        for r in _throughput(name)["rows"].values()
    ]
    assert len(deltas) == 6
    assert all(d is not None for d in deltas)
    assert abs(sum(d for d in deltas if d is not None) / len(deltas)) < 1.0


def test_the_eager_a_a_stays_honestly_undecided_under_the_host_cpu() -> None:
    """The CPU-bound eager server, resident and paired: the host's speed moves within
    seconds, so 13 pairs still leave the interval tens of percent wide — inconclusive,
    and the evidence names the host."""
    got = _throughput("rsi-bundle-v-alt-aa-h200.zip")
    assert got["ev"].verdict not in ("improved", "regressed")
    row = got["rows"]["streaming"]
    assert row.verdict == "inconclusive"
    assert "host-cpu-unsteady" in {f.code for f in got["ev"].audit}


def _with_decisions(tmp_path: Path, name: str, decisions: dict[str, str]) -> Path:
    """A copy of a real bundle whose runner's sequential decisions say otherwise."""
    import json
    import zipfile

    out = tmp_path / name
    with zipfile.ZipFile(DESIGNS / name) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "manifest.json":
                m = json.loads(data)
                m["adaptive"]["decisions"].update(decisions)
                data = json.dumps(m).encode()
            dst.writestr(info, data)
    return out


def test_a_row_the_runners_looks_did_not_decide_is_not_improved_by_the_fixed_interval(
    tmp_path: Path,
) -> None:
    """The engine's fixed interval over runs the runner stopped adaptively does not allow
    for the looks; a primary row is improved only when the runner's test said so too."""
    one = _with_decisions(
        tmp_path, "rsi-bundle-v-alt-plant-h200.zip", {"streaming c16": "inconclusive"}
    )
    ev, _ = build(Inputs(bundles=[one]))
    rows = {r.mode: r for r in ev.study if r.metric == "throughput_qps"}
    assert (rows["streaming"].demoted_from, rows["streaming"].verdict) == (
        "improved",
        "inconclusive",
    )
    assert rows["streaming"].demoted_by == "sequential"
    assert rows["streaming"].note is not None
    assert "the runner's sequential test" in rows["streaming"].note
    assert rows["non-streaming"].verdict == "improved"
    assert ev.verdict == "improved"  # the other mode's row still holds
    both = _with_decisions(
        tmp_path,
        "rsi-bundle-v-alt-plant-h200.zip",
        {"streaming c16": "inconclusive", "non-streaming c16": "equivalent"},
    )
    ev, _ = build(Inputs(bundles=[both]))
    assert ev.verdict == "inconclusive"
    assert "the runner's sequential test" in ev.reason
