"""Crafted bundles: many runs whose files are made to cost memory, not bytes.

    .venv/bin/python bench/crafted_bundle.py [--shape gaps|ids|gpu-samples|rows]
                                             [--runs R] [--rows N] [--n X] [--max-values N]

- gaps (default: 800 runs, 128 rows, 3,627): every row's `inter_chunk_s` is 3,627 zeros,
  just under 1 MiB a file, below the size past which the compression ratio is judged;
  the zip is about 5 MB and unpacks to about 760 MiB. A head can write such lists itself
  by streaming many tiny chunks.
- ids (2,000 runs, 32 rows, 30,000): every request's id is 30,000 characters.
- gpu-samples (2,000 runs, 8 rows, 10,000): every run's `server.json` holds 10,000 GPU
  samples.
- rows (1,000 runs, 4,000 rows): four million requests without gaps.

Each is generated once into bench/.data/.

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


SHAPES = {"gaps": (800, 128, 3627), "ids": (2000, 32, 30000), "gpu-samples": (2000, 8, 10000)}
SHAPES["rows"] = (1000, 4000, 0)


def _craft(shape: str, folder: Path, n: int) -> None:
    zeros = [0] * n
    for speed in sorted(folder.glob("runs/*/speed_results.json")):
        doc = orjson.loads(speed.read_bytes())
        for j, row in enumerate(doc["per_request"]):
            if shape == "gaps":
                row["inter_chunk_s"] = zeros
            elif shape == "ids":
                row["id"] = f"{j}-" + "a" * n
            elif shape == "rows":
                row["inter_chunk_s"] = []
        speed.write_bytes(orjson.dumps(doc))
    if shape == "gpu-samples":
        for server in folder.glob("runs/*/server.json"):
            doc = orjson.loads(server.read_bytes())
            first = (doc.get("gpu_samples") or [{"util_pct": 97}])[0]
            doc["gpu_samples"] = [dict(first, t=float(i)) for i in range(n)]
            server.write_bytes(orjson.dumps(doc))


def make_bundle(shape: str, runs: int, rows: int, n: int) -> Path:
    """The crafted zip: a clean synthetic bundle with one kind of bloat."""
    from evidence.synth import SynthSpec, write_bundle

    out = HERE / ".data" / f"crafted-{shape}-{runs}x{rows}x{n}.zip"
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
    _craft(shape, folder, n)
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
    ap.add_argument("--shape", choices=sorted(SHAPES), default="gaps")
    ap.add_argument("--runs", type=int)
    ap.add_argument("--rows", type=int, help="requests per run")
    ap.add_argument("--n", type=int, help="gaps a request, id characters, or GPU samples")
    ap.add_argument(
        "--max-values", type=int, help="passed to the engine: raise it to read the bundle whole"
    )
    args = ap.parse_args()
    runs, rows, n = SHAPES[args.shape]
    bundle = make_bundle(args.shape, args.runs or runs, args.rows or rows, args.n or n)
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
