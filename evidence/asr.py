"""SGLang-Omni's ASR benchmark outputs, read into the same columns as a TTS run.

The ASR scripts keep per-request rows apart from their summary, so a run names two files
(docs/bundle.md: `files.speed` is the summary, `files.records` the rows):

- `benchmarks/eval/benchmark_asr_seedtts.py` (Qwen3-ASR, Whisper) writes a sweep JSON
  (`schema_version` 2: `provenance`, `config`, `results[]` with `per_repeat[]`) and, with
  `--save-raw-dir`, one JSON line per sample as `benchmarks/tasks/asr.py`'s
  `build_asr_eval_results` builds it: `id, is_success, wer, ref_text, hyp_text, ref_norm,
  hyp_norm, audio_duration_s, latency_s, text_ttft_s, inter_chunk_s, error`. Unrounded;
  `is_success` means transcribed *and* scored; a failed row keeps `SampleOutput`'s
  zeros, which are "not measured", not zero.
- `benchmarks/eval/benchmark_asr_transcribe_diarize.py` (MOSS-TD) writes its raw
  `RequestResult` rows (`transcribe_diarize_asr_results.json`, `outputs`), a speed
  summary (`transcribe_diarize_speed_results.json`: `config.wall_clock_s`, `speed` from
  `compute_speed_metrics`) and per-sample CER (`transcribe_diarize_results.json`).

Nothing is invented: an ASR request has no audio output, so audio TTFP, chunk counts and
tokens stay NaN (missing); `text_ttft_s` is the time to the first transcript delta of
an SSE stream, kept under its own name.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np
import orjson

from evidence.records import (
    _NUMERIC_TYPES,
    FIELDS,
    BeyondBounds,
    FloatArray,
    RecordError,
    RunRecords,
    WerRecords,
    _floats,
    _load_object,
    _loads,
    _ragged,
    _row_reduce,
    parse_speed,
    wer_records,
)

SEEDTTS = "asr-seedtts"
TRANSCRIBE_DIARIZE = "asr-transcribe-diarize"
ASR_FORMATS = (SEEDTTS, TRANSCRIBE_DIARIZE)


def _column(values: list[Any], name: str, where: Callable[[int], str]) -> FloatArray:
    """`_floats`, with the row at fault named."""
    try:
        return _floats(values, name)
    except BeyondBounds:
        raise
    except RecordError:
        i = next(i for i, v in enumerate(values) if type(v) not in _NUMERIC_TYPES)
        raise RecordError(
            f"{where(i)}: field {name!r} holds a non-number ({values[i]!r})", name
        ) from None


def _gaps(rows: list[dict[str, Any]], where: Callable[[int], str]) -> list[list[Any]]:
    out = []
    for i, r in enumerate(rows):
        g = r.get("inter_chunk_s")
        if g is None:
            g = []
        if not isinstance(g, list):
            raise RecordError(f"{where(i)}: field 'inter_chunk_s' must be a list", "inter_chunk_s")
        out.append(g)
    return out


def _ids(rows: list[dict[str, Any]], key: str, where: Callable[[int], str]) -> list[str]:
    ids = []
    for i, r in enumerate(rows):
        rid = r.get(key)
        if rid is None or rid == "":
            raise RecordError(f"{where(i)}: no `{key}`", key)
        ids.append(str(rid))
    return ids


def _unset(col: FloatArray, where: np.ndarray) -> FloatArray:
    """A dataclass default of 0 where the request never set the value: missing."""
    return np.where(where & (col == 0), np.nan, col)


def _records(
    fmt: str,
    rows: list[dict[str, Any]],
    ids: list[str],
    cols: dict[str, FloatArray],
    where: Callable[[int], str],
) -> RunRecords:
    success = np.array([r.get("is_success") is True for r in rows], dtype=np.bool_)
    nan = np.full(len(rows), np.nan)
    full = {name: cols.get(name, nan) for name in FIELDS}
    flat, lengths = _ragged(_gaps(rows, where), "inter_chunk_s")
    full["inter_chunk_max_s"] = _row_reduce(flat, lengths, np.maximum, np.nan)
    full["inter_chunk_min_s"] = _row_reduce(flat, lengths, np.minimum, np.nan)
    errors = {ids[i]: str(r.get("error") or "failed") for i, r in enumerate(rows) if not success[i]}
    return RunRecords(
        fmt=fmt,
        ids=ids,
        success=success,
        cols=full,
        gaps=flat[np.repeat(success, lengths)],
        lengths=lengths,
        errors=errors,
    )


# ----------------------------------------------------------- benchmark_asr_seedtts


def parse_seedtts_rows(data: bytes) -> tuple[RunRecords, WerRecords]:
    """One `--save-raw-dir` JSONL file: the run's requests and its per-sample WER.

    RTF is `latency_s / audio_duration_s` of a scored sample, as the script computes it
    (the rows do not carry it); edits are `wer × reference words` (jiwer's definition),
    which gives the corpus WER the script reports.
    """
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    for n, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = _loads(line)
        except orjson.JSONDecodeError as exc:
            raise RecordError(f"line {n}: not JSON ({exc})") from exc
        if not isinstance(row, dict):
            raise RecordError(f"line {n}: expected a JSON object")
        rows.append(row)
        lines.append(n)
    if not rows:
        raise RecordError("no rows")

    def where(i: int) -> str:
        return f"line {lines[i]}"

    ids = _ids(rows, "id", where)
    scored = np.array([r.get("is_success") is True for r in rows], dtype=np.bool_)
    cols = {
        k: _unset(_column([r.get(k) for r in rows], k, where), ~scored)
        for k in ("latency_s", "audio_duration_s")
    }
    cols["text_ttft_s"] = _column([r.get("text_ttft_s") for r in rows], "text_ttft_s", where)
    lat, audio = cols["latency_s"], cols["audio_duration_s"]
    with np.errstate(divide="ignore", invalid="ignore"):
        cols["rtf"] = np.where(scored & (audio > 0), lat / audio, np.nan)
    rec = _records(SEEDTTS, rows, ids, cols, where)

    wer = np.where(scored, _column([r.get("wer") for r in rows], "wer", where), np.nan)
    words = np.array(
        [
            len(r["ref_norm"].split()) if isinstance(r.get("ref_norm"), str) else np.nan
            for r in rows
        ],
        dtype=np.float64,
    )
    edits = np.rint(wer * words)
    exact = np.abs(wer * words - edits) <= 1e-6 * np.maximum(1.0, words)
    edits = np.where(exact, edits, np.nan)
    return rec, WerRecords(ids, scored, wer, words, edits, summary=None)


# ------------------------------------------------------ benchmark_asr_transcribe_diarize


def parse_td_outputs(data: bytes) -> RunRecords:
    """`transcribe_diarize_asr_results.json`: `outputs` are `asdict(RequestResult)`.

    The dataclass's zero defaults (`rtf`, `audio_duration_s`, token counts, chunk count,
    `engine_time_s`) mean "not set"; `latency_s` is set for every request that was sent.
    """
    doc = _load_object(data)
    rows = doc.get("outputs")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise RecordError("`outputs` must be a list of objects", "outputs")
    if not rows:
        raise RecordError("`outputs` is empty", "outputs")

    def where(i: int) -> str:
        return f"outputs[{i}]"

    ids = _ids(rows, "request_id", where)
    ok = np.array([r.get("is_success") is True for r in rows], dtype=np.bool_)
    every = np.ones(len(rows), dtype=np.bool_)

    def col(key: str) -> FloatArray:
        return _column([r.get(key) for r in rows], key, where)

    engine_key = "engine_latency_s" if any("engine_latency_s" in r for r in rows) else None
    cols = {
        "latency_s": _unset(col("latency_s"), ~ok),
        "audio_duration_s": _unset(col("audio_duration_s"), every),
        "rtf": _unset(col("rtf"), every),
        "prompt_tokens": _unset(col("prompt_tokens"), every),
        "completion_tokens": _unset(col("completion_tokens"), every),
        "engine_latency_s": col(engine_key) if engine_key else _unset(col("engine_time_s"), every),
        "audio_ttfp_s": col("audio_ttfp_s"),
        "text_ttft_s": col("text_ttft_s"),
        "audio_chunk_count": _unset(col("audio_chunk_count"), every),
    }
    return _records(TRANSCRIBE_DIARIZE, rows, ids, cols, where)


def parse_td_accuracy(doc: dict[str, Any]) -> WerRecords:
    """`transcribe_diarize_results.json` `per_sample`: `cer_no_spk` where `cer_valid`.

    The rows carry no character counts, so the corpus CER cannot be recomputed."""
    rows = doc.get("per_sample")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise RecordError("expected `per_sample` rows", "per_sample")

    def where(i: int) -> str:
        return f"per_sample[{i}]"

    ids = _ids(rows, "id", where)
    valid = np.array([r.get("cer_valid") is True for r in rows], dtype=np.bool_)
    cer = np.where(valid, _column([r.get("cer_no_spk") for r in rows], "cer_no_spk", where), np.nan)
    nan = np.full(len(rows), np.nan)
    summary = doc.get("summary")
    total = summary.get("total_samples") if isinstance(summary, dict) else None
    # Only the sample count is comparable: `evaluated` counts transcribed requests,
    # which may include samples whose reference is empty after cleaning (not scored).
    return WerRecords(
        ids, valid, cer, nan, nan.copy(), {"total_samples": total} if total else None, "cer"
    )


def _names_cer(rows: list[Any]) -> bool:
    """Whether any row is an object with MOSS-TD's `cer_no_spk`."""
    if set(map(type, rows)) <= {dict}:
        return any(map(operator.contains, rows, repeat("cer_no_spk")))
    return any(isinstance(r, dict) and "cer_no_spk" in r for r in rows)


