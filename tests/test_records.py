"""Per-request records: SGLang-Omni rows, SGLang bench_serving JSONL, vLLM bench serve JSON.

Expected values are recomputed here from the files with the standard library, so each
assertion checks the parser against an independent reading of the same bytes.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evidence.records import (
    COLUMNS,
    RecordError,
    RunRecords,
    parse_server,
    parse_speed,
    parse_wer,
)

FIXTURES = Path(__file__).parent / "fixtures"
SERVING = FIXTURES / "serving"
NAN = math.nan


def _dumps(doc: Any) -> bytes:
    """As the benchmarks write it: Python's json, which emits Infinity/NaN."""
    return json.dumps(doc).encode()


def _sglang_lines() -> list[dict[str, Any]]:
    text = (SERVING / "sglang_bench_serving.jsonl").read_text()
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def _vllm_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SERVING / "vllm_bench_serve.json").read_text())
    return doc


def _assert_shapes(rec: RunRecords) -> None:
    assert set(rec.cols) == set(COLUMNS)
    for name, col in rec.cols.items():
        assert col.shape == (rec.n,), name
        assert col.dtype == np.float64, name
    assert rec.success.shape == (rec.n,)
    assert rec.success.dtype == np.bool_


# --- SGLang-Omni speed_results.json ------------------------------------------------------


def _omni_doc() -> dict[str, Any]:
    """Four requests as `build_speed_results` writes them: zero/empty values are null."""
    return {
        "summary": {"completed_requests": 3, "failed_requests": 2, "throughput_qps": 0.812},
        "config": {"model": "FunAudioLLM/CosyVoice3-0.5B", "stream": True, "concurrency": 2},
        "per_request": [
            {
                "id": "en_001",
                "text": "Get the trust fund to the bank early.",
                "is_success": True,
                "error": None,
                "latency_s": 1.2345,
                "engine_latency_s": 1.1021,
                "audio_duration_s": 2.4569,
                "rtf": 0.5025,
                "prompt_tokens": 38,
                "completion_tokens": 62,
                "audio_ttfp_s": 0.2103,
                "text_ttft_s": None,
                "inter_chunk_s": [0.0812, 0.1207, 0.0991],
                # The file's own count is kept even where it disagrees with the gaps
                # (3 gaps would mean 4 chunks); judging that is the audit's job.
                "audio_chunk_count": 5,
            },
            {
                "id": "en_002",
                "text": "The stained glass offered a hypnotic atmosphere.",
                "is_success": True,
                "error": None,
                "latency_s": 1.7001,
                "engine_latency_s": None,
                "audio_duration_s": 3.4969,
                "rtf": 0.4862,
                "prompt_tokens": 41,
                "completion_tokens": 87,
                "audio_ttfp_s": 0.1987,
                "text_ttft_s": None,
                "inter_chunk_s": [0.0533, 0.3011],
                "audio_chunk_count": None,  # 0 is written as null; derived: 2 gaps + 1
            },
            {
                "id": "en_003",
                "text": "One by one, the campfires were extinguished.",
                "is_success": False,
                "error": "HTTP 500: CUDA out of memory",
                "latency_s": 0.0512,
                "engine_latency_s": None,
                "audio_duration_s": None,
                "rtf": None,
                "prompt_tokens": None,
                "completion_tokens": None,
                "audio_ttfp_s": 0.4472,
                "text_ttft_s": None,
                "inter_chunk_s": [0.9034],  # a stream that broke: must not be pooled
                "audio_chunk_count": None,
            },
            {
                "id": "en_004",
                "text": "A short one.",
                "is_success": True,
                "error": None,
                "latency_s": 0.6604,
                "engine_latency_s": 0.6013,
                "audio_duration_s": 1.1202,
                "rtf": 0.5895,
                "prompt_tokens": 30,
                "completion_tokens": 25,
                "audio_ttfp_s": None,  # not streamed
                "text_ttft_s": None,
                "inter_chunk_s": None,
                "audio_chunk_count": None,
            },
            {
                "id": "en_005",
                "text": "Timed out.",
                "is_success": False,
                "error": None,  # a failure without a message
                "latency_s": None,
                "engine_latency_s": None,
                "audio_duration_s": None,
                "rtf": None,
                "prompt_tokens": None,
                "completion_tokens": None,
                "audio_ttfp_s": None,
                "text_ttft_s": None,
                "inter_chunk_s": None,
                "audio_chunk_count": None,
            },
        ],
    }


