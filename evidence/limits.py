"""How much input the engine takes, and which numbers it believes.

A bundle comes from a runner that ran candidate code, so nothing in it is trusted to be
small or sane. Every bound here is checked while reading, never taken from what an
archive's headers declare, and a bundle beyond one is refused whole (`BoundError`, exit 2
from `rsi-bot evidence`, a rejected bundle in the App): an honest runner never writes one.

| bound | default | `rsi-bot evidence` | App setting |
| --- | --- | --- | --- |
| uncompressed size of the whole archive | 2 GiB | `--max-bundle-bytes` | `RSI_BUNDLE_MAX_BYTES` |
| members of the archive | 20,000 | `--max-members` | `RSI_BUNDLE_MAX_MEMBERS` |
| uncompressed size of one member | 512 MiB | `--max-member-bytes` | `RSI_BUNDLE_MAX_MEMBER_BYTES` |
| compression ratio (uncompressed / compressed) | 200 | `--max-ratio` | `RSI_BUNDLE_MAX_RATIO` |
| a JSON file the engine parses | 64 MiB | `--max-json-bytes` | `RSI_BUNDLE_MAX_JSON_BYTES` |
| runs in one manifest | 10,000 | `--max-runs` | `RSI_BUNDLE_MAX_RUNS` |
| one request's list of gaps | 100,000 | `--max-list-values` | `RSI_BUNDLE_MAX_LIST_VALUES` |
| per-request values in all | 50,000,000 | `--max-values` | `RSI_BUNDLE_MAX_VALUES` |

JSON nests at most 1,024 levels (orjson's own limit, held for the standard library's
reader of `NaN`/`Infinity` too). Numbers outside physical ranges (`PHYSICAL`) are refused
with the file and the field.

The bounds' numbers (`Limits`, `DEFAULT`) live in `evidence.bounds`, which needs no NumPy,
so the command line can show them as defaults without loading it; they are re-exported
here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from evidence.bounds import DEFAULT, GiB, KiB, Limits, MiB
from evidence.errors import BoundError

__all__ = [
    "DEFAULT",
    "JSON_DEPTH",
    "MAX_COUNT",
    "MAX_SECONDS",
    "MIN_WALL_S",
    "PHYSICAL",
    "RATIO_FLOOR",
    "SERVER",
    "GiB",
    "KiB",
    "Limits",
    "MiB",
    "check_column",
    "check_number",
    "check_server",
]

JSON_DEPTH = 1024
# The ratio is judged only once a member (or a tarball) has grown past this: small files
# of repeated text compress well and prove nothing.
RATIO_FLOOR = 1 * MiB

# Longest a run, a request or a gap may last, in seconds (11.6 days); a run shorter than
# a millisecond measured nothing.
MAX_SECONDS = 1e6
MIN_WALL_S = 1e-3
MAX_COUNT = 1e9

# (lowest, highest) of each per-request column; NaN is "not reported".
PHYSICAL: dict[str, tuple[float, float]] = {
    "latency_s": (0.0, MAX_SECONDS),
    "engine_latency_s": (0.0, MAX_SECONDS),
    "audio_duration_s": (0.0, MAX_SECONDS),
    "rtf": (0.0, MAX_SECONDS),
    "audio_ttfp_s": (0.0, MAX_SECONDS),
    "text_ttft_s": (0.0, MAX_SECONDS),
    "prompt_tokens": (0.0, MAX_COUNT),
    "completion_tokens": (0.0, MAX_COUNT),
    "audio_chunk_count": (0.0, MAX_COUNT),
    "inter_chunk_max_s": (0.0, MAX_SECONDS),
    "inter_chunk_min_s": (0.0, MAX_SECONDS),
}
SERVER: dict[str, tuple[float, float]] = {
    "startup_s": (0.0, MAX_SECONDS),
    "peak_vram_mib": (0.0, MAX_COUNT),
}


def _bad(where: str, field: str, value: float, lo: float, hi: float) -> BoundError:
    return BoundError(
        where, f"field {field!r} holds {value!r}, outside the physical range [{lo:g}, {hi:g}]"
    )


def check_number(where: str, field: str, value: float | None, lo: float, hi: float) -> None:
    """One number, when given, is finite and within [lo, hi]."""
    if value is None:
        return
    try:
        v = float(value)
    except OverflowError:  # an integer of hundreds of digits
        v = math.inf
    if not math.isfinite(v) or not lo <= v <= hi:
        raise _bad(where, field, v, lo, hi)


def check_column(
    where: str, field: str, values: np.ndarray[Any, Any], lo: float, hi: float
) -> None:
    """Every reported (non-NaN) value of a column is finite and within [lo, hi]."""
    if values.size == 0:
        return
    given = values[~np.isnan(values)]
    bad = given[~((given >= lo) & (given <= hi))]
    if bad.size:
        raise _bad(where, field, float(bad[0]), lo, hi)


def check_server(where: str, doc: dict[str, Any]) -> None:
    for key, (lo, hi) in SERVER.items():
        v = doc.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            check_number(where, key, v, lo, hi)
