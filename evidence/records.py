"""Per-request records of one run, read column by column from the benchmark's own file.

Formats: SGLang-Omni `speed_results.json` (`per_request` rows), SGLang `bench_serving`
JSONL and vLLM `bench serve --save-detailed` JSON (parallel arrays). Rows are turned into
NumPy columns at once and the parsed JSON is dropped, so a million requests fit in memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# Per-request numeric fields read as they are (NaN where not reported) ...
FIELDS: tuple[str, ...] = (
    "latency_s",
    "engine_latency_s",
    "audio_duration_s",
    "rtf",
    "audio_ttfp_s",
    "text_ttft_s",
    "prompt_tokens",
    "completion_tokens",
    "audio_chunk_count",
)
# ... and derived from each request's list of inter-chunk gaps: every format has these.
COLUMNS: tuple[str, ...] = (*FIELDS, "inter_chunk_max_s", "inter_chunk_min_s")


class RecordError(ValueError):
    """A file that parsed but does not hold records of a known shape; `field` names the
    field at fault when one is."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class BeyondBounds(RecordError):
    """JSON nested too deeply, or a number no measurement can be (NaN or infinity where
    a request's figure belongs): the bundle is refused, not just this run."""


# orjson's own nesting limit; the standard library's reader is held to it as well.
JSON_DEPTH = 1024


@dataclass
class RunRecords:
    fmt: str
    ids: list[str]
    success: BoolArray
    cols: dict[str, FloatArray]
    gaps: FloatArray  # inter-chunk gaps of successful requests, pooled as SGLang-Omni does
    errors: dict[str, str] = field(default_factory=dict)  # id -> error of failed requests
    summary: dict[str, Any] | None = None
    duration_s: float | None = None  # the client's own wall clock, when the file has one

    @property
    def n(self) -> int:
        return len(self.ids)

    def unreported(self) -> list[str]:
        """The FIELDS no request of this run reports: missing from the data, not zero."""
        return [f for f in FIELDS if not np.isfinite(self.cols[f]).any()]


_NUMERIC_TYPES = frozenset({int, float, type(None)})


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _floats(values: list[Any], name: str) -> FloatArray:
    """Numbers and nulls (NaN) only: no strings, booleans or nested lists, which NumPy
    would otherwise coerce ("1.5" -> 1.5, true -> 1.0) or turn into a second axis."""
    if not set(map(type, values)) <= _NUMERIC_TYPES:  # JSON decoders give exact types
        bad = next(v for v in values if type(v) not in _NUMERIC_TYPES)
        raise RecordError(f"field {name!r} holds a non-number ({bad!r})", name)
    out = np.array(values, dtype=np.float64)  # None -> NaN
    # A NaN or Infinity literal (the standard library reads them) is no measurement;
    # null is "not reported" and stays NaN.
    if np.isinf(out).any() or int(np.isnan(out).sum()) != values.count(None):
        bad = next(v for v in values if v is not None and not np.isfinite(v))
        raise BeyondBounds(f"field {name!r} holds {bad!r}, which no measurement is", name)
    return out


def _loads(data: bytes) -> Any:
    """JSON as the benchmarks write it. Their `json.dumps` writes `Infinity` and `NaN`
    (SGLang's default `request_rate` is `inf`; a run with no successes has NaN means),
    which orjson rejects, so such a document is read again by the standard library."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc) or "recursion" in str(exc):
            raise BeyondBounds(f"JSON nested deeper than {JSON_DEPTH} levels") from None
        try:
            return json.loads(data)
        except RecursionError:
            raise BeyondBounds(f"JSON nested deeper than {JSON_DEPTH} levels") from None
        except ValueError:  # JSONDecodeError, or bytes that are not UTF-8/16/32
            raise exc from None


def _ragged(lists: list[Any], name: str) -> tuple[FloatArray, npt.NDArray[np.intp]]:
    """Per-request lists of numbers (`itls`, `inter_chunk_s`) as one flat array plus each
    request's length, so that per-request sums and extremes need no Python loop."""
    if any(not isinstance(x, list) for x in lists):
        raise RecordError(f"field {name!r} must be a list in every request", name)
    lengths = np.fromiter((len(x) for x in lists), dtype=np.intp, count=len(lists))
    return _floats([g for x in lists for g in x], name), lengths


def _row_reduce(
    flat: FloatArray, lengths: npt.NDArray[np.intp], op: np.ufunc, empty: float
) -> FloatArray:
    """`op` over each request's slice of `flat`; `empty` for a request with no values."""
    out = np.full(len(lengths), empty, dtype=np.float64)
    nonempty = lengths > 0
    if nonempty.any():
        starts = np.cumsum(lengths) - lengths
        out[nonempty] = op.reduceat(flat, starts[nonempty])
    return out