def test_omni_rows_become_columns() -> None:
    rec = parse_speed(_dumps(_omni_doc()))
    _assert_shapes(rec)
    assert rec.fmt == "sglang-omni"
    assert rec.ids == ["en_001", "en_002", "en_003", "en_004", "en_005"]
    assert rec.success.tolist() == [True, True, False, True, False]
    assert rec.duration_s is None
    assert rec.summary == _omni_doc()["summary"]
    expect = {
        "latency_s": [1.2345, 1.7001, 0.0512, 0.6604, NAN],
        "engine_latency_s": [1.1021, NAN, NAN, 0.6013, NAN],
        "audio_duration_s": [2.4569, 3.4969, NAN, 1.1202, NAN],
        "rtf": [0.5025, 0.4862, NAN, 0.5895, NAN],
        "audio_ttfp_s": [0.2103, 0.1987, 0.4472, NAN, NAN],
        "text_ttft_s": [NAN] * 5,
        "prompt_tokens": [38, 41, NAN, 30, NAN],
        "completion_tokens": [62, 87, NAN, 25, NAN],
        "audio_chunk_count": [5, 3, 2, NAN, NAN],
        "inter_chunk_max_s": [0.1207, 0.3011, 0.9034, NAN, NAN],
        "inter_chunk_min_s": [0.0812, 0.0533, 0.9034, NAN, NAN],
    }
    assert set(expect) == set(COLUMNS)
    for name, values in expect.items():
        np.testing.assert_array_equal(rec.cols[name], np.array(values), err_msg=name)


def test_omni_gaps_pool_only_successful_requests() -> None:
    rec = parse_speed(_dumps(_omni_doc()))
    np.testing.assert_array_equal(rec.gaps, [0.0812, 0.1207, 0.0991, 0.0533, 0.3011])
    assert 0.9034 not in rec.gaps.tolist()


def test_omni_error_map_names_each_failed_request() -> None:
    rec = parse_speed(_dumps(_omni_doc()))
    assert rec.errors == {"en_003": "HTTP 500: CUDA out of memory", "en_005": "failed"}


def test_omni_without_any_stream_has_empty_gaps() -> None:
    doc = _omni_doc()
    for row in doc["per_request"]:
        row["inter_chunk_s"] = None
    rec = parse_speed(_dumps(doc))
    assert rec.gaps.shape == (0,)
    assert np.isnan(rec.cols["inter_chunk_max_s"]).all()
    np.testing.assert_array_equal(rec.cols["audio_chunk_count"], [5, NAN, NAN, NAN, NAN])


@pytest.mark.parametrize("bad", ["1.2 s", "1.25", True, [1.2]])
def test_omni_non_number_names_the_field(bad: object) -> None:
    doc = _omni_doc()
    doc["per_request"][1]["latency_s"] = bad
    with pytest.raises(RecordError, match="'latency_s'"):
        parse_speed(_dumps(doc))


def test_omni_integer_too_large_for_a_float_names_the_field() -> None:
    """Python's json reads a 401-digit integer; NumPy cannot hold it: a clear error, not
    an OverflowError traceback."""
    doc = _omni_doc()
    doc["per_request"][1]["latency_s"] = 10**400
    with pytest.raises(RecordError, match="'latency_s' holds a number too large"):
        parse_speed(_dumps(doc))


def test_an_integer_too_large_for_a_float_in_a_summary_names_the_field(tmp_path: Path) -> None:
    from evidence.build import Inputs, build
    from evidence.errors import InputError
    from tests.bundles import clean_bundle, edit_summary, run_ids

    b = clean_bundle(tmp_path / "b")
    edit_summary(b, run_ids(b, "head")[0], throughput_qps=12345.678)
    speed = next(b.glob(f"runs/{run_ids(b, 'head')[0]}/speed*.json"))
    speed.write_bytes(speed.read_bytes().replace(b"12345.678", b"1" + b"0" * 400))
    with pytest.raises(InputError, match="throughput_qps"):
        build(Inputs(bundles=[b]))


def test_a_lone_surrogate_in_an_error_text_becomes_a_replacement_character() -> None:
    """The standard library reads "\\ud800", which no JSON or UTF-8 writer can write
    back: the text is kept, with U+FFFD where the surrogate was."""
    doc = _omni_doc()
    data = _dumps(doc).replace(b"CUDA out of memory", b"\\ud800 boom \\ud83d\\ude00", 1)
    rec = parse_speed(data)
    assert rec.errors["en_003"] == "HTTP 500: \ufffd boom \U0001f600"


