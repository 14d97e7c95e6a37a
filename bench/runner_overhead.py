"""What the runner adds to the benchmark's own wall time, measured on the GPU machine.

    python3 bench/runner_overhead.py --out DIR [--rounds 3] [--requests 128]

Runs the GPU reference task's benchmark client against its server two ways, interleaved
(direct, runner, runner, direct, …): directly (server started by hand, client run as is)
and under `python3 -m runners verify` (the runner starts the server, samples the GPU and
the host while the client runs). It compares the client's own measured wall clock — the
figure throughput is computed from — and prints the overhead in percent (target ≤ 2%).
It also reports the runner's orchestration time per run (server start, warm-up, stop),
which is outside the measured window by design. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_repo(where: Path, variant: str) -> tuple[Path, str]:
    repo = where / "aa-repo"
    repo.mkdir(parents=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "rsi",
        "GIT_AUTHOR_EMAIL": "rsi@localhost",
        "GIT_COMMITTER_NAME": "rsi",
        "GIT_COMMITTER_EMAIL": "rsi@localhost",
    }
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    (repo / "variant.txt").write_text(variant + "\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", variant], check=True, env=env)
    sha = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"],
        check=True,
        env=env,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return repo, sha


def direct(requests: int, concurrency: int, variant: str, work: Path) -> float:
    """One run by hand: start the server, warm up, run the client once, stop."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runners.reference.server",
            "--port",
            str(port),
            "--variant",
            variant,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("reference server did not start")
            time.sleep(0.2)
        client = [
            sys.executable,
            "-m",
            "runners.reference.client",
            "--port",
            str(port),
            "--concurrency",
            str(concurrency),
        ]
        subprocess.run(
            [*client, "--requests", "16", "--output-dir", str(work / "warm")], env=env, check=True
        )
        subprocess.run(
            [*client, "--requests", str(requests), "--output-dir", str(work)], env=env, check=True
        )
        doc = json.loads((work / "speed_results.json").read_text())
        return float(doc["summary"]["wall_clock_s"])
    finally:
        server.terminate()
        server.wait(timeout=30)


def under_runner(
    repo: Path, sha: str, requests: int, concurrency: int, out: Path
) -> tuple[list[float], list[float]]:
    """One `runners verify` A/A round pair: client wall clocks and runner time per run."""
    cmd = [
        sys.executable,
        "-m",
        "runners",
        "verify",
        "--repo",
        str(repo),
        "--base",
        sha,
        "--head-repo",
        str(repo),
        "--head",
        sha,
        "--task",
        "gpu-reference",
        "--gpu",
        os.environ.get("RSI_GPU", "h200"),
        "--rounds",
        "1",
        "--modes",
        "non-streaming",
        "--concurrencies",
        str(concurrency),
        "--requests",
        str(requests),
        "--out",
        str(out),
        "--verification-id",
        "v-overhead",
    ]
    subprocess.run(cmd, cwd=ROOT, check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    walls, spans = [], []
    for run in manifest["runs"]:
        doc = json.loads((out / run["files"]["speed"]).read_text())
        walls.append(float(doc["summary"]["wall_clock_s"]))
        spans.append(float(run.get("runner_wall_s") or 0.0))
    return walls, spans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3, help="pairs of each kind")
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--variant", default="graph")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rsi-overhead-"))
    repo, sha = make_repo(work, args.variant)
    plain: list[float] = []
    runner: list[float] = []
    runner_spans: list[float] = []
    for i in range(args.rounds):
        order = ("direct", "runner") if i % 2 == 0 else ("runner", "direct")
        for kind in order:
            if kind == "direct":
                plain.append(
                    direct(args.requests, args.concurrency, args.variant, work / f"direct-{i}")
                )
            else:
                walls, spans = under_runner(
                    repo, sha, args.requests, args.concurrency, work / f"runner-{i}"
                )
                runner += walls
                runner_spans += spans
    d, r = statistics.median(plain), statistics.median(runner)
    result = {
        "direct_wall_s": plain,
        "runner_wall_s": runner,
        "direct_median_s": d,
        "runner_median_s": r,
        "overhead_pct": 100 * (r / d - 1),
        "runner_orchestration_s_per_run": statistics.median(runner_spans) - r
        if runner_spans and runner_spans[0]
        else None,
        "requests": args.requests,
        "concurrency": args.concurrency,
        "variant": args.variant,
    }
    (args.out / "runner_overhead.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(
        f"overhead on the benchmark's own wall time: {result['overhead_pct']:+.2f}% (target <= 2%)"
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
