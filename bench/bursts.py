"""Bursts sized to the server, against the task's fixed length, on a server that batches.

    python bench/bursts.py [--isolation none] [--repeat N]

The dry server with batching of its own (`batch`: up to 4 requests a step, a step as long
as its longest request plus 15% for each other one, a 5 ms window to join; so throughput
depends on how requests happen to meet), non-streaming at concurrency 4, `--design
alternate --rounds auto` (±3%, at most 16 pairs), bursts of 16 requests. For an A/A pair
and a head 10% faster (`speed: 1.1`), with `--burst-sizing off` and `auto`: the verdict,
the pairs, the interval, the CPU minutes the verification held (the runner's
`gpu_minutes`, start-ups included) and the burst length chosen.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.estimate import dry_verify  # noqa: E402
from evidence.build import Inputs, build  # noqa: E402

BATCHING = {"batch": 4, "batch_window_ms": 5.0, "batch_cost": 0.15, "char_ms": 1.5}
CASES = {"A/A": 1.0, "+10%": 1.1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isolation", default="cgroup", choices=("cgroup", "none"))
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    print(
        f"{'case':6} {'sizing':6} {'verdict':12} {'pairs':>5} {'interval':>22} "
        f"{'CPU-min':>8} {'burst':>10}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        for k in range(a.repeat):
            for case, speed in CASES.items():
                for sizing in ("off", "auto"):
                    name = f"{k}-{'aa' if speed == 1.0 else 'plant'}-{sizing}"
                    args = ["--design", "alternate", "--rounds", "auto", "--max-rounds", "16"]
                    args += ["--modes", "non-streaming", "--requests", "16"]
                    args += ["--burst-sizing", sizing, "--isolation", a.isolation]
                    head = dict(BATCHING, speed=speed)
                    out = dry_verify(work, name, BATCHING, head, *args)
                    m = json.loads((out / "manifest.json").read_text())
                    ev, _ = build(Inputs(bundles=[out]))
                    [row] = [r for r in ev.study if r.metric == "throughput_qps" and r.primary]
                    z = (m.get("design") or {}).get("burst_sizing") or {}
                    tried = f"→{z['probed']}?" if z.get("probed") else ""
                    burst = f"16{tried}→{z['chosen']}" if z else "16"
                    ci = (
                        f"{row.delta_pct:+.1f}% [{row.ci_low_pct:+.1f}, {row.ci_high_pct:+.1f}]"
                        if row.ci_low_pct is not None and row.delta_pct is not None
                        else "-"
                    )
                    n = row.pairs if row.pairs is not None else min(row.n_base, row.n_head)
                    print(
                        f"{case:6} {sizing:6} {row.verdict:12} {n:5} {ci:>22} "
                        f"{m['gpu_minutes']['total']:8.2f} {burst:>10}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
