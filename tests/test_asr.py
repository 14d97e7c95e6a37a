"""SGLang-Omni's ASR outputs: parsers, loader, audit and `rsi-bot evidence` end to end.

The files are built in the upstream scripts' exact shapes by `tests/asr_bundles.py`
(which names the upstream files and commits); expected values are recomputed here from
the rows with the standard library.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from bot.cli import main
from evidence.asr import (
    SEEDTTS,
    TRANSCRIBE_DIARIZE,
    parse_accuracy,
    parse_records,
    parse_seedtts_rows,
    parse_summary,
    parse_td_outputs,
)
from evidence.build import Inputs, build
from evidence.bundle import Bundle
from evidence.errors import InputError
from evidence.load import load, read_run_file
from evidence.records import COLUMNS, RecordError
from tests.asr_bundles import (
    AsrSpec,
    _requests,
    seedtts_repeat,
    seedtts_rows,
    td_outputs,
    td_results,
    write_asr_bundle,
)


def _reqs(mode: str = "streaming", failed: int = 2, n: int = 40) -> list[Any]:
    spec = AsrSpec(requests=n, failed=failed)
    return _requests(spec, "base", mode, np.random.default_rng(5))


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


# --- benchmark_asr_seedtts rows ------------------------------------------------------


def test_seedtts_rows_become_columns_and_wer() -> None:
    rows = seedtts_rows(_reqs())
    rec, wer = parse_seedtts_rows(_jsonl(rows))
    assert rec.fmt == SEEDTTS
    assert set(rec.cols) == set(COLUMNS)
    assert rec.ids == [r["id"] for r in rows]
    assert rec.success.tolist() == [r["is_success"] for r in rows]
    ok = [i for i, r in enumerate(rows) if r["is_success"]]
    for i in ok:
        r = rows[i]
        assert rec.cols["latency_s"][i] == r["latency_s"]
        assert rec.cols["audio_duration_s"][i] == r["audio_duration_s"]
        assert rec.cols["rtf"][i] == pytest.approx(r["latency_s"] / r["audio_duration_s"])
        assert rec.cols["text_ttft_s"][i] == r["text_ttft_s"]
        assert rec.cols["inter_chunk_max_s"][i] == pytest.approx(max(r["inter_chunk_s"]))
    # A failed row keeps SampleOutput's zeros: not measured, so missing (NaN), not 0.
    for i in (0, 1):
        assert not rec.success[i]
        assert math.isnan(rec.cols["latency_s"][i])
        assert math.isnan(rec.cols["audio_duration_s"][i])
        assert math.isnan(rec.cols["rtf"][i])
        assert math.isnan(wer.wer[i])
    assert rec.errors == {rows[0]["id"]: "HTTP 500: busy", rows[1]["id"]: "HTTP 500: busy"}
    # ASR generates no audio: those columns are missing, and said to be.
    assert rec.unreported() == [
        "engine_latency_s",
        "audio_ttfp_s",
        "prompt_tokens",
        "completion_tokens",
        "audio_chunk_count",
    ]
    # Per-sample and corpus WER, as calculate_wer_metrics computes them.
    assert [wer.wer[i] for i in ok] == [rows[i]["wer"] for i in ok]
    assert wer.corpus() == pytest.approx(seedtts_repeat(rows, _reqs(), 1.0, 8)["corpus_wer"])
    assert wer.measure == "wer"


def test_seedtts_non_streaming_rows_have_no_text_ttft() -> None:
    rec, _ = parse_seedtts_rows(_jsonl(seedtts_rows(_reqs("non-streaming"))))
    assert np.isnan(rec.cols["text_ttft_s"]).all()
    assert rec.gaps.size == 0
    assert "text_ttft_s" in rec.unreported()


def test_seedtts_older_rows_without_normalised_text_have_no_corpus_wer() -> None:
    rows = seedtts_rows(_reqs(failed=0))
    for r in rows:  # as build_asr_eval_results wrote them before ref_norm/hyp_norm
        del r["ref_norm"], r["hyp_norm"]
    _, wer = parse_seedtts_rows(_jsonl(rows))
    assert wer.corpus() is None
    assert np.isfinite(wer.wer).all()


def test_seedtts_bad_value_names_line_and_field() -> None:
    rows = seedtts_rows(_reqs())
    rows[4]["latency_s"] = "0.2s"
    with pytest.raises(RecordError, match=r"line 5: field 'latency_s' holds a non-number") as e:
        parse_seedtts_rows(_jsonl(rows))
    assert e.value.field == "latency_s"


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"id": "a", "wer": 0.1', r"line 2: not JSON"),
        ("[1, 2]", r"line 2: expected a JSON object"),
        ('{"wer": 0.0, "is_success": true}', r"line 2: no `id`"),
    ],
)
def test_seedtts_malformed_line_is_named(line: str, match: str) -> None:
    first = json.dumps(seedtts_rows(_reqs())[3])
    with pytest.raises(RecordError, match=match):
        parse_seedtts_rows(f"{first}\n{line}\n".encode())


# --- benchmark_asr_transcribe_diarize --------------------------------------------------


def test_td_outputs_become_columns() -> None:
    reqs = _reqs()
    rows = td_outputs(reqs)
    rec = parse_td_outputs(orjson.dumps({"schema_version": 1, "config": {}, "outputs": rows}))
    assert rec.fmt == TRANSCRIBE_DIARIZE
    assert rec.ids == [r["request_id"] for r in rows]
    assert rec.cols["rtf"][5] == rows[5]["rtf"]
    assert rec.cols["text_ttft_s"][5] == rows[5]["text_ttft_s"]
    assert rec.cols["latency_s"][0] == rows[0]["latency_s"]  # a failed request was timed
    assert math.isnan(rec.cols["rtf"][0])  # RequestResult's 0.0: never set
    for name in ("prompt_tokens", "completion_tokens", "engine_latency_s", "audio_chunk_count"):
        assert np.isnan(rec.cols[name]).all(), name


def test_td_bad_output_row_is_named() -> None:
    rows = td_outputs(_reqs())
    rows[3]["text_ttft_s"] = [0.1]
    with pytest.raises(RecordError, match=r"outputs\[3\]: field 'text_ttft_s'"):
        parse_td_outputs(orjson.dumps({"outputs": rows}))
    with pytest.raises(RecordError, match=r"outputs\[0\]: no `request_id`"):
        parse_td_outputs(orjson.dumps({"outputs": [{"is_success": True}]}))


def test_td_accuracy_is_cer_without_a_corpus_figure() -> None:
    reqs = _reqs()
    doc = td_results(reqs, AsrSpec(), 3.0)
    acc = parse_accuracy(json.dumps(doc).encode())
    assert acc.measure == "cer"
    want = [r["cer_no_spk"] for r in doc["per_sample"] if r["cer_valid"]]
    assert acc.wer[acc.success].tolist() == want
    assert acc.corpus() is None  # no character counts in the rows


# --- summaries and detection ---------------------------------------------------------


def test_sweep_summary_is_picked_by_concurrency(tmp_path: Path) -> None:
    bundle = write_asr_bundle(tmp_path / "b", AsrSpec(rounds=1, modes=("streaming",)))
    sweep = next((bundle / "runs").glob("*/asr_seedtts_results.json")).read_bytes()
    summary = parse_summary(sweep)
    rep, wall = summary.pick(8)
    assert rep is not None
    assert wall == rep["wall_clock_s"]
    assert summary.pick(16) == (None, None)


def test_td_summary_reads_the_speed_block() -> None:
    doc = {"schema_version": 1, "config": {"wall_clock_s": 3.5}, "speed": {"throughput_qps": 1}}
    assert parse_summary(orjson.dumps(doc)).pick(8) == ({"throughput_qps": 1}, 3.5)


def test_unknown_summary_is_an_error() -> None:
    with pytest.raises(RecordError, match="unknown summary"):
        parse_summary(b'{"per_request": []}')


def test_parse_records_tells_the_shapes_apart() -> None:
    reqs = _reqs()
    rec, wer = parse_records(_jsonl(seedtts_rows(reqs)))
    assert rec.fmt == SEEDTTS
    assert wer is not None
    rec, wer = parse_records(json.dumps({"outputs": td_outputs(reqs)}, indent=2).encode())
    assert rec.fmt == TRANSCRIBE_DIARIZE
    assert wer is None


# --- the bundle: loader, audit, study ----------------------------------------------------


@pytest.mark.parametrize("kind", ["seedtts", "td"])
def test_asr_bundle_verdict_with_intervals_and_accuracy(kind: str, tmp_path: Path) -> None:
    bundle = write_asr_bundle(tmp_path / "b", AsrSpec(kind=kind, failed=1))
    ev, _ = build(Inputs([bundle]))
    assert ev.verdict == "improved"
    assert [f.code for f in ev.audit if f.severity == "error"] == []
    assert not [f for f in ev.audit if f.code == "summary-mismatch"]
    rows = {(r.mode, r.metric): r for r in ev.study}
    thr = rows[("non-streaming", "throughput_qps")]
    assert thr.primary
    assert thr.ci_low_pct is not None
    assert thr.ci_low_pct > 10
    assert thr.delta_pct == pytest.approx(25.0, abs=0.5)
    ttft = rows[("streaming", "text_ttft_p95_s")]
    assert ttft.ci_high_pct is not None
    assert ttft.ci_high_pct < 0
    assert ttft.guard  # text TTFT p95 is guarded as TTFA p95 is for speech
    assert ("streaming", "audio_ttfp_p95_s") not in rows  # no audio: not measured
    accuracy = ["wer_mean", "wer_corpus"] if kind == "seedtts" else ["cer_mean"]
    for metric in accuracy:
        row = rows[("streaming", metric)]
        assert row.ci_low_abs is not None
        assert row.n_base == row.n_head == 3
    info = [f for f in ev.audit if f.code == "fields-not-reported"]
    assert len(info) == 1
    assert "audio_ttfp_s" in info[0].message


def test_asr_throughput_is_the_scripts_own(tmp_path: Path) -> None:
    bundle = write_asr_bundle(tmp_path / "b", AsrSpec(rounds=1, modes=("non-streaming",)))
    src = load(bundle)
    for lr in src.runs:
        sweep = json.loads((bundle / lr.run.files.speed).read_text())
        rep = sweep["results"][0]["per_repeat"][0]
        assert lr.metrics["throughput_qps"] == pytest.approx(rep["throughput_samples_per_s"])
        assert lr.metrics["wer_corpus"] == pytest.approx(rep["corpus_wer"])
        assert lr.metrics["latency_p95_s"] == pytest.approx(rep["latency_p95_s"])
        assert lr.metrics["rtf_mean"] == pytest.approx(rep["rtf_mean"])
        assert lr.records is not None
        assert lr.records.duration_s == rep["wall_clock_s"]
        rows = [json.loads(x) for x in (bundle / lr.run.files.records).read_text().splitlines()]
        ok = [r["latency_s"] for r in rows if r["is_success"]]
        assert lr.metrics["latency_mean_s"] == pytest.approx(statistics.fmean(ok))


def _first_run(bundle: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((bundle / "manifest.json").read_text())
    return doc["runs"][0]


def test_tampered_sweep_summary_is_a_mismatch(tmp_path: Path) -> None:
    bundle = write_asr_bundle(tmp_path / "b", AsrSpec(modes=("non-streaming",)))
    run = _first_run(bundle)
    path = bundle / run["files"]["speed"]
    doc = json.loads(path.read_text())
    rep = doc["results"][0]["per_repeat"][0]
    rep["throughput_samples_per_s"] *= 1.1
    rep["evaluated"] += 1
    path.write_text(json.dumps(doc))
    ev, _ = build(Inputs([bundle]))
    bad = [f for f in ev.audit if f.code == "summary-mismatch"]
    assert len(bad) == 1
    assert bad[0].runs == [run["id"]]
    assert "throughput_samples_per_s" in bad[0].message
    assert "evaluated" in bad[0].message
    assert ev.verdict == "invalid"


def test_head_wer_regression_is_an_accuracy_finding(tmp_path: Path) -> None:
    spec = AsrSpec(modes=("non-streaming",), head_wer_add=0.08, head_speedup=0.0)
    ev, _ = build(Inputs([write_asr_bundle(tmp_path / "b", spec)]))
    acc = [f for f in ev.audit if f.code == "accuracy-regression"]
    assert len(acc) == 1
    assert acc[0].message.startswith("WER rose from")
    row = next(r for r in ev.study if r.metric == "wer_corpus")
    assert row.verdict == "regressed"


def test_head_cer_regression_names_cer(tmp_path: Path) -> None:
    spec = AsrSpec(kind="td", modes=("non-streaming",), head_wer_add=0.08, head_speedup=0.0)
    ev, _ = build(Inputs([write_asr_bundle(tmp_path / "b", spec)]))
    acc = [f for f in ev.audit if f.code == "accuracy-regression"]
    assert len(acc) == 1
    assert acc[0].message.startswith("CER rose from")


# --- malformed files ----------------------------------------------------------------------


def _corrupt_raw_file(bundle: Path) -> tuple[dict[str, Any], str]:
    run = _first_run(bundle)
    rel = run["files"]["records"]
    lines = (bundle / rel).read_text().splitlines()
    row = json.loads(lines[2])
    row["wer"] = "n/a"
    lines[2] = json.dumps(row)
    (bundle / rel).write_text("\n".join(lines) + "\n")
    return run, rel


def test_malformed_asr_file_is_an_input_error_naming_file_and_field(tmp_path: Path) -> None:
    bundle = write_asr_bundle(tmp_path / "b", AsrSpec(rounds=2, modes=("non-streaming",)))
    _, rel = _corrupt_raw_file(bundle)
    with Bundle(bundle) as b, pytest.raises(InputError) as exc:
        read_run_file(b, str(bundle), rel, "records", parse_records)
    assert exc.value.path == f"{bundle}/{rel}"
    assert "line 3: field 'wer' holds a non-number ('n/a')" in exc.value.problem


def test_malformed_asr_file_makes_the_evidence_invalid_and_says_where(tmp_path: Path) -> None:
    bundle = write_asr_bundle(tmp_path / "b", AsrSpec(rounds=2, modes=("non-streaming",)))
    run, rel = _corrupt_raw_file(bundle)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["evidence", str(bundle), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("verdict: invalid")
    ev = orjson.loads((out / "evidence.json").read_bytes())
    bad = [f for f in ev["audit"] if f["code"] == "bundle-invalid"]
    assert len(bad) == 1
    assert bad[0]["runs"] == [run["id"]]
    assert rel in bad[0]["message"]
    assert "field 'wer'" in bad[0]["message"]


def test_missing_raw_file_is_reported(tmp_path: Path) -> None:
    bundle = write_asr_bundle(tmp_path / "b", AsrSpec(rounds=2, modes=("non-streaming",)))
    run = _first_run(bundle)
    (bundle / run["files"]["records"]).unlink()
    src = load(bundle)
    msgs = [f.message for f in src.findings if f.code == "bundle-invalid"]
    assert msgs == [
        f"run {run['id']} is `ok` but its records file {run['files']['records']} "
        f"is missing from {bundle}"
    ]


# --- rsi-bot evidence end to end -------------------------------------------------------


def test_rsi_bot_evidence_on_an_asr_bundle(tmp_path: Path) -> None:
    bundle = write_asr_bundle(tmp_path / "b", AsrSpec())
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["evidence", str(bundle), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("verdict: improved")
    ev = orjson.loads((out / "evidence.json").read_bytes())
    assert ev["task"] == "qwen3-asr"
    metrics = {(r["mode"], r["metric"]) for r in ev["study"]}
    assert {("streaming", "text_ttft_p95_s"), ("streaming", "wer_corpus")} <= metrics
    thr = next(r for r in ev["study"] if r["primary"] and r["mode"] == "streaming")
    assert thr["ci_low_pct"] > 0
    assert thr["ci_high_pct"] > thr["ci_low_pct"]
    assert "WER (corpus)" in (out / "report.html").read_text()
    assert "NaN" not in (out / "evidence.json").read_text()


def test_an_asr_head_whose_rows_carry_no_wer_is_accuracy_missing(tmp_path: Path) -> None:
    """Every head row's `wer` null: before, the WER rows vanished and a head 20 points
    worse came out improved with no finding."""
    b = tmp_path / "b"
    write_asr_bundle(b, AsrSpec(kind="seedtts", rounds=3, head_wer_add=0.2))
    doc = orjson.loads((b / "manifest.json").read_bytes())
    for r in doc["runs"]:
        if r["side"] == "head":
            f = b / r["files"]["records"]
            rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
            f.write_text("".join(json.dumps({**x, "wer": None}) + "\n" for x in rows))
    ev, _ = build(Inputs(bundles=[b]))
    missing = [f for f in ev.audit if f.code == "accuracy-missing"]
    assert {f.severity for f in missing} == {"error"}
    assert ev.verdict == "invalid"
