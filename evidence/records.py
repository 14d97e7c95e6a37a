"""Per-request records of one run, read column by column from the benchmark's own file.

Formats: SGLang-Omni `speed_results.json` (`per_request` rows), SGLang `bench_serving`
JSONL and vLLM `bench serve --save-detailed` JSON (parallel arrays). Rows are turned into
NumPy columns at once and the parsed JSON is dropped, so a million requests fit in memory.
"""

from __future__ import annotations

import gc
import json
import operator
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import chain, compress, repeat
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
# Formats of parallel arrays, whose per-request lists of gaps are `itls`.
SERVING_FORMATS = frozenset({"vllm", "sglang-bench-serving"})

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
# A request's id names it in the audit and across files; a longer one is no id a client
# writes, and 2,000 runs of 30 KB ids held 2 GB. An error is kept as its first words.
MAX_ID_CHARS = 256
MAX_ERROR_CHARS = 500
# What a request holds besides its numbers (its id's string, its flags and counts), as
# values of 8 bytes: 4 million requests of 11 figures (44 million values) once held
# 1.5 GB, about 390 bytes a request; counted so, the values bound stops them before
# 1 GiB while a million requests of real shape still fit.
REQUEST_VALUES = 16


@dataclass
class RunRecords:
    fmt: str
    ids: list[str]
    success: BoolArray
    cols: dict[str, FloatArray]
    # Inter-chunk gaps of successful requests, pooled as SGLang-Omni does; empty once
    # the loader has taken the run's p95 from them (`without_gaps`).
    gaps: FloatArray
    lengths: IntArray  # each request's count of gaps (the entries of its list)
    errors: dict[str, str] = field(default_factory=dict)  # id -> error of failed requests
    summary: dict[str, Any] | None = None
    duration_s: float | None = None  # the client's own wall clock, when the file has one

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def list_field(self) -> str:
        """The name of each request's list of gaps in this format."""
        return "itls" if self.fmt in SERVING_FORMATS else "inter_chunk_s"

    @property
    def values(self) -> int:
        """The per-request numbers the file gave: each request's figures and every entry
        of its list of gaps (the failed requests' too), and `REQUEST_VALUES` a request for
        what it holds besides."""
        return self.n * (len(self.cols) + REQUEST_VALUES) + int(self.lengths.sum())

    def without_gaps(self) -> RunRecords:
        """These records less the pooled gaps. They serve only the run's inter-chunk p95
        (`rounds.run_metrics`); dropped once it is taken, a bundle's memory grows with its
        requests, not with the chunks a head chose to stream."""
        return replace(self, gaps=np.empty(0))

    def unreported(self) -> list[str]:
        """The FIELDS no request of this run reports: missing from the data, not zero."""
        return [f for f in FIELDS if not np.isfinite(self.cols[f]).any()]


_NUMERIC_TYPES = frozenset({int, float, type(None)})
_NONE = type(None)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _column(rows: list[dict[str, Any]], key: str, default: Any = None) -> tuple[list[Any], bool]:
    """`[r.get(key, default) for r in rows]` at C speed, and whether every row has `key`."""
    try:
        return list(map(operator.itemgetter(key), rows)), True
    except KeyError:
        return [r.get(key, default) for r in rows], False


def _columns(
    rows: list[dict[str, Any]], keys: tuple[str, ...], defaults: dict[str, Any] | None = None
) -> tuple[dict[str, Sequence[Any]], bool]:
    """`_column` of each key, read in one pass over the rows while each is in the CPU's
    cache (a pass per key costs twice as much on a freshly parsed file), and whether
    every row has every key."""
    if len(keys) > 1 and rows:
        try:
            per_row = list(map(operator.itemgetter(*keys), rows))
        except KeyError:
            pass
        else:
            return dict(zip(keys, zip(*per_row, strict=True), strict=True)), True
    got = {k: _column(rows, k, (defaults or {}).get(k)) for k in keys}
    return {k: v for k, (v, _) in got.items()}, all(every for _, every in got.values())


def _all_dicts(rows: Sequence[Any]) -> bool:
    if set(map(type, rows)) <= {dict}:  # what JSON decoders give
        return True
    return all(isinstance(r, dict) for r in rows)


