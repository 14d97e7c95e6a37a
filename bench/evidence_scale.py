"""Evidence for a 1,000,000-request bundle, timed against merely parsing it with orjson.

    .venv/bin/python bench/evidence_scale.py [--requests 12500] [--repeat 3] [--shape real]

The bundle (2 modes × 4 concurrencies × 2 sides × 5 rounds × 12,500 requests, in
SGLang-Omni's `speed_results.json` format; generated once into bench/.data/) is measured
two ways, each as a whole command in a child process, interleaved and order-balanced.
`--shape real` (the default) is what real runs write: every run has its per-request speed
file and a per-sample accuracy file (`wer_results.json`); `--shape speed` has the speed
files only.

- reference: a one-line orjson script that parses every JSON file of the bundle;
- engine:    `rsi-bot evidence BUNDLE --out DIR` (reading, audit, study, plots, reports).

It prints the median wall time of each, their ratio and each one's peak RSS.
Target: ratio ≤ 2.0 and engine peak memory ≤ 1 GiB on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

REFERENCE = (
    "import orjson, pathlib, sys; "
    "[orjson.loads(p.read_bytes()) for p in pathlib.Path(sys.argv[1]).rglob('*.json')]"
)


TARGET = 2.0


def make_bundle(requests: int, real: bool) -> Path:
    from evidence.synth import SynthSpec, write_bundle

    out = HERE / ".data" / (f"bundle-{requests}" + ("-real" if real else ""))
    if (out / "manifest.json").exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    t = time.perf_counter()
    write_bundle(
        tmp,
        SynthSpec(
            concurrencies=(8, 16, 32, 64),
            rounds=5,
            requests=requests,
            speedup=0.04,
            with_wer=real,
            with_text=True,
            seed=2026,
        ),
    )
    tmp.rename(out)
    print(f"generated {out} in {time.perf_counter() - t:.1f}s", flush=True)
    return out


def run(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[0]} failed: {err}")
    return wall, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=12_500, help="requests per round")
    ap.add_argument("--repeat", type=int, default=3, help="measurements of each command")
    ap.add_argument(
        "--shape",
        choices=("real", "speed"),
        default="real",
        help="real: speed and accuracy files in every run; speed: speed files only",
    )
    args = ap.parse_args()
    bundle = make_bundle(args.requests, args.shape == "real")
    total = 2 * 4 * 2 * 5 * args.requests
    size = sum(p.stat().st_size for p in bundle.rglob("*.json"))
    py = sys.executable
    rsi = str(Path(py).with_name("rsi-bot"))
    out = Path(tempfile.mkdtemp(prefix="rsi-bench-"))
    ref_cmd = [py, "-c", REFERENCE, str(bundle)]
    eng_cmd = [rsi, "evidence", str(bundle), "--out", str(out)]
    ref: list[tuple[float, int]] = []
    eng: list[tuple[float, int]] = []
    for i in range(args.repeat):  # ABBA: reference, engine, engine, reference, …
        order = [(ref, ref_cmd), (eng, eng_cmd)]
        for acc, cmd in order if i % 2 == 0 else order[::-1]:
            acc.append(run(cmd))
    shutil.rmtree(out, ignore_errors=True)
    t_ref = statistics.median(w for w, _ in ref)
    t_eng = statistics.median(w for w, _ in eng)
    m_ref = max(m for _, m in ref)
    m_eng = max(m for _, m in eng)
    ratio = t_eng / t_ref
    gib = 1024**3
    print(
        f"bundle ({args.shape}): {total:,} requests, {size / 1e6:.0f} MB of JSON, "
        f"{os.cpu_count()} cores"
    )
    print(f"reference (orjson parse only): median {t_ref:.2f}s  peak RSS {m_ref / 2**20:.0f} MiB")
    print(f"rsi-bot evidence:              median {t_eng:.2f}s  peak RSS {m_eng / 2**20:.0f} MiB")
    print(
        f"ratio engine/reference: {ratio:.2f}x (target <= {TARGET}x); "
        f"engine peak {m_eng / gib:.2f} GiB (target <= 1 GiB)"
    )
    print(
        "runs:",
        ", ".join(f"ref {w:.2f}s" for w, _ in ref),
        "|",
        ", ".join(f"engine {w:.2f}s" for w, _ in eng),
    )
    sys.exit(0 if ratio <= TARGET and m_eng <= gib else 1)


if __name__ == "__main__":
    main()
