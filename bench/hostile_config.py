"""`.github/rsi.yml` files made to cost time or memory (tests/hostile_configs.py), read as
the App reads them, against a real configuration read the same way.

    python bench/hostile_config.py

For each file: the parse's median time (`bot.repo_config.parse`, 5 reads) and its ratio
to the real file's, then `rsi-bot check-config` on it in its own process (exit code,
wall time, peak memory). A queue worker reading a hostile file is held for the parse
alone, once per blob (`ConfigCache` keeps the result by blob sha): that time is what
another repository's webhook can wait behind it.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot import repo_config  # noqa: E402
from tests.hostile_configs import HOSTILE  # noqa: E402

REAL = """gpus: [H100, H200]
rounds: auto
modes: [streaming, non-streaming]
thresholds: {practical_pct: 2, latency_p95_pct: 10}
budget: {max_rounds: 12, gpu_minutes: 60, max_running: 2}
watch:
  enabled: true
  tasks: [cosyvoice3, qwen3-tts]
  gpu_minutes_per_day: 240
"""


def parse_s(text: str, reads: int = 5) -> float:
    times = []
    for _ in range(reads):
        t0 = time.perf_counter()
        repo_config.parse(text)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def check_config(text: str) -> tuple[int, float, float]:
    """(exit code, seconds, peak MiB) of `rsi-bot check-config` on `text`."""
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "rsi.yml"
        f.write_text(text)
        probe = (
            "import resource, subprocess, sys, time;"
            "t = time.perf_counter();"
            "r = subprocess.run([sys.executable, '-m', 'bot.cli', 'check-config', sys.argv[1]],"
            " capture_output=True);"
            "print(r.returncode, time.perf_counter() - t,"
            " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
        )
        out = subprocess.run(
            [sys.executable, "-c", probe, str(f)], capture_output=True, text=True, cwd=ROOT
        ).stdout.split()
    return int(out[0]), float(out[1]), int(out[2]) / 1024


def main() -> None:
    real = parse_s(REAL)
    rc, wall, mib = check_config(REAL)
    print(f"{'file':28} {'bytes':>8} {'parse ms':>9} {'× real':>7} {'check-config':>22}")
    print(
        f"{'(a real config)':28} {len(REAL):8} {1000 * real:9.2f} {1.0:7.1f} "
        f"   exit {rc}, {wall:4.2f} s, {mib:4.0f} MiB"
    )
    for name, (text, _code) in sorted(HOSTILE.items()):
        t = parse_s(text)
        rc, wall, mib = check_config(text)
        print(
            f"{name:28} {len(text.encode()):8} {1000 * t:9.2f} {t / real:7.1f} "
            f"   exit {rc}, {wall:4.2f} s, {mib:4.0f} MiB"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"this process's peak: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
