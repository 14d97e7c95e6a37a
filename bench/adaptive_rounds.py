"""GPU minutes per decisive verdict: `--rounds auto` against fixed 5 rounds, simulated.

    python3 bench/adaptive_rounds.py [--studies 1000] [--run-minutes 2] [--seed 5]

Rounds are simulated without processes (log-normal per-round throughput at round CV 2%,
5% and 15%; head effect 0, +5%, +200%), a run costing `--run-minutes` of GPU time
(start-up included). Adaptive: the runner's own `seqstats.decide` after every pair, at
most 10 rounds a side. Fixed: 5 rounds a side, then one Welch t interval on the log
ratio — 95% for improved/regressed (the engine's rule: excludes 0, estimate past 3%),
90% inside ±3% for equivalent (two one-sided tests). A verdict is *decisive* when it is
the right one: improved for a real gain, equivalent for none; anything else (an
inconclusive end, or a false improved/regressed) is not. Standard library only.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runners import seqstats as s

THRESHOLD = 3.0


def fixed(rng: random.Random, cv: float, effect: float, rounds: int = 5) -> str:
    sd = math.sqrt(math.log1p(cv * cv))
    b = [math.log(100.0) + rng.gauss(0.0, sd) for _ in range(rounds)]
    h = [math.log(100.0 * (1 + effect)) + rng.gauss(0.0, sd) for _ in range(rounds)]
    d, se, df = s.welch(b, h)
    thr = math.log1p(THRESHOLD / 100)
    t95, t90 = s.t_isf(0.025, df), s.t_isf(0.05, df)
    if d - t95 * se > 0 and d > thr:
        return s.IMPROVED
    if d + t95 * se < 0 and d < -thr:
        return s.REGRESSED
    if d - t90 * se > -thr and d + t90 * se < thr:
        return s.EQUIVALENT
    return s.INCONCLUSIVE


def right(effect: float) -> str:
    return s.EQUIVALENT if effect == 0 else s.IMPROVED


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=1000)
    ap.add_argument("--run-minutes", type=float, default=2.0, help="GPU minutes of one run")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    design = s.Design(max_rounds=10, threshold_pct=THRESHOLD)
    n = args.studies
    print(
        f"{n} simulated studies per cell; a run = {args.run_minutes:g} GPU min; "
        "adaptive: at most 10 rounds a side; fixed: 5 rounds a side\n"
    )
    print(
        "| CV | effect | adaptive: rounds a side | adaptive: decisive | adaptive: GPU min "
        "per decisive verdict | fixed 5: decisive | fixed 5: GPU min per decisive verdict |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for cv in (0.02, 0.05, 0.15):
        for effect in (0.0, 0.05, 2.0):
            rng = random.Random(args.seed)
            runs = [s.simulate_row(rng, cv, effect, design) for _ in range(n)]
            good = sum(v == right(effect) for v, _ in runs)
            minutes = sum(2 * r * args.run_minutes for _, r in runs)
            rng = random.Random(args.seed + 1)
            fgood = sum(fixed(rng, cv, effect) == right(effect) for _ in range(n))
            fminutes = n * 2 * 5 * args.run_minutes

            def per(m: float, k: int) -> str:
                return f"{m / k:.1f}" if k else "∞ (none)"

            print(
                f"| {cv:.0%} | {effect:+.0%} | {sum(r for _, r in runs) / n:.2f} "
                f"| {good / n:.1%} | {per(minutes, good)} | {fgood / n:.1%} "
                f"| {per(fminutes, fgood)} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
