"""A bundle as the engine holds it once loaded (`Source`), built in memory from
throughput figures: the statistical tests simulate thousands of verifications, and
writing each as files would only slow them down."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from evidence.load import LoadedRun, Source
from evidence.metrics import NAMES
from evidence.model import Manifest, Mode, Run


@dataclass(frozen=True)
class QpsRun:
    """One run: its side, round and throughput (None when it failed), in execution order."""

    side: str
    round: int
    qps: float | None
    status: str = "ok"
    mode: Mode = "streaming"
    concurrency: int = 16
    requests: int = 64


def qps_source(
    runs: Iterable[QpsRun], *, gpu: str = "H200", design: dict[str, Any] | None = None
) -> Source:
    """A complete bundle of `runs` on `gpu`, of `design` (the manifest's `design`; none:
    the sequential runner's)."""
    loaded: list[LoadedRun] = []
    for r in runs:
        run = Run(
            id=f"{gpu}-{r.mode}-c{r.concurrency}-{r.side}-r{r.round}",
            side=r.side,  # type: ignore[arg-type]
            round=r.round,
            mode=r.mode,
            concurrency=r.concurrency,
            requests=r.requests,
            status=r.status,  # type: ignore[arg-type]
        )
        metrics: dict[str, float | None] = dict.fromkeys(NAMES)
        metrics["throughput_qps"] = r.qps if r.status == "ok" else None
        loaded.append(LoadedRun(run=run, order=len(loaded), metrics=metrics))
    doc: dict[str, Any] = {
        "schema": "rsi-bundle/1",
        "verification_id": "sim",
        "repo": "o/r",
        "task": "sim",
        "base": {"sha": "a"},
        "head": {"sha": "b"},
        "gpu": gpu,
        "runs": [],
        "complete": True,
    }
    if design is not None:
        doc["design"] = design
    return Source("sim", "per-run", Manifest.model_validate(doc), gpu, loaded)
