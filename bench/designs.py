"""The measurement designs compared on real bundles: what each decided, how narrow its
interval got and what it cost in GPU minutes.

    python bench/designs.py BUNDLE.zip …

For each bundle and each mode: the design, the pairs (alternate) or rounds a side
(sequential), the engine's verdict and 95% interval on throughput, its half-width, the
GPU minutes of the whole verification and the share spent starting servers, and the
half-width times √(GPU minutes) — the interval a design buys per unit of GPU time, so
designs of different lengths compare (lower is better: at a fixed design the half-width
shrinks as 1/√n). With a null control, the control's own interval too.
"""

from __future__ import annotations

import json
import math
import sys
import zipfile
from pathlib import Path
from typing import Any

from evidence.build import Inputs, build


def _startup_min(m: dict[str, Any]) -> float:
    """GPU minutes spent starting servers: each run's start-up (sequential) or each
    resident server's (alternate)."""
    design = m.get("design") or {}
    if design.get("servers"):
        return (
            sum(
                float(s.get("startup_s") or 0.0)
                for recs in design["servers"].values()
                for s in recs
            )
            / 60.0
        )
    return sum(float(r.get("startup_s") or 0.0) for r in m.get("runs", [])) / 60.0


def report(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as z:
        m = json.loads(z.read("manifest.json"))
    ev, _ = build(Inputs(bundles=[path]))
    design = (m.get("design") or {}).get("name", "sequential")
    modes = len((m.get("benchmark") or {}).get("modes") or [1])
    total = float((m.get("gpu_minutes") or {}).get("total") or 0.0)
    if total <= 0:
        return [f"{path.name:38} (no GPU minutes recorded)"]
    gm = total / modes  # a mode's share: start-ups are shared by the modes of a resident design
    out = []
    for row in ev.study:
        if row.metric != "throughput_qps" or row.ci_low_pct is None or row.ci_high_pct is None:
            continue
        half = (row.ci_high_pct - row.ci_low_pct) / 2
        n = row.pairs if row.pairs is not None else min(row.n_base, row.n_head)
        out.append(
            f"{path.name:38} {design:10} {row.mode:13} n={n:<3} {row.verdict:12} "
            f"{row.delta_pct:+7.1f}% [{row.ci_low_pct:+.1f}, {row.ci_high_pct:+.1f}] "
            f"±{half:5.1f}  {gm:5.2f} GPU-min a mode (start-ups {_startup_min(m) / total:4.0%})  "
            f"±·√min {half * math.sqrt(gm):5.2f}"
        )
    for c in getattr(ev, "control", None) or []:
        out.append(f"{'':38} control    {c}")
    return out


def main(argv: list[str]) -> int:
    for p in argv:
        for line in report(Path(p)):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