def _floats(values: Sequence[Any], name: str) -> FloatArray:
    """Numbers and nulls (NaN) only: no strings, booleans or nested lists, which NumPy
    would otherwise coerce ("1.5" -> 1.5, true -> 1.0) or turn into a second axis."""
    types = set(map(type, values))
    if not types <= _NUMERIC_TYPES:  # JSON decoders give exact types
        bad = next(v for v in values if type(v) not in _NUMERIC_TYPES)
        raise RecordError(f"field {name!r} holds a non-number ({bad!r})", name)
    if types == {float}:
        out = np.fromiter(values, dtype=np.float64, count=len(values))
    elif types == {_NONE}:  # a field this benchmark does not report
        out = np.full(len(values), np.nan)
    else:
        try:
            out = np.array(values, dtype=np.float64)  # None -> NaN
        except OverflowError:  # an integer of hundreds of digits
            raise BeyondBounds(
                f"field {name!r} holds a number too large for a measurement", name
            ) from None
    # A NaN or Infinity literal (the standard library reads them) is no measurement;
    # null is "not reported" and stays NaN.
    nones = 0 if _NONE not in types else len(values) if types == {_NONE} else values.count(None)
    if np.isinf(out).any() or int(np.isnan(out).sum()) != nones:
        bad = next(v for v in values if v is not None and not np.isfinite(v))
        raise BeyondBounds(f"field {name!r} holds {bad!r}, which no measurement is", name)
    return out


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic garbage collection while a file is parsed into columns. A parsed
    document is a tree (no cycles to find), but its hundreds of thousands of new objects
    would trigger collections that traverse every object of the process, a third of the
    time orjson itself takes. Collection resumes (and catches up) afterwards; when it was
    already off, it is left off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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
            doc = json.loads(data)
        except RecursionError:
            raise BeyondBounds(f"JSON nested deeper than {JSON_DEPTH} levels") from None
        except ValueError:  # JSONDecodeError, or bytes that are not UTF-8/16/32
            raise exc from None
        # The standard library keeps an escaped lone surrogate ("\\ud800"), which no
        # output can encode: it becomes U+FFFD, as undecodable bytes would.
        return _whole_text(doc) if _SURROGATE_ESCAPE.search(data) else doc


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _scalars(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary whose numbers a float can hold: an integer of hundreds of digits (which
    Python's JSON reader takes) is refused naming its field, not met later as a crash."""
    for k, v in summary.items():
        if type(v) is int and not -(2**1023) < v < 2**1023:
            raise BeyondBounds(f"summary field {k!r} holds a number too large for a measurement", k)
    return summary


def _whole_text(x: Any) -> Any:
    """`x` with every lone surrogate in its strings (keys too) replaced by U+FFFD."""
    if isinstance(x, str):
        return _SURROGATE.sub("\ufffd", x)
    if isinstance(x, list):
        return [_whole_text(v) for v in x]
    if isinstance(x, dict):
        return {_whole_text(k): _whole_text(v) for k, v in x.items()}
    return x


def _ragged(lists: list[Any], name: str) -> tuple[FloatArray, IntArray]:
    """Per-request lists of numbers (`itls`, `inter_chunk_s`) as one flat array plus each
    request's length, so that per-request sums and extremes need no Python loop."""
    if set(map(type, lists)) != {list} and any(not isinstance(x, list) for x in lists):
        raise RecordError(f"field {name!r} must be a list in every request", name)
    lengths = np.fromiter(map(len, lists), dtype=np.intp, count=len(lists))
    return _floats(list(chain.from_iterable(lists)), name), lengths


def _is_true(values: Sequence[Any]) -> BoolArray:
    """`v is True` for each value (1 and "true" are not true)."""
    return np.fromiter(map(operator.is_, values, repeat(True)), dtype=np.bool_, count=len(values))


def _row_reduce(flat: FloatArray, lengths: IntArray, op: np.ufunc, empty: float) -> FloatArray:
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


def _ids(raw: Sequence[Any], where: str) -> list[str]:
    """Request ids as strings, each at most `MAX_ID_CHARS` long."""
    ids = list(map(str, raw))
    if ids and max(map(len, ids)) > MAX_ID_CHARS:
        i = next(i for i, rid in enumerate(ids) if len(rid) > MAX_ID_CHARS)
        raise RecordError(f"{where}[{i}] has an `id` longer than {MAX_ID_CHARS} characters")
    return ids


def _error(value: Any) -> str:
    return str(value)[:MAX_ERROR_CHARS]


def _sglang_omni(doc: dict[str, Any]) -> RunRecords:
    rows = doc["per_request"]
    if not isinstance(rows, list) or not _all_dicts(rows):
        raise RecordError("`per_request` must be a list of objects")
    got, _ = _columns(rows, ("id", "is_success", *FIELDS, "inter_chunk_s"))
    raw_ids = got["id"]
    if None in raw_ids or "" in raw_ids:
        i = next(i for i, rid in enumerate(raw_ids) if rid is None or rid == "")
        raise RecordError(f"per_request[{i}] has no `id`")
    ids = _ids(raw_ids, "per_request")
    success = _is_true(got["is_success"])
    cols: dict[str, FloatArray] = {}
    for name in FIELDS:
        cols[name] = _floats(got[name], name)
    no_gaps: list[Any] = []  # one empty list for every request without gaps
    flat, lengths = _ragged([g or no_gaps for g in got["inter_chunk_s"]], "inter_chunk_s")
    cols["inter_chunk_max_s"] = _row_reduce(flat, lengths, np.maximum, np.nan)
    cols["inter_chunk_min_s"] = _row_reduce(flat, lengths, np.minimum, np.nan)
    # A streamed request with gaps but no count still has len(gaps) + 1 chunks.
    derived = np.where(lengths > 0, lengths + 1.0, np.nan)
    cols["audio_chunk_count"] = np.where(
        np.isnan(cols["audio_chunk_count"]), derived, cols["audio_chunk_count"]
    )
    gaps = flat[np.repeat(success, lengths)]
    errors = {
        ids[i]: _error(rows[i].get("error") or "failed") for i in np.flatnonzero(~success).tolist()
    }
    summary = doc.get("summary")
    return RunRecords(
        fmt="sglang-omni",
        ids=ids,
        success=success,
        cols=cols,
        gaps=gaps,
        lengths=lengths,
        errors=errors,
        summary=_scalars(summary) if isinstance(summary, dict) else None,
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
        lengths=lengths,
        errors={ids[i]: _error(e) for i, e in enumerate(errors_arr) if e},
        summary=_scalars(summary),
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

    @property
    def values(self) -> int:
        """The per-sample numbers held: rate, reference words and edits of each, and
        half of `REQUEST_VALUES` for what a sample holds besides (an id, a flag)."""
        return len(self.ids) * (3 + REQUEST_VALUES // 2)

    def scored(self) -> set[str]:
        """The samples this file scored: transcribed, with a finite rate."""
        ok = self.success & np.isfinite(self.wer)
        return set(compress(self.ids, ok.tolist()))

    def restrict(self, keep: set[str]) -> WerRecords:
        """The same file over the samples in `keep` only."""
        sel = np.fromiter(map(keep.__contains__, self.ids), dtype=np.bool_, count=len(self.ids))
        return WerRecords(
            list(compress(self.ids, sel.tolist())),
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
    if not isinstance(rows, list) or not _all_dicts(rows):
        raise RecordError("expected `per_sample` rows")
    kinds = ("substitutions", "deletions", "insertions")
    got, everywhere = _columns(
        rows, ("id", "is_success", "wer", "ref_norm", *kinds), {"is_success": True}
    )
    ids = _ids(got["id"], "per_sample")
    success = _is_true(got["is_success"])
    wer = _floats(got["wer"], "wer")
    refs = got["ref_norm"]
    words: Sequence[int | None]
    if set(map(type, refs)) <= {str}:
        words = list(map(len, map(str.split, refs)))
    else:
        words = [len(str(x).split()) if x is not None else None for x in refs]
    ref_words = _floats(words, "ref_norm")
    # Edit counts: a row with any of the three has their sum (a missing one counts 0).
    counts = [_floats(got[k], k) for k in kinds]
    if everywhere:
        has_any = np.ones(len(rows), dtype=np.bool_)
    else:
        has_any = np.zeros(len(rows), dtype=np.bool_)
        for k in kinds:
            has_any |= np.fromiter(
                map(operator.contains, rows, repeat(k)), dtype=np.bool_, count=len(rows)
            )
    errs = np.where(has_any, sum(np.nan_to_num(c) for c in counts), np.nan)
    summary = doc.get("summary")
    return WerRecords(
        ids, success, wer, ref_words, errs, _scalars(summary) if isinstance(summary, dict) else None
    )


def parse_server(data: bytes) -> dict[str, Any]:
    """The runner's `server.json`, as much of it as the engine reads: its scalar fields
    (a string's first `MAX_ERROR_CHARS` characters) and the warm-up's (its first 8
    rates). The rest (GPU samples, which a head can make as many as it likes) is left in
    the file, so a run costs the same memory whatever the file holds."""
    doc = _bounded_server(_load_object(data))
    for key in (
        "startup_s",
        "peak_vram_mib",
        "cpuset_busy_prelaunch",
        "foreign_peak_cores",
        "host_cpu_ms",
    ):
        v = doc.get(key)
        if v is not None and not _is_number(v):
            raise RecordError(f"field {key!r} must be a number")
    return doc


def _scalar_items(doc: dict[str, Any]) -> dict[str, Any]:
    """The first 200 scalar fields of `doc`, strings cut to `MAX_ERROR_CHARS`."""
    out: dict[str, Any] = {}
    for key, v in doc.items():
        if len(out) >= 200:
            break
        if isinstance(v, str):
            out[str(key)[:MAX_ERROR_CHARS]] = v[:MAX_ERROR_CHARS]
        elif v is None or isinstance(v, bool | int | float):
            out[str(key)[:MAX_ERROR_CHARS]] = v
    return out


def _bounded_server(doc: dict[str, Any]) -> dict[str, Any]:
    out = _scalar_items(doc)
    warm = doc.get("warmup")
    if isinstance(warm, dict):
        kept = _scalar_items(warm)
        rates = warm.get("rates")
        if isinstance(rates, list):
            kept["rates"] = [r for r in rates[:8] if r is None or _is_number(r)]
        out["warmup"] = kept
    return out


def _load_object(data: bytes) -> dict[str, Any]:
    try:
        doc = _loads(data)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise RecordError("expected a JSON object")
    return doc
