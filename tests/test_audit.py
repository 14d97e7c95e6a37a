"""One bundle per audit code with exactly that defect, and a clean bundle with none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from evidence.audit import audit
from evidence.build import Inputs, build
from evidence.errors import BoundError
from evidence.load import load
from evidence.model import Finding, HistoryEntry
from evidence.policy import Policy
from tests.bundles import (
    Row,
    clean_bundle,
    edit_manifest,
    edit_run,
    edit_summary,
    manifest,
    run_ids,
)
from tests.conftest import REAL


def findings(path: Path, history: list[HistoryEntry] | None = None) -> list[Finding]:
    return audit([load(path)], Policy(), history)


def codes(fs: list[Finding]) -> set[tuple[str, str]]:
    return {(f.code, f.severity) for f in fs}


def test_clean_bundle_has_no_finding(bundle: Path) -> None:
    assert findings(bundle) == []
    ev, _ = build(Inputs(bundles=[bundle]))
    assert ev.verdict == "inconclusive"  # A/A at 2% round CV: too wide for ±3%


def test_bundle_invalid_when_an_ok_runs_file_is_missing(bundle: Path) -> None:
    rid = run_ids(bundle, "head")[0]
    (bundle / "runs" / rid / "speed_results.json").unlink()
    fs = findings(bundle)
    assert codes(fs) == {("bundle-invalid", "error")}
    assert fs[0].runs == [rid]
    assert "missing" in fs[0].message
    ev, _ = build(Inputs(bundles=[bundle]))
    assert ev.verdict == "invalid"


def test_bundle_invalid_when_a_speed_file_is_malformed(bundle: Path) -> None:
    rid = run_ids(bundle, "base")[1]
    (bundle / "runs" / rid / "speed_results.json").write_text(
        '{"per_request": [{"id": "x", "latency_s": "fast"}]}'
    )
    fs = findings(bundle)
    assert {f.code for f in fs if f.severity == "error"} == {"bundle-invalid"}
    assert "latency_s" in fs[0].message


def test_run_failed_is_a_warning_while_two_rounds_remain(bundle: Path) -> None:
    rid = run_ids(bundle, "head", "streaming")[0]

    def fail(doc: dict[str, Any]) -> None:
        run = next(r for r in doc["runs"] if r["id"] == rid)
        run.update(
            status="failed",
            error="server crashed mid-round",
            log_tail="torch.OutOfMemoryError: CUDA out of memory\n" + "x" * 199 + "(pids 1688)",
        )

    edit_manifest(bundle, fail)
    fs = findings(bundle)
    assert codes(fs) == {("run-failed", "warning")}
    # A log line cut to 200 characters ends with an ellipsis, not mid-word as if whole.
    assert fs[0].message.endswith("(last log line: " + "x" * 199 + "…).")


def test_run_failed_is_an_error_below_two_rounds_a_side(bundle: Path) -> None:
    victims = run_ids(bundle, "base", "non-streaming")[:3]

    def fail(doc: dict[str, Any]) -> None:
        for r in doc["runs"]:
            if r["id"] in victims:
                r.update(status="failed", error="server did not start")

    edit_manifest(bundle, fail)
    fs = findings(bundle)
    assert ("run-failed", "error") in codes(fs)
    assert {f.code for f in fs} == {"run-failed"}


def test_incomplete_bundle_is_reported(bundle: Path) -> None:
    edit_manifest(bundle, lambda d: d.update(complete=False))
    fs = findings(bundle)
    assert codes(fs) == {("run-failed", "warning")}
    assert "cut short" in fs[0].message


def test_request_count_mismatch(bundle: Path) -> None:
    rid = run_ids(bundle)[2]
    edit_manifest(
        bundle, lambda d: next(r for r in d["runs"] if r["id"] == rid).update(requests=128)
    )
    fs = findings(bundle)
    assert codes(fs) == {("request-count-mismatch", "error")}
    assert fs[0].numbers == {"expected": 128, "found": 120}


def test_sample_set_mismatch(bundle: Path) -> None:
    for rid in run_ids(bundle, "head", "non-streaming"):
        edit_run(bundle, rid, lambda rows, _: rows[7].update(id="another-sample"))
    fs = findings(bundle)
    # The head's accuracy file has no transcription of the sample it measured instead.
    assert codes(fs) == {("sample-set-mismatch", "error"), ("accuracy-failed", "warning")}
    assert "another-sample" in fs[0].samples


def test_duplicate_request_id(bundle: Path) -> None:
    rid = run_ids(bundle, "base", "streaming")[0]
    edit_run(bundle, rid, lambda rows, _: rows[1].update(id=rows[0]["id"]))
    fs = findings(bundle)
    assert codes(fs) == {("duplicate-request-id", "error")}
    assert fs[0].runs == [rid]


@pytest.mark.parametrize(
    ("field", "delta"),
    [
        ("throughput_qps", 0.01),
        ("latency_p95_s", 0.002),
        ("completed_requests", 1),
        ("audio_ttfp_p95_s", 0.001),
    ],
)
def test_summary_mismatch(bundle: Path, field: str, delta: float) -> None:
    rid = run_ids(bundle, "head", "streaming")[1]
    speed = orjson.loads((bundle / "runs" / rid / "speed_results.json").read_bytes())
    edit_summary(bundle, rid, **{field: speed["summary"][field] + delta})
    fs = findings(bundle)
    assert codes(fs) == {("summary-mismatch", "error")}
    assert field in fs[0].numbers


def test_summary_within_rounding_is_accepted(bundle: Path) -> None:
    rid = run_ids(bundle, "head", "streaming")[1]
    speed = orjson.loads((bundle / "runs" / rid / "speed_results.json").read_bytes())
    lat = np.array([r["latency_s"] for r in speed["per_request"]])
    wall = next(r["wall_clock_s"] for r in manifest(bundle)["runs"] if r["id"] == rid)
    # Anywhere within half a unit of the summary's last decimal is the same figure.
    edit_summary(
        bundle,
        rid,
        throughput_qps=len(lat) / wall + 0.00049,
        latency_p95_s=float(np.percentile(lat, 95)) - 0.00049,
    )
    assert findings(bundle) == []


def _fail(rows: list[Row], n: int) -> None:
    for r in rows[:n]:
        r.update(is_success=False, error="CUDA error: out of memory")


def test_failed_requests_under_the_guard_warn(bundle: Path) -> None:
    edit_run(bundle, run_ids(bundle, "head", "non-streaming")[0], lambda rows, _: _fail(rows, 1))
    fs = findings(bundle)
    assert codes(fs) == {("failed-requests", "warning")}
    assert fs[0].numbers["failed"] == 1
    assert fs[0].numbers["total"] == 480


def test_failed_requests_over_the_guard_are_an_error(bundle: Path) -> None:
    for rid in run_ids(bundle, "head", "non-streaming")[:2]:
        edit_run(bundle, rid, lambda rows, _: _fail(rows, 3))
    fs = findings(bundle)
    assert codes(fs) == {("failed-requests", "error")}
    assert "out of memory" in fs[0].message


def test_a_negative_gap_is_outside_physical_range(bundle: Path) -> None:
    """A negative time is no timing to audit: the bundle is refused, naming the field."""
    rid = run_ids(bundle, "base", "streaming")[2]

    def plant(rows: list[Row], run: dict[str, Any]) -> None:
        rows[3]["inter_chunk_s"] = [-0.01, *rows[3]["inter_chunk_s"][1:]]

    edit_run(bundle, rid, plant)
    with pytest.raises(BoundError, match="outside the physical range"):
        findings(bundle)


@pytest.mark.parametrize("defect", ["ttfa-after-end", "wall-short", "overlap"])
def test_timing_inconsistent(bundle: Path, defect: str) -> None:
    rid = run_ids(bundle, "base", "streaming")[2]

    def plant(rows: list[Row], run: dict[str, Any]) -> None:
        if defect == "ttfa-after-end":
            rows[4]["audio_ttfp_s"] = rows[4]["latency_s"] + 0.5
        elif defect == "wall-short":
            run["wall_clock_s"] = max(r["latency_s"] for r in rows) - 0.5
        else:
            run["wall_clock_s"] = round(sum(r["latency_s"] for r in rows) / 8 * 0.8, 3)

    edit_run(bundle, rid, plant)
    fs = findings(bundle)
    assert {f.code for f in fs if f.severity == "error"} == {"timing-inconsistent"}
    assert fs[0].runs == [rid]


def test_first_chunk_at_end_flags_moss_realtime_sample_five(bundle: Path) -> None:
    """The fifth `native` sample of SGLang-Omni's MOSS-TTS realtime file is such a record."""
    real = orjson.loads((REAL / "moss_tts_realtime_h200_request1.json").read_bytes())
    rid = run_ids(bundle, "base", "streaming")[0]
    flagged: list[str] = []

    def plant(rows: list[Row], run: dict[str, Any]) -> None:
        for row, s in zip(rows, real["native"]["samples"], strict=False):
            chunks = max(1, int(s["audio_s"] / 0.48))
            row.update(
                latency_s=round(s["latency_s"], 4),
                audio_ttfp_s=round(s["ttfa_s"], 4),
                rtf=round(s["rtf"], 4),
                inter_chunk_s=[round((s["latency_s"] - s["ttfa_s"]) / chunks, 4)] * chunks,
            )
        flagged.append(rows[4]["id"])
        run["wall_clock_s"] = round(sum(r["latency_s"] for r in rows) / 8 * 1.05, 3)

    edit_run(bundle, rid, plant)
    fs = findings(bundle)
    assert codes(fs) == {("first-chunk-at-end", "warning")}
    assert fs[0].samples == flagged