def parse_accuracy(data: bytes) -> WerRecords:
    """An accuracy file: SGLang-Omni's `wer_results.json`, or MOSS-TD's CER rows."""
    doc = _load_object(data)
    rows = doc.get("per_sample")
    if isinstance(rows, list) and _names_cer(rows):
        return parse_td_accuracy(doc)
    return wer_records(doc)


# ------------------------------------------------------------------- the summaries


@dataclass
class RunSummary:
    """The benchmark's own aggregates for one run, when the rows are in another file."""

    fmt: str
    by_concurrency: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    speed: dict[str, Any] | None = None
    wall_clock_s: float | None = None

    def pick(self, concurrency: int) -> tuple[dict[str, Any] | None, float | None]:
        """(summary, wall clock) of the run at `concurrency`; the sweep must hold exactly
        one repeat there, as the runner asks (`--concurrencies C --repeats 1`)."""
        if self.fmt == TRANSCRIBE_DIARIZE:
            return self.speed, self.wall_clock_s
        reps = self.by_concurrency.get(concurrency, [])
        if len(reps) != 1:
            return None, None
        return reps[0], _positive(reps[0].get("wall_clock_s"))


def _positive(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if 0 < v < float("inf") else None


def parse_summary(data: bytes) -> RunSummary:
    """The summary file of a run whose rows are elsewhere: the ASR sweep JSON, or
    MOSS-TD's speed JSON."""
    doc = _load_object(data)
    if isinstance(doc.get("results"), list):
        out = RunSummary(SEEDTTS)
        for i, res in enumerate(doc["results"]):
            if not isinstance(res, dict) or not isinstance(res.get("per_repeat"), list):
                raise RecordError(f"results[{i}] has no `per_repeat` list", "per_repeat")
            conc = res.get("concurrency")
            if isinstance(conc, bool) or not isinstance(conc, int):
                raise RecordError(f"results[{i}].concurrency must be an integer", "concurrency")
            reps = res["per_repeat"]
            if not all(isinstance(r, dict) for r in reps):
                raise RecordError(f"results[{i}].per_repeat must hold objects", "per_repeat")
            out.by_concurrency.setdefault(conc, []).extend(reps)
        return out
    if isinstance(doc.get("speed"), dict):
        config = doc.get("config")
        wall = _positive(config.get("wall_clock_s")) if isinstance(config, dict) else None
        return RunSummary(TRANSCRIBE_DIARIZE, speed=doc["speed"], wall_clock_s=wall)
    raise RecordError(
        "unknown summary: no `results` (benchmark_asr_seedtts) and no `speed` "
        "(benchmark_asr_transcribe_diarize)"
    )


def _looks_like_seedtts_rows(text: bytes) -> bool:
    """JSON Lines whose first readable line is a scored sample (`id` and `wer`)."""
    for line in text.splitlines()[:5]:
        try:
            row = _loads(line)
        except orjson.JSONDecodeError:
            continue
        return isinstance(row, dict) and "id" in row and ("wer" in row or "hyp_text" in row)
    return False


def parse_records(data: bytes) -> tuple[RunRecords, WerRecords | None]:
    """A run's per-request rows, whichever benchmark wrote them; with the per-sample WER
    when the rows carry it (benchmark_asr_seedtts)."""
    text = data.strip()
    if not text:
        raise RecordError("empty file")
    if _looks_like_seedtts_rows(text):
        return parse_seedtts_rows(text)
    try:
        doc = _loads(text)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and "outputs" in doc:
        return parse_td_outputs(text), None
    return parse_speed(text), None