def parse_speed(data: bytes) -> RunRecords:
    """Parse any supported benchmark output into columns."""
    text = data.strip()
    if not text:
        raise RecordError("empty file")
    try:
        doc = _loads(text)
    except orjson.JSONDecodeError:
        doc = _last_jsonl(text)
    if not isinstance(doc, dict):
        raise RecordError("expected a JSON object")
    if "per_request" in doc:
        return _sglang_omni(doc)
    if "ttfts" in doc and ("input_lens" in doc or "output_lens" in doc):
        return _serving_arrays(doc)
    raise RecordError("unknown format: no `per_request` rows and no `ttfts` arrays")


def _last_jsonl(text: bytes) -> Any:
    """`bench_serving` appends one JSON line per run; the run is the last complete line."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    try:
        return _loads(lines[-1])
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"not JSON or JSON Lines ({exc})") from exc


def _sglang_omni(doc: dict[str, Any]) -> RunRecords:
    rows = doc["per_request"]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise RecordError("`per_request` must be a list of objects")
    ids: list[str] = []
    for i, r in enumerate(rows):
        rid = r.get("id")
        if rid is None or rid == "":
            raise RecordError(f"per_request[{i}] has no `id`")
        ids.append(str(rid))
    success = np.array([r.get("is_success") is True for r in rows], dtype=np.bool_)
    cols: dict[str, FloatArray] = {}
    for name in FIELDS:
        cols[name] = _floats([r.get(name) for r in rows], name)
    flat, lengths = _ragged([r.get("inter_chunk_s") or [] for r in rows], "inter_chunk_s")
    cols["inter_chunk_max_s"] = _row_reduce(flat, lengths, np.maximum, np.nan)
    cols["inter_chunk_min_s"] = _row_reduce(flat, lengths, np.minimum, np.nan)
    # A streamed request with gaps but no count still has len(gaps) + 1 chunks.
    derived = np.where(lengths > 0, lengths + 1.0, np.nan)
    cols["audio_chunk_count"] = np.where(
        np.isnan(cols["audio_chunk_count"]), derived, cols["audio_chunk_count"]
    )
    gaps = flat[np.repeat(success, lengths)]
    errors = {ids[i]: str(r.get("error") or "failed") for i, r in enumerate(rows) if not success[i]}
    summary = doc.get("summary")
    return RunRecords(
        fmt="sglang-omni",
        ids=ids,
        success=success,
        cols=cols,
        gaps=gaps,
        errors=errors,
        summary=summary if isinstance(summary, dict) else None,
    )


def _serving_arrays(doc: dict[str, Any]) -> RunRecords:
    """SGLang `bench_serving --output-details` and vLLM `--save-detailed`: index = request."""
    ttfts = doc.get("ttfts") or []
    if not isinstance(ttfts, list):
        raise RecordError("array 'ttfts' must be a list")
    n = len(ttfts)
    for key in ("input_lens", "output_lens", "itls", "errors", "e2els", "latencies"):
        arr = doc.get(key)
        if arr is None:
            continue
        if not isinstance(arr, list):
            raise RecordError(f"array {key!r} must be a list")
        if len(arr) != n:
            raise RecordError(f"array {key!r} has {len(arr)} entries, `ttfts` has {n}")
    errors_arr = doc.get("errors") or [""] * n
    success = np.array([not e for e in errors_arr], dtype=np.bool_)
    flat, lengths = _ragged(doc.get("itls") or [[] for _ in range(n)], "itls")
    ttft = _floats(ttfts, "ttfts")
    # The client's own per-request latency when it saved one (SGLang `e2els`, vLLM
    # `latencies`, which include the final usage chunk); else ttft + the gaps, as older
    # vLLM computed its e2el.
    own = next((k for k in ("e2els", "latencies") if doc.get(k)), None)
    if own is not None:
        latency = _floats(doc[own], own)
    else:
        latency = ttft + _row_reduce(flat, lengths, np.add, 0.0)
    latency = np.where(success, latency, np.nan)
    nan = np.full(n, np.nan)
    cols: dict[str, FloatArray] = {
        "latency_s": latency,
        "engine_latency_s": nan,
        "audio_duration_s": nan,
        "rtf": nan,
        "audio_ttfp_s": nan,
        "text_ttft_s": np.where(success, ttft, np.nan),
        "prompt_tokens": _floats(doc.get("input_lens") or [None] * n, "input_lens"),
        "completion_tokens": _floats(doc.get("output_lens") or [None] * n, "output_lens"),
        "audio_chunk_count": nan,
        "inter_chunk_max_s": _row_reduce(flat, lengths, np.maximum, np.nan),
        "inter_chunk_min_s": _row_reduce(flat, lengths, np.minimum, np.nan),
    }
    gaps = flat[np.repeat(success, lengths)]
    ids = [str(i) for i in range(n)]
    summary = {k: v for k, v in doc.items() if not isinstance(v, list)}
    duration = doc.get("duration")
    return RunRecords(
        fmt="vllm" if "failed" in doc else "sglang-bench-serving",
        ids=ids,
        success=success,
        cols=cols,
        gaps=gaps,
        errors={ids[i]: str(e) for i, e in enumerate(errors_arr) if e},
        summary=summary,
        duration_s=float(duration) if isinstance(duration, int | float) else None,
    )


@dataclass
class WerRecords:
    """Per-sample accuracy. `wer` holds each sample's error rate: word error rate, or
    character error rate when `measure` is "cer" (MOSS-TD); `ref_words` and
    `errors_count` are NaN where the file does not let them be known."""

    ids: list[str]
    success: BoolArray
    wer: FloatArray
    ref_words: FloatArray
    errors_count: FloatArray
    summary: dict[str, Any] | None
    measure: str = "wer"

    def scored(self) -> set[str]:
        """The samples this file scored: transcribed, with a finite rate."""
        ok = self.success & np.isfinite(self.wer)
        return {i for i, x in zip(self.ids, ok.tolist(), strict=True) if x}

    def restrict(self, keep: set[str]) -> WerRecords:
        """The same file over the samples in `keep` only."""
        sel = np.fromiter((i in keep for i in self.ids), dtype=np.bool_, count=len(self.ids))
        return WerRecords(
            [i for i, x in zip(self.ids, sel.tolist(), strict=True) if x],
            self.success[sel],
            self.wer[sel],
            self.ref_words[sel],
            self.errors_count[sel],
            self.summary,
            self.measure,
        )

    def corpus(self) -> float | None:
        """Σ edits / Σ reference words over the scored samples, as SGLang-Omni's
        `wer_corpus`. None (missing) unless every scored sample has both counts and
        they agree with its own `wer` (to its 4-decimal rounding): counts that contradict
        the rates cannot both be the file's truth."""
        ok = self.success & np.isfinite(self.wer)
        words, errs = self.ref_words[ok], self.errors_count[ok]
        if not ok.any() or not (np.isfinite(words).all() and np.isfinite(errs).all()):
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            rates = np.where(words > 0, errs / words, np.nan)
        if not np.all(np.abs(rates - self.wer[ok]) <= 5e-5 + 1e-9):
            return None
        total = float(words.sum())
        return float(errs.sum()) / total if total > 0 else None


