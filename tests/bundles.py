"""Helpers that make a clean synthetic bundle and plant exactly one defect in it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from evidence.synth import SynthSpec, summarize, write_bundle

Row = dict[str, Any]

CLEAN = SynthSpec(
    modes=("non-streaming", "streaming"), concurrencies=(8,), rounds=4, requests=120, seed=3
)
# No change, rounds spread 3.5%: inconclusive on H200, decidable in about 26 pairs a side
# (its bundle records GPU minutes, so the next step can price them).
INCONCLUSIVE = SynthSpec(
    **{**CLEAN.__dict__, "speedup": 0.0, "round_cv": 0.035, "gpu_minutes": True}
)


def clean_bundle(path: Path, **changes: Any) -> Path:
    spec = SynthSpec(**{**CLEAN.__dict__, **changes})
    return write_bundle(path, spec)


def manifest(bundle: Path) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads((bundle / "manifest.json").read_bytes())
    return doc


def save_manifest(bundle: Path, doc: dict[str, Any]) -> None:
    (bundle / "manifest.json").write_bytes(orjson.dumps(doc))


def edit_manifest(bundle: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    doc = manifest(bundle)
    fn(doc)
    save_manifest(bundle, doc)


def run_ids(bundle: Path, side: str | None = None, mode: str | None = None) -> list[str]:
    return [
        r["id"]
        for r in manifest(bundle)["runs"]
        if (side is None or r["side"] == side) and (mode is None or r["mode"] == mode)
    ]


def edit_run(
    bundle: Path,
    run_id: str,
    fn: Callable[[list[Row], dict[str, Any]], None],
    resummarize: bool = True,
) -> None:
    """Apply `fn(rows, manifest_run)` and rewrite the summary as the benchmark would."""
    doc = manifest(bundle)
    run = next(r for r in doc["runs"] if r["id"] == run_id)
    speed_path = bundle / run["files"]["speed"]
    speed = orjson.loads(speed_path.read_bytes())
    fn(speed["per_request"], run)
    if resummarize:
        speed["summary"] = summarize(speed["per_request"], run["wall_clock_s"])
    speed_path.write_bytes(orjson.dumps(speed))
    save_manifest(bundle, doc)


def edit_summary(bundle: Path, run_id: str, **values: Any) -> None:
    doc = manifest(bundle)
    run = next(r for r in doc["runs"] if r["id"] == run_id)
    speed_path = bundle / run["files"]["speed"]
    speed = orjson.loads(speed_path.read_bytes())
    speed["summary"].update(values)
    speed_path.write_bytes(orjson.dumps(speed))
