"""CPU load on the job's cores, split into ours and everybody else's.

As in SGLang-Omni's CI contention report: the busy ticks of the CPUs this job may use
(/proc/stat, per CPU) minus the ticks of the runner's own process tree (/proc/<pid>/stat,
with reaped children counted through their parent's cutime/cstime) are *foreign* load,
in cores. `cpuset_busy_prelaunch` is that foreign load over the wait before the server
starts (the GPU idle check, at least one second); `foreign_peak_cores` the highest
window while it runs.

`loop_ms` times a fixed pure-Python loop on the server's first core (where the reference
server's engine runs): the host CPU's own speed before each round. On the H200 cloud VM
it moved 2–26% (CV) between repetitions with nothing else running in the VM.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

from runners.proc import stat_fields


def cpuset() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def cpuset_spec(cpus: list[int]) -> str:
    """`[0, 1, 2, 5]` → `0-2,5`."""
    parts: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


def busy_ticks(cpus: set[int]) -> int | None:
    """Non-idle ticks accumulated on `cpus`; None without /proc/stat."""
    total = 0
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as f:
            for line in f:
                if not (line.startswith("cpu") and line[3:4].isdigit()):
                    continue
                parts = line.split()
                if int(parts[0][3:]) not in cpus:
                    continue
                # user nice system idle iowait irq softirq steal (guest is inside user)
                nums = [int(x) for x in parts[1:9]]
                total += sum(nums) - nums[3] - nums[4]
    except (OSError, ValueError):
        return None
    return total


def py_loop(n: int) -> float:
    """Seconds for `n` additions in pure Python: a fixed amount of one core's work."""
    t0 = time.perf_counter()
    acc = 0
    for i in range(n):
        acc += i
    return time.perf_counter() - t0


def loop_ms(core: int | None = None, reps: int = 5, n: int = 200_000) -> float:
    """Median milliseconds of a fixed pure-Python loop (~10 ms each on a server CPU), on
    `core` when given: the vCPUs of one VM can differ 1.7× at the same moment."""
    saved = None
    times: list[float] = []
    try:  # pinned inside the try: an interrupt right after pinning still restores
        if core is not None and hasattr(os, "sched_setaffinity"):
            with contextlib.suppress(OSError):
                saved = os.sched_getaffinity(0)
                os.sched_setaffinity(0, {core})
        times = [py_loop(n) for _ in range(reps)]
    finally:
        if saved is not None:
            os.sched_setaffinity(0, saved)
    return round(sorted(times)[reps // 2] * 1000, 3)


@dataclass(frozen=True)
class _Proc:
    ppid: int
    ticks: int
    child_ticks: int
    start: int


def _procs() -> dict[int, _Proc]:
    out: dict[int, _Proc] = {}
    for pid, r in stat_fields():
        try:
            out[pid] = _Proc(
                int(r[1]), int(r[11]) + int(r[12]), int(r[13]) + int(r[14]), int(r[19])
            )
        except (ValueError, IndexError):
            continue
    return out


def _tree(procs: dict[int, _Proc], root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for pid, p in procs.items():
        kids.setdefault(p.ppid, []).append(pid)
    out, todo = {root}, [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


class CpuLoad:
    """Foreign load, window by window: call `window()` at each sample."""

    def __init__(self, cpus: list[int] | None = None, root: int | None = None) -> None:
        self.cpus = set(cpus if cpus is not None else cpuset())
        self.root = root or os.getpid()
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._busy = busy_ticks(self.cpus)
        self._procs = _procs()
        self._t = time.monotonic()
        self.available = self._busy is not None

    def window(self) -> float | None:
        """Foreign cores since the last call (or since construction)."""
        busy = busy_ticks(self.cpus)
        procs = _procs()
        now = time.monotonic()
        if busy is None or self._busy is None or now <= self._t:
            return None
        tree = _tree(procs, self.root)
        ours = 0
        for pid in tree:
            cur = procs.get(pid)
            if cur is None:
                continue
            before = self._procs.get(pid)
            if before is not None and before.start == cur.start:
                ours += max(0, cur.ticks - before.ticks) + max(
                    0, cur.child_ticks - before.child_ticks
                )
            else:
                ours += cur.ticks + cur.child_ticks
        foreign = max(0, (busy - self._busy) - ours) / self.hz / (now - self._t)
        self._busy, self._procs, self._t = busy, procs, now
        return foreign
