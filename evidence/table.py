"""The tidy tables every input becomes: one row per request, and one row per round.

Per request: gpu, side, round, mode, concurrency, run, request id, success and each
per-request column of `records.COLUMNS` (plus `wer` where an accuracy file names the id).
Per round: the same keys and every study metric. A per-run-only study has rounds but no
requests, which is exactly what it can support.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evidence.load import Source
from evidence.metrics import NAMES
from evidence.records import COLUMNS

KEYS = ["gpu", "side", "round", "mode", "concurrency", "run"]


def requests_table(sources: list[Source]) -> pd.DataFrame:
    frames = []
    for src in sources:
        for lr in src.runs:
            rec = lr.records
            if rec is None or lr.run.status != "ok":
                continue
            data: dict[str, object] = {
                "gpu": src.gpu,
                "side": lr.run.side,
                "round": lr.run.round,
                "mode": lr.run.mode,
                "concurrency": lr.run.concurrency,
                "run": lr.run.id,
                "request_id": rec.ids,
                "is_success": rec.success,
            }
            data.update({c: rec.cols[c] for c in COLUMNS})
            wer = np.full(rec.n, np.nan)
            if lr.wer is not None:
                by_id = {
                    i: w
                    for i, w, ok in zip(lr.wer.ids, lr.wer.wer, lr.wer.success, strict=True)
                    if ok
                }
                wer = np.array([by_id.get(i, np.nan) for i in rec.ids], dtype=np.float64)
            data["wer"] = wer
            frames.append(pd.DataFrame(data))
    if not frames:
        return pd.DataFrame(columns=[*KEYS, "request_id", "is_success", *COLUMNS, "wer"])
    df = pd.concat(frames, ignore_index=True)
    for key in ("gpu", "side", "mode", "run"):
        df[key] = df[key].astype("category")
    return df


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
