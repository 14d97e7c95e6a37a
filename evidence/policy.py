"""Thresholds that decide verdicts and audit severities, with their defaults.

One object, passed down, so a repository's `.github/rsi.yml` can later override any of
them without the engine reading configuration itself.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class Lead(BaseModel):
    """Which row the verdict's words lead with when it is among the rows that decide it:
    the claim's, or `headline:` in `.github/rsi.yml`. Without one, the row with the most
    evidence leads, which may be another GPU on the next commit."""

    gpu: str | None = None
    metric: str | None = None
    mode: str | None = None
    concurrency: int | None = None

    def matches(self, gpu: str, metric: str, mode: str, concurrency: int) -> bool:
        return (
            (self.gpu is None or self.gpu == gpu)
            and (self.metric is None or self.metric == metric)
            and (self.mode is None or self.mode == mode)
            and (self.concurrency is None or self.concurrency == concurrency)
        )


class Policy(BaseModel):
    threshold_pct: float = Field(default=3.0, ge=0, description="practical threshold")
    alpha: float = Field(default=0.05, gt=0, lt=1, description="1 - interval coverage")
    power: float = Field(default=0.8, gt=0, lt=1, description="power for the detectable effect")
    guard_latency_p95_pct: float = 10.0
    guard_ttfa_p95_pct: float = 10.0
    guard_text_ttft_p95_pct: float = 10.0  # ASR streaming: time to the first transcript text
    # The primary metric (and request throughput) on the rows that are not primary — the
    # other mode, another concurrency: a regression past this lowers the verdict.
    guard_other_rows_pct: float = Field(default=10.0, ge=0)
    failure_rate_max: float = Field(default=0.01, ge=0, le=1)
    wer_increase_max: float = Field(default=0.01, ge=0, description="absolute WER")
    length_shift_pct: float = 5.0
    length_shift_p: float = 0.01
    first_chunk_at_end_frac: float = 0.95
    min_rounds: int = 3
    min_failed_rounds: int = 2
    tail_min_samples: int = 100
    noisy_cv_pct: float = 5.0
    history_min_points: int = 3
    history_z: float = 3.0
    history_pct: float = 5.0
    lead: Lead | None = None  # the repository's `headline:` (else the claim's row leads)
    max_rounds: int | None = None  # what one command may ask (`budget.max_rounds`)

    def guard_pct(self, metric: str) -> float | None:
        """The regression a guarded row may show before it lowers the verdict."""
        return {
            "latency_p95_s": self.guard_latency_p95_pct,
            "audio_ttfp_p95_s": self.guard_ttfa_p95_pct,
            "text_ttft_p95_s": self.guard_text_ttft_p95_pct,
        }.get(metric)

    def guard_other_pct(self, metric: str, primary_metric: str) -> float | None:
        """The regression a non-primary row of `metric` may show before it lowers the
        verdict: the primary metric and request throughput are guarded on every row."""
        if metric in (primary_metric, "throughput_qps"):
            return self.guard_other_rows_pct
        return None
