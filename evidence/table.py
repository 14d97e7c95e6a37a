"""The tidy tables every input becomes: one row per request, and one row per round.

Per request: gpu, side, round, mode, concurrency, run, request id, success and each
per-request column of `records.COLUMNS` (plus `wer` where an accuracy file names the id).
Per round: the same keys and every study metric. A per-run-only study has rounds but no
requests, which is exactly what it can support.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from evidence.load import Source
from evidence.metrics import NAMES
from evidence.records import COLUMNS, FloatArray, RunRecords, WerRecords

KEYS = ["gpu", "side", "round", "mode", "concurrency", "run"]


def requests_table(
    sources: list[Source], columns: Sequence[str] = (*COLUMNS, "wer")
) -> pd.DataFrame:
    """One row per request of every `ok` run: the keys, the request id, its success and
    the per-request `columns` asked for (all of `COLUMNS` and `wer` unless told)."""
    runs = [
        (src, lr, lr.records)
        for src in sources
        for lr in src.runs
        if lr.records is not None and lr.run.status == "ok"
    ]
    if not runs:
        return pd.DataFrame(columns=[*KEYS, "request_id", "is_success", *columns])
    sizes = [rec.n for _, _, rec in runs]
    data: dict[str, object] = {
        "gpu": _category([src.gpu for src, _, _ in runs], sizes),
        "side": _category([lr.run.side for _, lr, _ in runs], sizes),
        "round": np.repeat(np.array([lr.run.round for _, lr, _ in runs], dtype=np.int64), sizes),
        "mode": _category([lr.run.mode for _, lr, _ in runs], sizes),
        "concurrency": np.repeat(
            np.array([lr.run.concurrency for _, lr, _ in runs], dtype=np.int64), sizes
        ),
        "run": _category([lr.run.id for _, lr, _ in runs], sizes),
        "request_id": [i for _, _, rec in runs for i in rec.ids],
        "is_success": np.concatenate([rec.success for _, _, rec in runs]),
    }
    for c in columns:
        if c == "wer":
            data[c] = np.concatenate([_wer_by_request(lr.wer, rec) for _, lr, rec in runs])
        else:
            data[c] = np.concatenate([rec.cols[c] for _, _, rec in runs])
    return pd.DataFrame(data)


def _category(per_run: list[str], sizes: list[int]) -> pd.Categorical[str]:
    """A run-level key repeated over each run's requests, as `astype("category")` makes
    it (categories sorted), without hashing a million strings."""
    cats = sorted(set(per_run))
    at = {c: k for k, c in enumerate(cats)}
    codes = np.repeat(np.array([at[v] for v in per_run], dtype=np.int64), sizes)
    dtype: pd.CategoricalDtype[str] = pd.CategoricalDtype(pd.Index(cats))
    return pd.Categorical.from_codes(codes, dtype=dtype)


def _wer_by_request(wer: WerRecords | None, rec: RunRecords) -> FloatArray:
    """Each request's rate, from the accuracy row of the same id that was transcribed
    (the last such row when an id repeats); NaN where there is none."""
    if wer is None:
        return np.full(rec.n, np.nan)
    if wer.ids == rec.ids and len(set(rec.ids)) == rec.n:  # row for row, as runs write
        return np.where(wer.success, wer.wer, np.nan)
    by_id = {i: w for i, w, ok in zip(wer.ids, wer.wer, wer.success, strict=True) if ok}
    return np.array([by_id.get(i, np.nan) for i in rec.ids], dtype=np.float64)


def rounds_table(sources: list[Source]) -> pd.DataFrame:
    rows = []
    for src in sources:
        for lr in src.runs:
            rows.append(
                {
                    "gpu": src.gpu,
                    "side": lr.run.side,
                    "round": lr.run.round,
                    "mode": lr.run.mode,
                    "concurrency": lr.run.concurrency,
                    "run": lr.run.id,
                    "order": lr.order,
                    "status": lr.run.status,
                    **{m: lr.metrics.get(m) for m in NAMES},
                }
            )
    return pd.DataFrame(rows, columns=[*KEYS, "order", "status", *NAMES])
