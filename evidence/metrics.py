"""The study's metrics: SGLang-Omni's summary names, units and which direction is better.

`scale` says how a difference is judged: `log` compares head/base as a ratio (positive
figures such as throughput or latency); `diff` compares head − base (rates that can be
zero, such as WER or the failure rate), still reported relative to base where possible.
WER is the mean of per-sample rates (`wer_mean`) and, where edit counts are known, the
corpus rate Σ edits / Σ reference words (`wer_corpus`); MOSS-TD scores characters
(`cer_mean`). Text TTFT is the first transcript or text token, never audio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    better: Literal["higher", "lower"]
    scale: Literal["log", "diff"] = "log"
    streaming_only: bool = False
    tail: float | None = None  # percentile, when the figure is a tail that needs samples


METRICS: tuple[Metric, ...] = (
    Metric("throughput_qps", "throughput", "req/s", "higher"),
    Metric("audio_throughput_s_per_s", "audio seconds per second", "s/s", "higher"),
    Metric("latency_mean_s", "latency mean", "s", "lower"),
    Metric("latency_median_s", "latency p50", "s", "lower"),
    Metric("latency_p95_s", "latency p95", "s", "lower", tail=95),
    Metric("latency_p99_s", "latency p99", "s", "lower", tail=99),
    Metric("audio_ttfp_median_s", "time to first audio p50", "s", "lower", streaming_only=True),
    Metric(
        "audio_ttfp_p95_s", "time to first audio p95", "s", "lower", streaming_only=True, tail=95
    ),
    Metric("text_ttft_median_s", "text TTFT p50", "s", "lower", streaming_only=True),
    Metric("text_ttft_p95_s", "text TTFT p95", "s", "lower", streaming_only=True, tail=95),
    Metric("inter_chunk_p95_s", "inter-chunk p95", "s", "lower", streaming_only=True, tail=95),
    Metric("rtf_mean", "RTF mean", "", "lower"),
    Metric("wer_mean", "WER", "", "lower", scale="diff"),
    Metric("wer_corpus", "WER (corpus)", "", "lower", scale="diff"),
    Metric("cer_mean", "CER", "", "lower", scale="diff"),
    Metric("failure_rate", "failure rate", "", "lower", scale="diff"),
    Metric("startup_s", "server start-up", "s", "lower"),
    Metric("peak_vram_mib", "peak VRAM", "MiB", "lower"),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)

# Aliases accepted in a candidate's claim, mapped to the study's names.
ALIASES: dict[str, str] = {
    "latency_p50_s": "latency_median_s",
    "audio_ttfp_p50_s": "audio_ttfp_median_s",
    "ttfa_p95_s": "audio_ttfp_p95_s",
    "ttfa_p50_s": "audio_ttfp_median_s",
    "text_ttft_p50_s": "text_ttft_median_s",
    "request_throughput": "throughput_qps",
    "rtf": "rtf_mean",
    "wer": "wer_mean",
    "corpus_wer": "wer_corpus",
    "cer": "cer_mean",
}

# Error rates of the accuracy files: their increase is judged against the WER guard.
ACCURACY: frozenset[str] = frozenset({"wer_mean", "wer_corpus", "cer_mean"})


def canonical(name: str) -> str:
    """The study's name for a metric a caller spelt another common way."""
    return ALIASES.get(name, name)
