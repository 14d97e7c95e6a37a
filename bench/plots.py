"""Drawing the evidence plots: margins fitted once against matplotlib's constrained layout.

    .venv/bin/python bench/plots.py [--repeat 10] [--study tests|large]

Each plot kind is drawn and written as `make_plots` does (the figure, Agg's drawing, the
palette PNG) two ways in the same process, interleaved (reference, new, new, reference,
…), and the medians of the CPU time of this process compared:

- reference: `evidence.plots.CONSTRAINED_LAYOUT = True`, matplotlib's constrained layout
  (how the plots were laid out before), which measures every artist twice at each draw;
- new:       the default, margins set once from the sizes of the texts (`plots._fit`).

`--study tests` (the default) draws what tests/test_plots.py draws: one H200, both modes,
concurrency 4, 3 rounds of 40 requests a side, and the real evolve_state.json of its
fixtures; `--study large` has 3 GPUs × 2 modes × 4 concurrencies (6 panels per plot,
48 rows of changes). It prints each kind's medians and ratio (new/reference), and the
ratio of the sums.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evidence import plots  # noqa: E402
from evidence.build import Inputs, build  # noqa: E402
from evidence.model import EvolveState  # noqa: E402
from evidence.synth import SynthSpec, write_bundle  # noqa: E402
from tests.test_plots import _candidate  # noqa: E402

EVOLVE_STATE = ROOT / "tests" / "fixtures" / "real" / "ace-playbook-repair.evolve_state.json"
STUDIES = {
    "tests": [SynthSpec(speedup=0.1, rounds=3, requests=40, concurrencies=(4,))],
    "large": [
        SynthSpec(gpu=gpu, speedup=s, rounds=3, requests=40, concurrencies=(4, 8, 16, 32), seed=i)
        for i, (gpu, s) in enumerate([("H100", 0.1), ("H200", -0.05), ("B200", 0.0)])
    ],
}
WAYS = ("reference", "new")


def kinds(work: Path, study: str) -> dict[str, Callable[[], Figure | None]]:
    paths = [write_bundle(work / f"b{i}", spec) for i, spec in enumerate(STUDIES[study])]
    ev, sources = build(Inputs(bundles=paths))
    candidate = _candidate(EvolveState.model_validate(orjson.loads(EVOLVE_STATE.read_bytes())))
    return {
        "rounds": lambda: plots.draw_rounds(ev),
        "latency": lambda: plots.draw_latency(sources),
        "ttfa": lambda: plots.draw_ttfa(sources),
        "deltas": lambda: plots.draw_deltas(ev),
        "trajectory": lambda: plots.draw_trajectory(candidate),
    }


def once(draw: Callable[[], Figure | None], way: str, out: Path, name: str) -> float:
    plots.CONSTRAINED_LAYOUT = way == "reference"
    try:
        start = time.process_time()
        fig = draw()
        assert fig is not None, name
        plots._save(fig, out, name)
        return time.process_time() - start
    finally:
        plots.CONSTRAINED_LAYOUT = False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--study", default="tests", choices=sorted(STUDIES))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        draws = kinds(work, a.study)
        times: dict[str, dict[str, list[float]]] = {k: {w: [] for w in WAYS} for k in draws}
        for name, draw in draws.items():  # warm both once: imports, font cache
            for way in WAYS:
                once(draw, way, work / "out", name)
        for i in range(a.repeat):
            for name, draw in draws.items():
                for way in WAYS if i % 2 == 0 else WAYS[::-1]:
                    times[name][way].append(once(draw, way, work / "out", name))
    print(f"study {a.study!r}, CPU time per plot drawn and written, median of {a.repeat}")
    print(f"  {'plot':<12} {'reference':>10} {'new':>10} {'new/reference':>14}")
    total = dict.fromkeys(WAYS, 0.0)
    for name, by_way in times.items():
        med = {w: statistics.median(v) for w, v in by_way.items()}
        for w in WAYS:
            total[w] += med[w]
        ratio = med["new"] / med["reference"]
        print(
            f"  {name:<12} {med['reference'] * 1000:8.1f} ms {med['new'] * 1000:7.1f} ms "
            f"{ratio:13.2f}×"
        )
    ratio = total["new"] / total["reference"]
    print(
        f"  {'all five':<12} {total['reference'] * 1000:8.1f} ms {total['new'] * 1000:7.1f} ms "
        f"{ratio:13.2f}×"
    )


if __name__ == "__main__":
    main()
