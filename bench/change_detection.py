"""The change detector over main's history (evidence/changes.py), simulated: false alarms
and detection delays by pairs a verification and step size.

    python3 bench/change_detection.py [--series 40] [--trials 200] [--seed 1]

Histories are drawn by tests/change_sim.py: each merge verified against its parent in
ABBA burst pairs, stopped by the runner's own sequential test (at most 10 pairs) or at a
fixed number of pairs, the pair noise Gaussian or heavy-tailed, a side bias of −0.2%, the
detector at its defaults. A suspect merge is measured again (at most twice) unless the
column says otherwise. Prints markdown tables (docs/statistics.md quotes them).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.change_sim import Noise, delays, false_alarms, measure, within

MERGES_A_MONTH = 100  # about 5 a working day


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--series", type=int, default=40, help="null histories of 100 merges")
    ap.add_argument("--trials", type=int, default=200, help="histories per delay cell")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    t0 = time.monotonic()

    rng = random.Random(a.seed)
    for label, change in (("no change", 0.0), ("−5%", math.log(0.95))):
        ns = Counter(measure(rng, "x", change, Noise(), None).pairs for _ in range(2000))
        mean = sum(k * v for k, v in ns.items()) / 2000
        dist = ", ".join(f"{k}: {v / 20:.0f}%" for k, v in sorted(ns.items()))
        print(f"runner's pairs at SD 2%, {label}: mean {mean:.1f} ({dist})")

    print(
        "\n| null history | pairs | false alarms / 100 merges | / series-month | measured again |"
    )
    print("| --- | --- | --- | --- | --- |")
    nulls = [
        (Noise(), None),
        (Noise(p_failed=0.05, p_short=0.05), None),
        (Noise(tails=3.0), None),
        (Noise(sd_range=(0.01, 0.08)), None),
        (Noise(side_bias=-0.003), None),
        (Noise(pair_sd=0.2), None),
        (Noise(), 4),
        (Noise(tails=3.0, p_failed=0.05, p_short=0.05), 4),
        (Noise(), 16),
    ]
    total_fa = total_m = 0
    for i, (noise, pairs) in enumerate(nulls):
        fa, merges, _, again = false_alarms(a.seed + 10 + i, noise, a.series, 100, pairs=pairs)
        total_fa, total_m = total_fa + fa, total_m + merges
        rate = 100.0 * fa / merges
        print(
            f"| {noise} | {pairs or 'runner'} | {rate:.2f} ({fa} in {merges}) "
            f"| {rate * MERGES_A_MONTH / 100:.2f} | {100 * again / merges:.1f}% |"
        )
    print(f"| all of them | | {100.0 * total_fa / total_m:.2f} ({total_fa} in {total_m}) | | |")

    print("\nDetection at pair SD 2%: share alarmed at the merge / within 3 merges")
    print("(measured again when suspect, at most twice; and never)\n")
    steps = [("−3%", math.log(0.97)), ("−5%", math.log(0.95)), ("−10%", math.log(0.90))]
    head = " | ".join(f"{s}, again | {s}, never" for s, _ in steps)
    print(f"| pairs | {head} |")
    print("| --- |" + " --- |" * (2 * len(steps)))
    for j, pairs in enumerate((None, 4, 6, 8, 10, 16)):
        cells = []
        for k, (_, step) in enumerate(steps):
            for rm in (2, 0):
                ds = delays(
                    a.seed + 100 + 10 * j + k, [step], Noise(), a.trials, pairs, remeasure=rm
                )
                cells.append(f"{100 * within(ds, 1):.0f} / {100 * within(ds, 3):.0f}%")
        print(f"| {pairs or 'runner (≤ 10)'} | " + " | ".join(cells) + " |")

    print("\n| series | alarmed by merge 1 / 3 / 5 / 8 after the first |")
    print("| --- | --- |")
    cases = [
        ("five −1.5% merges, runner", [math.log(0.985)] * 5, Noise(), None),
        ("five −1.5% merges, 4 pairs", [math.log(0.985)] * 5, Noise(), 4),
        ("ten −0.5% merges, runner", [math.log(0.995)] * 10, Noise(), None),
        ("+5% step, runner", [math.log(1.05)], Noise(), None),
        ("−5% step, t3 noise, runner", [math.log(0.95)], Noise(tails=3.0), None),
        (
            "−5% step, SD 1–8% by session, runner",
            [math.log(0.95)],
            Noise(sd_range=(0.01, 0.08)),
            None,
        ),
    ]
    for i, (label, steps_, noise, pairs) in enumerate(cases):
        ds = delays(a.seed + 200 + i, steps_, noise, a.trials, pairs, after=10)
        cells = " / ".join(f"{100 * within(ds, k):.0f}" for k in (1, 3, 5, 8))
        print(f"| {label} | {cells}% |")
    print(f"\n({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
