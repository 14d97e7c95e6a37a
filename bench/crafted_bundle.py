"""A crafted bundle: 800 runs whose speed files are mostly inter-chunk gaps.

    .venv/bin/python bench/crafted_bundle.py [--runs 800] [--rows 128] [--gaps 3627]
                                             [--max-values N]

Each run's `speed_results.json` has 128 rows of 3,627 `inter_chunk_s` zeros: just under
1 MiB, so below the size past which the compression ratio is judged; the zip is about
5 MB and unpacks to about 760 MiB. A head can write such lists itself by streaming many
tiny chunks. Generated once into bench/.data/.

Two commands, each in a child process, wall time and peak RSS:

- reference: a one-line orjson script that parses every JSON member of the zip, one at
  a time, keeping none;
- engine:    `rsi-bot evidence BUNDLE --out DIR` (its exit status and last line said).

Target (docs/bounds.md): the engine refuses the bundle or reads it, in well under 1 GiB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

REFERENCE = (
    "import orjson, sys, zipfile\n"
    "z = zipfile.ZipFile(sys.argv[1])\n"
    "for n in z.namelist():\n"
    "    doc = orjson.loads(z.read(n)) if n.endswith('.json') else None\n"
)
GiB = 1024**3


def make_bundle(runs: int, rows: int, gaps: int) -> Path:
    """The crafted zip: a clean synthetic bundle whose every row's gaps are replaced."""
    from evidence.synth import SynthSpec, write_bundle

    out = HERE / ".data" / f"crafted-{runs}x{rows}x{gaps}.zip"
    if out.exists():
        return out
    folder = Path(tempfile.mkdtemp(prefix="rsi-crafted-"))
    concurrencies = (8, 16, 32, 64)
    spec = SynthSpec(
        modes=("streaming",),
        concurrencies=concurrencies,
        rounds=max(1, runs // (2 * len(concurrencies))),
        requests=rows,
        with_wer=False,
        with_text=False,
        seed=21,
    )
    write_bundle(folder, spec)
    zeros = [0] * gaps
    for speed in sorted(folder.glob("runs/*/speed_results.json")):
        doc = orjson.loads(speed.read_bytes())
        for row in doc["per_request"]:
            row["inter_chunk_s"] = zeros
        speed.write_bytes(orjson.dumps(doc))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                z.write(p, p.relative_to(folder).as_posix())
    tmp.rename(out)
    shutil.rmtree(folder, ignore_errors=True)
    return out


def run(cmd: list[str]) -> tuple[float, int, int, str]:
    """Wall seconds, peak RSS (bytes), exit status and the last line of stderr."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    last = (err.strip().splitlines() or [""])[-1]
    return wall, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=800)
    ap.add_argument("--rows", type=int, default=128, help="requests per run")
    ap.add_argument("--gaps", type=int, default=3627, help="inter_chunk_s entries per request")
    ap.add_argument(
        "--max-values", type=int, help="passed to the engine: raise it to read the bundle whole"
    )
    args = ap.parse_args()
    bundle = make_bundle(args.runs, args.rows, args.gaps)
    with zipfile.ZipFile(bundle) as z:
        infos = z.infolist()
    unpacked = sum(i.file_size for i in infos)
    largest = max(i.file_size for i in infos)
    py = sys.executable
    out = Path(tempfile.mkdtemp(prefix="rsi-bench-"))
    ref = run([py, "-c", REFERENCE, str(bundle)])
    engine = [str(Path(py).with_name("rsi-bot")), "evidence", str(bundle), "--out", str(out)]
    if args.max_values:
        engine += ["--max-values", str(args.max_values)]
    eng = run(engine)
    shutil.rmtree(out, ignore_errors=True)
    print(
        f"bundle: {bundle.stat().st_size / 1e6:.1f} MB zip, {len(infos)} members, "
        f"unpacks to {unpacked / 2**20:.0f} MiB (largest member {largest:,} bytes), "
        f"{os.cpu_count()} cores"
    )
    for name, (wall, peak, code, _) in (("reference (orjson parse only)", ref), ("engine", eng)):
        print(f"{name:30s} {wall:6.2f}s  peak RSS {peak / 2**20:5.0f} MiB  exit {code}")
    print(f"engine said: {eng[3][:300]}")
    print(
        f"ratio engine/reference: time {eng[0] / ref[0]:.2f}x, peak {eng[1] / ref[1]:.2f}x; "
        f"engine peak {eng[1] / GiB:.2f} GiB (target < 1 GiB)"
    )
    sys.exit(0 if eng[1] < GiB and eng[2] in (0, 2) else 1)


if __name__ == "__main__":
    main()