def test_omni_non_number_among_gaps_names_the_field() -> None:
    doc = _omni_doc()
    doc["per_request"][0]["inter_chunk_s"] = [0.08, "0.12"]
    with pytest.raises(RecordError, match="'inter_chunk_s'"):
        parse_speed(_dumps(doc))


def test_omni_gaps_must_be_a_list() -> None:
    doc = _omni_doc()
    doc["per_request"][0]["inter_chunk_s"] = 0.08
    with pytest.raises(RecordError, match="'inter_chunk_s'"):
        parse_speed(_dumps(doc))


def test_omni_row_without_id_is_named() -> None:
    doc = _omni_doc()
    del doc["per_request"][2]["id"]
    with pytest.raises(RecordError, match=r"per_request\[2\]"):
        parse_speed(_dumps(doc))


def test_omni_rows_must_be_objects() -> None:
    doc = _omni_doc()
    doc["per_request"] = {"en_001": doc["per_request"][0]}
    with pytest.raises(RecordError, match="per_request"):
        parse_speed(_dumps(doc))


# --- SGLang bench_serving JSONL ------------------------------------------------------------


def test_bench_serving_reads_the_last_line() -> None:
    older, last = _sglang_lines()
    assert len(older["ttfts"]) != len(last["ttfts"])
    rec = parse_speed((SERVING / "sglang_bench_serving.jsonl").read_bytes())
    _assert_shapes(rec)
    assert rec.fmt == "sglang-bench-serving"
    assert rec.n == len(last["ttfts"]) == 20
    assert rec.ids == [str(i) for i in range(20)]
    assert rec.duration_s == last["duration"]
    # the older line alone is a different run
    first = parse_speed(json.dumps(older).encode())
    assert first.n == len(older["ttfts"])
    assert first.duration_s == older["duration"]


def test_bench_serving_columns_match_the_arrays() -> None:
    last = _sglang_lines()[-1]
    rec = parse_speed((SERVING / "sglang_bench_serving.jsonl").read_bytes())
    ok = [not e for e in last["errors"]]
    assert rec.success.tolist() == ok
    latency = [
        t + math.fsum(g) if good else NAN
        for t, g, good in zip(last["ttfts"], last["itls"], ok, strict=True)
    ]
    np.testing.assert_allclose(rec.cols["latency_s"], latency, rtol=1e-12)
    ttft = [t if good else NAN for t, good in zip(last["ttfts"], ok, strict=True)]
    np.testing.assert_array_equal(rec.cols["text_ttft_s"], ttft)
    np.testing.assert_array_equal(rec.cols["prompt_tokens"], last["input_lens"])
    np.testing.assert_array_equal(rec.cols["completion_tokens"], last["output_lens"])
    np.testing.assert_array_equal(
        rec.cols["inter_chunk_max_s"], [max(g) if g else NAN for g in last["itls"]]
    )
    np.testing.assert_array_equal(
        rec.cols["inter_chunk_min_s"], [min(g) if g else NAN for g in last["itls"]]
    )
    for name in ("engine_latency_s", "audio_duration_s", "rtf", "audio_ttfp_s"):
        assert np.isnan(rec.cols[name]).all(), name
    pooled = [g for g, good in zip(last["itls"], ok, strict=True) if good for g in g]
    np.testing.assert_array_equal(rec.gaps, pooled)


def test_bench_serving_failed_request() -> None:
    last = _sglang_lines()[-1]
    rec = parse_speed((SERVING / "sglang_bench_serving.jsonl").read_bytes())
    assert (~rec.success).sum() == 1
    assert rec.success.sum() == last["completed"] == 19
    assert list(rec.errors) == ["13"]
    assert rec.errors["13"].startswith("Traceback (most recent call last):")
    assert "ServerDisconnectedError" in rec.errors["13"]
    assert math.isnan(rec.cols["latency_s"][13])
    assert math.isnan(rec.cols["text_ttft_s"][13])
    assert rec.cols["completion_tokens"][13] == 0


