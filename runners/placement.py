"""Where the server and the benchmark client run: disjoint cores, near the GPU.

Round-to-round noise on a GPU server comes partly from the host: the client's threads
and the server's tokeniser, scheduler and HTTP threads competing for the same cores,
and memory traffic across NUMA nodes. With `--cpu-placement split` (the default) the
runner gives the server and the client disjoint halves of the job's cores, taken from
the GPU's NUMA node when the machine says which one it is; every process each of them
starts inherits its half. The manifest records the split, so both sides are seen to
have had the same.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from runners.host import cpuset_spec

MODES = ("split", "none")


@dataclass(frozen=True)
class Placement:
    server: frozenset[int]
    client: frozenset[int]
    numa_node: int | None

    def describe(self) -> dict[str, object]:
        return {
            "mode": "split",
            "server": cpuset_spec(sorted(self.server)),
            "client": cpuset_spec(sorted(self.client)),
            "numa_node": self.numa_node,
        }


def parse_cpulist(text: str) -> set[int]:
    """`0-3,8,10-11` → {0, 1, 2, 3, 8, 10, 11}."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def gpu_numa_node(indices: list[int] | None, sysfs: Path = Path("/sys")) -> int | None:
    """The NUMA node of the job's first GPU (None: unknown, or the machine has one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        r = subprocess.run(
            [smi, "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in r.stdout.splitlines():
        idx, _, bus = (x.strip() for x in line.partition(","))
        if not idx.isdigit() or (indices is not None and int(idx) not in indices):
            continue
        domain, _, rest = bus.partition(":")
        node_file = (
            sysfs / "bus" / "pci" / "devices" / f"{domain[-4:]}:{rest}".lower() / "numa_node"
        )
        try:
            node = int(node_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return node if node >= 0 else None
    return None


def node_cpus(node: int, sysfs: Path = Path("/sys")) -> set[int]:
    try:
        return parse_cpulist(
            (sysfs / "devices" / "system" / "node" / f"node{node}" / "cpulist").read_text()
        )
    except (OSError, ValueError):
        return set()


def plan(
    cpus: list[int], near: set[int] | None = None, node: int | None = None
) -> Placement | None:
    """Disjoint halves of `cpus` (those in `near` first); None with fewer than two."""
    pool = [c for c in cpus if near and c in near] or list(cpus)
    if len(pool) < 2:
        return None
    half = (len(pool) + 1) // 2
    return Placement(frozenset(pool[:half]), frozenset(pool[half:]), node)


def pin(pid: int, cpus: frozenset[int] | None) -> None:
    """Put a just-started process (and so everything it starts) on `cpus`."""
    if cpus:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, cpus)