def parse_wer(data: bytes) -> WerRecords:
    """SGLang-Omni's `wer_results.json` (`per_sample` rows with `wer`)."""
    return wer_records(_load_object(data))


def wer_records(doc: dict[str, Any]) -> WerRecords:
    """`parse_wer` of a document already parsed."""
    rows = doc.get("per_sample")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise RecordError("expected `per_sample` rows")
    ids = [str(r.get("id")) for r in rows]
    success = np.array([r.get("is_success", True) is True for r in rows], dtype=np.bool_)
    wer = _floats([r.get("wer") for r in rows], "wer")
    ref_words = _floats(
        [len(str(r["ref_norm"]).split()) if r.get("ref_norm") is not None else None for r in rows],
        "ref_norm",
    )
    # Edit counts: a row with any of the three has their sum (a missing one counts 0).
    kinds = ("substitutions", "deletions", "insertions")
    counts = [_floats([r.get(k) for r in rows], k) for k in kinds]
    has_any = np.array([any(k in r for k in kinds) for r in rows], dtype=np.bool_)
    errs = np.where(has_any, sum(np.nan_to_num(c) for c in counts), np.nan)
    summary = doc.get("summary")
    return WerRecords(
        ids, success, wer, ref_words, errs, summary if isinstance(summary, dict) else None
    )


def parse_server(data: bytes) -> dict[str, Any]:
    """The runner's `server.json`; only its shape is checked here."""
    doc = _load_object(data)
    for key in ("startup_s", "peak_vram_mib", "cpuset_busy_prelaunch", "foreign_peak_cores"):
        v = doc.get(key)
        if v is not None and not _is_number(v):
            raise RecordError(f"field {key!r} must be a number")
    return doc


def _load_object(data: bytes) -> dict[str, Any]:
    try:
        doc = _loads(data)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise RecordError("expected a JSON object")
    return doc