def test_bench_serving_summary_keeps_scalars_and_agrees_with_the_arrays() -> None:
    rec = parse_speed((SERVING / "sglang_bench_serving.jsonl").read_bytes())
    s = rec.summary
    assert s is not None
    assert not any(isinstance(v, list) for v in s.values())
    assert s["request_rate"] == math.inf  # written as `Infinity` by json.dumps
    assert s["accept_length"] is None
    ok = rec.success
    assert s["request_throughput"] == pytest.approx(ok.sum() / s["duration"], rel=1e-12)
    assert s["total_output_tokens"] == np.nansum(rec.cols["completion_tokens"][ok])
    assert s["total_input_tokens"] == np.nansum(rec.cols["prompt_tokens"][ok])
    lat_ms = rec.cols["latency_s"][ok] * 1000
    ttft_ms = rec.cols["text_ttft_s"][ok] * 1000
    assert s["mean_e2e_latency_ms"] == pytest.approx(lat_ms.mean(), rel=1e-9)
    assert s["median_e2e_latency_ms"] == pytest.approx(np.median(lat_ms), rel=1e-9)
    assert s["mean_ttft_ms"] == pytest.approx(ttft_ms.mean(), rel=1e-9)
    assert s["p99_ttft_ms"] == pytest.approx(np.percentile(ttft_ms, 99), rel=1e-9)
    assert s["mean_itl_ms"] == pytest.approx(rec.gaps.mean() * 1000, rel=1e-9)
    assert s["p99_itl_ms"] == pytest.approx(np.percentile(rec.gaps, 99) * 1000, rel=1e-9)


def test_bench_serving_trailing_blank_lines_are_ignored() -> None:
    data = (SERVING / "sglang_bench_serving.jsonl").read_bytes() + b"\n\n  \n"
    assert parse_speed(data).n == 20


def test_bench_serving_cut_off_last_line_is_an_error_not_the_older_run() -> None:
    data = (SERVING / "sglang_bench_serving.jsonl").read_bytes().rstrip()
    with pytest.raises(RecordError, match="JSON Lines"):
        parse_speed(data[: len(data) - 500])


def test_bench_serving_e2els_are_used_when_present() -> None:
    last = _sglang_lines()[-1]
    last["e2els"] = [
        t + math.fsum(g) + 0.0042 if t else 0.0
        for t, g in zip(last["ttfts"], last["itls"], strict=True)
    ]
    rec = parse_speed(_dumps(last))
    ok = rec.success
    np.testing.assert_allclose(rec.cols["latency_s"][ok], np.array(last["e2els"])[ok])
    assert math.isnan(rec.cols["latency_s"][13])


# --- vLLM bench serve JSON -----------------------------------------------------------------


def test_vllm_latency_is_ttft_plus_the_inter_token_gaps() -> None:
    doc = _vllm_doc()
    rec = parse_speed((SERVING / "vllm_bench_serve.json").read_bytes())
    _assert_shapes(rec)
    assert rec.fmt == "vllm"
    assert rec.n == 20
    ok = [not e for e in doc["errors"]]
    expect = [
        t + math.fsum(g) if good else NAN
        for t, g, good in zip(doc["ttfts"], doc["itls"], ok, strict=True)
    ]
    np.testing.assert_allclose(rec.cols["latency_s"], expect, rtol=1e-12)
    # the file's own summary was computed from the same latencies
    lat_ms = rec.cols["latency_s"][rec.success] * 1000
    assert doc["mean_e2el_ms"] == pytest.approx(lat_ms.mean(), rel=1e-9)
    assert doc["p99_e2el_ms"] == pytest.approx(np.percentile(lat_ms, 99), rel=1e-9)


def test_vllm_latency_without_a_latencies_array() -> None:
    """Older `benchmark_serving.py` saved no per-request latency: ttft + Σ itls is it."""
    doc = {
        "duration": 2.0,
        "completed": 2,
        "failed": 1,
        "input_lens": [128, 256, 64],
        "output_lens": [4, 3, 0],
        "ttfts": [0.05, 0.25, 0.0],
        "itls": [[0.01, 0.02, 0.03], [0.5, 0.125], []],
        "generated_texts": [" a b c d", " e f g", ""],
        "errors": ["", "", "Bad Request"],
    }
    rec = parse_speed(_dumps(doc))
    np.testing.assert_allclose(rec.cols["latency_s"], [0.11, 0.875, NAN], rtol=1e-12)
    np.testing.assert_array_equal(rec.cols["inter_chunk_max_s"], [0.03, 0.5, NAN])
    np.testing.assert_array_equal(rec.cols["inter_chunk_min_s"], [0.01, 0.125, NAN])
    assert rec.errors == {"2": "Bad Request"}
    assert rec.duration_s == 2.0