def test_output_length_shift(tmp_path: Path) -> None:
    path = clean_bundle(tmp_path / "b", head_audio_scale=0.85)
    fs = findings(path)
    assert codes(fs) == {("output-length-shift", "error")}
    measures = {f.numbers["measure"] for f in fs}
    assert "audio_duration_s" in measures
    shift = next(f for f in fs if f.numbers["measure"] == "audio_duration_s").numbers
    assert isinstance(shift["shift_pct"], float)
    assert -17 < shift["shift_pct"] < -13


def test_lengths_the_head_stops_reporting_are_an_error_not_a_skipped_check(
    tmp_path: Path,
) -> None:
    """Audio 15% shorter, and the head reports its lengths as null: before, the length
    check had nothing to compare and the study came out improved."""
    path = clean_bundle(tmp_path / "b", head_audio_scale=0.85)

    def hide(rows: list[dict[str, Any]], run: dict[str, Any]) -> None:
        for r in rows[1:]:  # one request a run still reports: not enough to compare
            r.update(audio_duration_s=None, completion_tokens=None, audio_chunk_count=None)

    for rid in run_ids(path, "head"):
        edit_run(path, rid, hide, resummarize=False)
    fs = findings(path)
    hidden = [f for f in fs if f.code == "output-length-unreported"]
    assert {f.severity for f in hidden} == {"error"}
    assert {f.numbers["measure"] for f in hidden} >= {"audio_duration_s"}
    assert any(
        f.message.startswith("streaming c=8: head reports no audio seconds where base does")
        for f in hidden
    )


