"""Per-round figures, recomputed from the per-request records.

The round is the unit of replication (docs/statistics.md): throughput exists once per round,
and percentiles are taken per round too, with NumPy's linear interpolation — the same
method as SGLang-Omni's `compute_speed_metrics`, so the audit can compare like with like.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evidence.metrics import NAMES
from evidence.records import FloatArray, RunRecords, WerRecords


def _pct(values: FloatArray, q: float) -> float | None:
    v = values[~np.isnan(values)]
    return float(np.percentile(v, q)) if v.size else None


def _mean(values: FloatArray) -> float | None:
    v = values[~np.isnan(values)]
    return float(v.mean()) if v.size else None


def _num(doc: dict[str, Any] | None, key: str) -> float | None:
    v = (doc or {}).get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def run_metrics(
    records: RunRecords | None,
    wall_clock_s: float | None,
    server: dict[str, Any] | None,
    wer: WerRecords | None,
) -> dict[str, float | None]:
    """Every study metric for one run; `None` where the run cannot report it."""
    out: dict[str, float | None] = dict.fromkeys(NAMES)
    if records is not None and records.n:
        ok = records.success
        n_ok = int(ok.sum())
        out["failure_rate"] = 1.0 - n_ok / records.n
        wall = wall_clock_s if wall_clock_s else records.duration_s
        lat = records.cols["latency_s"][ok]
        if wall and wall > 0:
            out["throughput_qps"] = n_ok / wall
            audio = records.cols["audio_duration_s"][ok]
            audio = audio[~np.isnan(audio) & (audio > 0)]
            if audio.size:
                out["audio_throughput_s_per_s"] = float(audio.sum()) / wall
        out["latency_mean_s"] = _mean(lat)
        out["latency_median_s"] = _pct(lat, 50)
        out["latency_p95_s"] = _pct(lat, 95)
        out["latency_p99_s"] = _pct(lat, 99)
        ttfp = records.cols["audio_ttfp_s"][ok]
        out["audio_ttfp_median_s"] = _pct(ttfp, 50)
        out["audio_ttfp_p95_s"] = _pct(ttfp, 95)
        ttft = records.cols["text_ttft_s"][ok]
        out["text_ttft_median_s"] = _pct(ttft, 50)
        out["text_ttft_p95_s"] = _pct(ttft, 95)
        out["inter_chunk_p95_s"] = _pct(records.gaps, 95)
        rtf = records.cols["rtf"][ok]
        out["rtf_mean"] = _mean(rtf[(rtf > 0) & np.isfinite(rtf)])
    if wer is not None:
        out.update(accuracy_metrics(wer))
    out["startup_s"] = _num(server, "startup_s")
    out["peak_vram_mib"] = _num(server, "peak_vram_mib")
    return out


def accuracy_metrics(wer: WerRecords) -> dict[str, float | None]:
    """A run's error rates: the mean per-sample rate and, for WER, the corpus rate."""
    w = wer.wer[wer.success]
    if wer.measure == "cer":
        return {"cer_mean": _mean(w)}
    return {"wer_mean": _mean(w), "wer_corpus": wer.corpus()}