def test_vllm_failed_request_and_summary() -> None:
    doc = _vllm_doc()
    rec = parse_speed((SERVING / "vllm_bench_serve.json").read_bytes())
    assert rec.errors == {"6": "Internal Server Error"}
    assert rec.success.sum() == doc["completed"] == 19
    assert (~rec.success).sum() == doc["failed"] == 1
    assert rec.duration_s == doc["duration"]
    assert rec.summary is not None
    assert rec.summary["request_rate"] == "inf"
    assert "latencies" not in rec.summary
    assert "ttfts" not in rec.summary
    assert rec.summary["request_throughput"] == pytest.approx(19 / doc["duration"], rel=1e-12)
    assert math.isnan(rec.cols["text_ttft_s"][6])
    np.testing.assert_array_equal(rec.cols["prompt_tokens"], doc["input_lens"])


def test_serving_gaps_pool_only_successful_requests() -> None:
    """A stream that broke mid-way keeps its partial gaps in `itls`; they are not pooled."""
    doc = {
        "duration": 1.0,
        "completed": 1,
        "failed": 1,
        "input_lens": [10, 10],
        "output_lens": [3, 0],
        "ttfts": [0.1, 0.2],
        "itls": [[0.01, 0.02], [0.7, 0.8]],
        "errors": ["", "ClientPayloadError: Response payload is not completed"],
    }
    rec = parse_speed(_dumps(doc))
    np.testing.assert_array_equal(rec.gaps, [0.01, 0.02])


def test_vllm_nan_in_the_summary_is_read() -> None:
    """json.dump writes NaN (e.g. a percentile over no requests); it is still the file."""
    doc = _vllm_doc()
    doc["std_ttft_ms"] = math.nan
    doc["p99_tpot_ms"] = math.inf
    rec = parse_speed(_dumps(doc))
    assert rec.summary is not None
    assert math.isnan(rec.summary["std_ttft_ms"])
    assert rec.n == 20


@pytest.mark.parametrize("key", ["input_lens", "output_lens", "itls", "errors", "e2els"])
def test_unequal_arrays_name_the_array(key: str) -> None:
    doc = _vllm_doc()
    doc.setdefault("e2els", list(doc["latencies"]))
    doc[key] = doc[key][:-1]
    with pytest.raises(RecordError, match=f"'{key}' has 19 entries"):
        parse_speed(_dumps(doc))


@pytest.mark.parametrize("key", ["input_lens", "itls", "errors"])
def test_an_array_that_is_not_a_list_is_named(key: str) -> None:
    doc = _vllm_doc()
    doc[key] = 20
    with pytest.raises(RecordError, match=f"'{key}'"):
        parse_speed(_dumps(doc))


@pytest.mark.parametrize(
    ("key", "index", "value"),
    [
        ("ttfts", 3, "0.061"),
        ("input_lens", 0, "399 tokens"),
        ("output_lens", 2, True),
        ("e2els", 1, {"s": 0.2}),
    ],
)
def test_non_number_in_an_array_names_the_field(key: str, index: int, value: object) -> None:
    doc = _vllm_doc()
    doc["e2els"] = list(doc["latencies"])
    doc[key][index] = value
    with pytest.raises(RecordError, match=f"'{key}'"):
        parse_speed(_dumps(doc))


@pytest.mark.parametrize("bad", ["0.007", "slow", [0.007]])
def test_non_number_among_itls_names_the_field(bad: object) -> None:
    doc = _vllm_doc()
    doc["itls"][0] = [*doc["itls"][0][:2], bad]
    with pytest.raises(RecordError, match="'itls'"):
        parse_speed(_dumps(doc))


def test_itls_row_that_is_not_a_list_is_named() -> None:
    doc = _vllm_doc()
    doc["itls"][4] = 0.0071
    with pytest.raises(RecordError, match="'itls'"):
        parse_speed(_dumps(doc))


# --- files that are not records -----------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "empty"),
        (b" \n\t\n", "empty"),
        (b"not json at all", "not JSON"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b'{"per_request": [', "not JSON"),
        (b"[1, 2, 3]", "JSON object"),
        (b'"speed_results"', "JSON object"),
        (b'{"summary": {"throughput_qps": 1.0}}', "unknown format"),
        # vLLM saved without --save-detailed: no per-request arrays to audit
        (b'{"duration": 10.0, "completed": 100, "failed": 0, "mean_ttft_ms": 40.1}', "unknown"),
    ],
)
def test_unreadable_input_is_a_record_error(data: bytes, match: str) -> None:
    with pytest.raises(RecordError, match=match):
        parse_speed(data)