def test_accuracy_regression(tmp_path: Path) -> None:
    fs = findings(clean_bundle(tmp_path / "b", head_wer_add=0.03))
    assert codes(fs) == {("accuracy-regression", "error")}


def test_environment_mismatch_driver_is_an_error(bundle: Path) -> None:
    edit_manifest(bundle, lambda d: d["environment"]["head"].update(driver="575.57.08"))
    fs = findings(bundle)
    assert codes(fs) == {("environment-mismatch", "error")}
    assert "575.57.08" in fs[0].message


def test_environment_mismatch_packages_only_is_a_warning(bundle: Path) -> None:
    edit_manifest(bundle, lambda d: d["environment"]["head"]["packages"].update(torch="2.12.0"))
    fs = findings(bundle)
    assert codes(fs) == {("environment-mismatch", "warning")}
    assert "torch 2.11.0 vs 2.12.0" in fs[0].message


def test_not_interleaved(tmp_path: Path) -> None:
    fs = findings(clean_bundle(tmp_path / "b", order="blocked"))
    assert codes(fs) == {("not-interleaved", "warning")}
    assert "BBBBHHHH" in fs[0].message


def test_alternating_order_is_not_balanced(tmp_path: Path) -> None:
    fs = findings(clean_bundle(tmp_path / "b", order="alternating"))
    assert codes(fs) == {("not-interleaved", "warning")}


def test_too_few_rounds(tmp_path: Path) -> None:
    fs = findings(clean_bundle(tmp_path / "b", rounds=2))
    assert codes(fs) == {("too-few-samples", "warning")}


def test_too_few_requests_for_p99(tmp_path: Path) -> None:
    fs = findings(clean_bundle(tmp_path / "b", requests=60))
    assert codes(fs) == {("too-few-samples", "warning")}
    ev, _ = build(Inputs(bundles=[tmp_path / "b"]))
    p99 = [r for r in ev.study if r.metric == "latency_p99_s"]
    assert p99
    assert all(r.verdict == "inconclusive" and r.note for r in p99)


def test_noisy_rounds(tmp_path: Path) -> None:
    fs = findings(clean_bundle(tmp_path / "b", round_cv=0.12, seed=5))
    assert {f.code for f in fs} == {"noisy-rounds"}


def _history(bundle: Path, factor: float) -> list[HistoryEntry]:
    m = manifest(bundle)
    ev, _ = build(Inputs(bundles=[bundle]))
    base = next(
        r.base for r in ev.study if r.metric == "throughput_qps" and r.mode == "non-streaming"
    )
    assert base is not None
    return [
        HistoryEntry(
            task=m["task"],
            gpu="H200",
            mode="non-streaming",
            concurrency=8,
            metric="throughput_qps",
            value=base * factor * (1 + 0.005 * k),
            sha=f"{k:040x}",
            fingerprint=m["environment"]["base"],
        )
        for k in range(-3, 4)
    ]


def test_low_baseline(bundle: Path) -> None:
    fs = findings(bundle, _history(bundle, 1.25))
    assert codes(fs) == {("low-baseline", "warning")}
    assert fs[0].numbers["metric"] == "throughput_qps"