# --- wer_results.json ---------------------------------------------------------------------


def test_parse_wer_real_sglang_omni_file() -> None:
    raw = (FIXTURES / "real" / "wer_results.en_5.json").read_bytes()
    doc = json.loads(raw)
    rec = parse_wer(raw)
    rows = doc["per_sample"]
    assert rec.ids == [r["id"] for r in rows]
    assert len(rec.ids) == 5
    assert rec.success.tolist() == [True] * 5
    np.testing.assert_array_equal(rec.wer, [r["wer"] for r in rows])
    np.testing.assert_array_equal(rec.ref_words, [8, 7, 16, 8, 11])
    np.testing.assert_array_equal(rec.errors_count, [0, 0, 0, 0, 0])
    assert rec.summary is not None
    assert rec.summary["wer_mean"] == 0.0
    assert rec.summary["published_wer_pct"] == 1.39


def test_parse_wer_counts_edits_and_failures() -> None:
    raw = (FIXTURES / "real" / "wer_results.en_5.json").read_bytes()
    doc = json.loads(raw)
    rows = doc["per_sample"]
    rows[0].update(wer=0.25, substitutions=1, deletions=0, insertions=1)
    rows[1].update(wer=None, is_success=False, error="ASR timeout", hyp_norm=None)
    for k in ("substitutions", "deletions", "insertions"):
        del rows[2][k]
    del rows[3]["insertions"]
    rows[3]["deletions"] = 2
    rec = parse_wer(_dumps(doc))
    assert rec.success.tolist() == [True, False, True, True, True]
    np.testing.assert_array_equal(rec.wer, [0.25, NAN, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(rec.errors_count, [2, 0, NAN, 2, 0])


def test_parse_wer_non_number_count_names_the_field() -> None:
    doc = json.loads((FIXTURES / "real" / "wer_results.en_5.json").read_bytes())
    doc["per_sample"][2]["deletions"] = "two"
    with pytest.raises(RecordError, match="'deletions'"):
        parse_wer(_dumps(doc))


@pytest.mark.parametrize(
    "data", [b"", b"nope", b"[]", b'{"per_sample": {}}', b'{"per_sample": [1]}']
)
def test_parse_wer_rejects_other_shapes(data: bytes) -> None:
    with pytest.raises(RecordError):
        parse_wer(data)


# --- server.json --------------------------------------------------------------------------

_SERVER = {
    "startup_s": 41.2,
    "peak_vram_mib": 61234,
    "gpu_samples": [
        {
            "t": 0.0,
            "sm_clock_mhz": 1980,
            "util_pct": 97,
            "mem_used_mib": 60100,
            "power_w": 612,
            "throttle_reasons": [],
        }
    ],
    "cpuset_busy_prelaunch": 0.0,
    "foreign_peak_cores": 0.07,
}


def test_parse_server_keeps_what_the_engine_reads() -> None:
    """Scalars and the warm-up's verdict; GPU samples (as many as a head likes: 2,000
    runs of 10,000 once held 9 GB) stay in the file."""
    doc = {
        **_SERVER,
        "note": "n" * 5000,
        "warmup": {"steady": False, "rates": list(range(50)), "passes": 3, "log": ["x"] * 9},
    }
    got = parse_server(_dumps(doc))
    assert got == {
        "startup_s": 41.2,
        "peak_vram_mib": 61234,
        "cpuset_busy_prelaunch": 0.0,
        "foreign_peak_cores": 0.07,
        "note": "n" * 500,
        "warmup": {"steady": False, "rates": list(range(8)), "passes": 3},
    }


def test_records_hold_ids_of_bounded_length() -> None:
    doc = _omni_doc()
    doc["per_request"][1]["id"] = "r" * 257
    with pytest.raises(RecordError, match=r"per_request\[1\] has an `id` longer than 256"):
        parse_speed(_dumps(doc))


@pytest.mark.parametrize("value", ["41.2", "41.2 s", True])
def test_parse_server_rejects_a_non_number_startup(value: object) -> None:
    doc = copy.deepcopy(_SERVER)
    doc["startup_s"] = value
    with pytest.raises(RecordError, match="'startup_s'"):
        parse_server(_dumps(doc))


@pytest.mark.parametrize("data", [b"", b"{", b"[41.2]"])
def test_parse_server_rejects_other_shapes(data: bytes) -> None:
    with pytest.raises(RecordError):
        parse_server(data)