def test_history_on_another_fingerprint_is_ignored(bundle: Path) -> None:
    hist = _history(bundle, 1.25)
    for h in hist:
        h.fingerprint = {**h.fingerprint, "gpu_name": "NVIDIA H100"}
    assert findings(bundle, hist) == []


def test_base_in_line_with_history_is_fine(bundle: Path) -> None:
    assert findings(bundle, _history(bundle, 1.0)) == []


def test_any_error_makes_the_study_invalid_even_with_a_real_gain(tmp_path: Path) -> None:
    path = clean_bundle(tmp_path / "b", speedup=0.2, head_audio_scale=0.7)
    ev, _ = build(Inputs(bundles=[path]))
    assert any(r.verdict == "improved" for r in ev.study if r.primary)
    assert ev.verdict == "invalid"
    assert ev.gpus["H200"].verdict == "invalid"


def _set_host_cpu(bundle: Path, values: dict[str, Any]) -> None:
    for rid, ms in values.items():
        run = next(r for r in manifest(bundle)["runs"] if r["id"] == rid)
        path = bundle / run["files"]["server"]
        doc = orjson.loads(path.read_bytes())
        doc["host_cpu_ms"] = ms
        path.write_bytes(orjson.dumps(doc))


def test_host_cpu_speed_that_moves_between_rounds_is_named(bundle: Path) -> None:
    ids = run_ids(bundle)
    slow = {rid: (13.0 if i % 3 == 0 else 7.0) for i, rid in enumerate(ids)}
    _set_host_cpu(bundle, slow)
    (host,) = [f for f in findings(bundle) if f.code == "host-cpu-unsteady"]
    assert host.severity == "warning"
    assert "7–13 ms" in host.message
    assert sorted(host.runs) == sorted(ids)


def test_host_cpu_within_five_percent_is_not_a_finding(bundle: Path) -> None:
    ids = run_ids(bundle)
    _set_host_cpu(bundle, {rid: 8.0 + 0.2 * (i % 2) for i, rid in enumerate(ids)})
    assert findings(bundle) == []


def test_host_cpu_values_that_are_not_times_are_left_out(bundle: Path) -> None:
    """Zero, negative and absurd values are not a machine's speed: they are skipped, and
    three plausible values that agree are no finding."""
    ids = run_ids(bundle)
    _set_host_cpu(bundle, dict.fromkeys(ids, 8.0))
    _set_host_cpu(bundle, {ids[0]: 0, ids[1]: -5.0, ids[2]: 1e300})
    assert findings(bundle) == []


def test_a_host_slower_on_one_side_is_named_even_when_the_spread_is_small(bundle: Path) -> None:
    """7.0 ms before every base run, 7.6 ms before every head run: 4% CV overall, but the
    head's machine was 8.6% slower, which can bias the delta itself."""
    _set_host_cpu(bundle, dict.fromkeys(run_ids(bundle, "base"), 7.0))
    _set_host_cpu(bundle, dict.fromkeys(run_ids(bundle, "head"), 7.6))
    (host,) = [f for f in findings(bundle) if f.code == "host-cpu-unsteady"]
    assert host.numbers["cv_pct"] < 5
    assert host.numbers["side_gap_pct"] == 8.57
    assert "median base 7 ms, head 7.6 ms (+8.6%)" in host.message


def _fail_runs(bundle: Path, ids: list[str], failure: str = "crashed") -> None:
    def edit(doc: dict[str, Any]) -> None:
        for r in doc["runs"]:
            if r["id"] in ids:
                r.update(status="failed", failure=failure, error="the server exited")

    edit_manifest(bundle, edit)


def test_a_side_that_fails_selectively_makes_the_evidence_invalid(bundle: Path) -> None:
    """An outside try: a head whose server crashed in its slow bursts dropped 6 of 16
    pairs (only warnings). Failures on one side (>= 2 and a fifth of its runs, against at
    most a third as many on the other) are an error: no gain from what it left."""
    _fail_runs(bundle, run_ids(bundle, "head", "non-streaming")[:2])
    fs = findings(bundle)
    (one,) = [f for f in fs if f.severity == "error"]
    assert one.code == "run-failed"
    assert "the head failed 2 of its 4 runs, the base 0" in one.message
    assert build(Inputs(bundles=[bundle]))[0].verdict == "invalid"


def test_failures_on_both_sides_alike_or_caused_by_the_runner_are_warnings(
    bundle: Path,
) -> None:
    _fail_runs(bundle, run_ids(bundle, "head", "non-streaming")[:1])
    _fail_runs(bundle, run_ids(bundle, "base", "non-streaming")[:1])
    _fail_runs(bundle, run_ids(bundle, "head", "streaming")[:2], failure="total-time-limit")
    assert not [f for f in findings(bundle) if f.severity == "error"]
