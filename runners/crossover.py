"""`--design crossover`: base and head measured at the same time on two GPUs, swapped.

On a shared VM the host's speed moves within seconds to minutes (runners/README.md,
"Noise on the H200"). The alternate design puts a base burst and its head burst seconds
apart on one GPU; here they run at the same instant, on two GPUs of one host, so a drift
of the host falls on both at once. Each side has a resident server on each GPU (four in
all, each in its own cgroup and network, pinned to its GPU by CUDA_VISIBLE_DEVICES); a
pair is two simultaneous bursts, base on one GPU and head on the other, the two servers
not in the pair frozen, and the next pair swaps the GPUs (odd rounds base on the first
GPU, even rounds on the second).

The evidence engine analyses the runs as pairs with the order term of the alternate
design (docs/statistics.md, "Paired designs"): each pair's runs are recorded in GPU order
(the first GPU's run, then the second's), so "the head ran second" reads "the head was on
the second GPU" — the GPU is the block, and its term removes the two GPUs' difference.
Each run records its GPU (`gpu_index`), its pair (`pair`, the round) and its burst's start and
end (`started_at`, `ended_at`).

With fewer than two whole GPUs the design is refused and the alternate design runs; a
server that takes more than half a GPU's memory refuses it too, and the sequential design
runs (`design.refused`, `design.refused_design`).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runners import memory, netns, schedule
from runners.failures import RunFailure
from runners.gpu import Backend, GpuInfo, wait_idle
from runners.resident import (
    Alternation,
    Refused,
    Resident,
    freeze,
    gpu_quiet,
    per_row,
)
from runners.util import iso

if TYPE_CHECKING:
    from runners.study import Study


class OneGpu(Backend):
    """The runner's backend read for one GPU only: what a burst on that GPU samples."""

    def __init__(self, backend: Backend, index: int) -> None:
        self.backend = backend
        self.index = index
        self.name = backend.name

    def sample(self) -> list[dict[str, Any]]:
        return [s for s in self.backend.sample() if s.get("gpu") == self.index]

    def processes(self) -> list[dict[str, Any]] | None:
        return self.backend.processes()

    def info(self) -> GpuInfo:
        return self.backend.info()


def gpus_of(v: Study) -> list[int]:
    """The whole GPUs the runner was given, by index (PCI bus order, as CUDA numbers them
    under CUDA_DEVICE_ORDER=PCI_BUS_ID): the selection's, else every GPU the backend reads."""
    sel = v.backend.selection
    if sel is not None:
        return list(dict.fromkeys(t.index for t in sel.targets if not t.mig))
    seen = [s.get("gpu") for s in v.backend.sample()]
    return list(dict.fromkeys(i for i in seen if isinstance(i, int)))


class Crossover(Alternation):
    """Runs the plan as simultaneous pairs on two GPUs; `Verifier.run` calls `run()`."""

    name = "crossover"

    def __init__(self, v: Study) -> None:
        super().__init__(v)
        self.control = False  # a null control needs the alternate design
        self.first = ""  # servers start in the pair's order, before its bursts
        self.gpus: list[int] = []
        self.pair: set[str] = set()  # the slots serving now (the others stay frozen)
        self.fallback = "alternate"  # the design that runs if this one is refused

    # ------------------------------------------------------------------ slots

    @staticmethod
    def slot(side: str, gpu: int) -> str:
        return f"{side}@{gpu}"

    def _side(self, slot: str) -> str:
        return slot.split("@", 1)[0]

    def _device(self, slot: str) -> str | None:
        return slot.split("@", 1)[1]

    def _cpus(self, slot: str) -> frozenset[int] | None:
        """The first GPU's servers on the first half of the servers' cores, the second's on
        the other half: base and head serving at once do not share cores, and the halves
        swap with the GPUs (with fewer than two cores, or no placement: the runner's)."""
        pl = self.v.placement
        if pl is None or len(pl.server) < 2:
            return None
        cores = sorted(pl.server)
        half = (len(cores) + 1) // 2
        on_first = self.placed_slot(slot) == self.gpus[0]
        return frozenset(cores[:half] if on_first else cores[half:])

    def _sampled(self, slot: str) -> Backend:
        return OneGpu(self.v.backend, self.placed_slot(slot))

    def _switch(self, slot: str) -> dict[str, Any] | None:
        return None  # both GPUs were waited for before the pair (`run`)

    def _only(self, slot: str) -> None:
        keep = self.pair or {slot}
        for other in self.servers.values():
            if other.slot not in keep:
                freeze(other, True)

    def _vram_on(self, gpu: int) -> int | None:
        for s in self.v.backend.sample():
            if s.get("gpu") == gpu and isinstance(s.get("mem_used_mib"), int | float):
                return int(s["mem_used_mib"])
        return None

    def _ensure(self, slot: str, p: schedule.Planned) -> Resident:
        res = self.servers.get(slot)
        if res is not None and res.server.poll() is not None:
            self._end(res)
            res = None
        if res is None:
            gpu = int(slot.split("@", 1)[1])
            first = not any(o.slot.endswith(f"@{gpu}") for o in self.servers.values())
            self._only(slot)
            before = self._vram_on(gpu)
            total = self.v.backend.info().gpu_memory_total_mib
            res = self._start(slot, p)
            after = self._vram_on(gpu)
            if before is not None and after is not None:
                res.record["vram_mib"] = max(0, after - before)
            res.record["gpu_memory_total_mib"] = total
            took = res.record.get("vram_mib")
            if first and total and after is not None and isinstance(took, int):
                other = "head" if res.side == "base" else "base"
                why = memory.others_fit(res.side, took, after, total, [other])
                if why is not None:
                    self.fallback = "sequential"
                    raise Refused(
                        f"on GPU {gpu}, {why}: two servers do not fit a GPU, so the "
                        "sequential design ran"
                    )
        if p.mode not in res.warmed and p.warmup_requests > 0:
            self._only(slot)
            freeze(res, False)
            t = time.monotonic()
            res.record.setdefault("warmup", {})[p.mode] = self._warm(res, p)
            res.pending_s += time.monotonic() - t
            freeze(res, True)
        res.warmed.add(p.mode)
        return res

    # ------------------------------------------------------------------ the plan

    def run(self) -> str | None:
        """Every planned pair; the reason the schedule stopped early, or None."""
        v = self.v
        self.gpus = gpus_of(v)[:2]
        if len(self.gpus) < 2:
            seen = f"{len(self.gpus)} GPU" + ("" if len(self.gpus) == 1 else "s")
            raise Refused(
                f"the crossover needs two whole GPUs and the runner was given {seen}, "
                "so the alternate design ran"
            )
        why = netns.unavailable() if self.own_net else None
        if why is not None:
            self.fallback = "sequential"
            raise Refused(
                f"this machine cannot give each resident server a network of its own ({why}), "
                "and without one a head could reach the base's port, so the sequential "
                "design ran"
            )
        rows_share = per_row(v)
        try:
            it = iter(self.runs())
            for p in it:
                q = next(it)  # the other side of the same round: the plan yields pairs
                v._check_signal()
                name = f"{p.mode} c{p.concurrency}"
                if name != self.row and self.row is not None and rows_share:
                    self.close()
                self.row = name
                if self.stop_reason is None and time.monotonic() >= v.deadline:
                    self.stop_reason = (
                        f"the verification's total time limit ({v.total_timeout:.0f}s) was reached"
                    )
                if self.stop_reason is not None:
                    for r in (p, q):
                        v.bundle.add(v._skipped(r, self.stop_reason))
                    continue
                for rec in self.pair_of(p, q):
                    self._after(rec)
        finally:
            self.pair = set()
            survivors = self.close()
            if survivors:
                v.bundle.update(survivors=survivors)
            if self.servers_started:
                by_side: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
                for slot, recs in self.records.items():
                    if "@" in slot:
                        by_side[self._side(slot)] += recs
                for recs in by_side.values():
                    recs.sort(key=lambda r: r["start"])
                starts = sorted((r["start"], s) for s, recs in by_side.items() for r in recs)
                v.bundle.update(
                    design=dict(
                        v._design(),
                        gpus=self.gpus,
                        servers=by_side,
                        start_order=[s for _, s in starts],
                    )
                )
                v.minutes = self.gpu_minutes
        return self.stop_reason

    def _after(self, rec: dict[str, Any]) -> None:
        v = self.v
        if rec["status"] != "failed" or self.stop_reason is not None:
            return
        if rec.get("failure") == "total-time-limit":
            self.stop_reason = (
                f"the verification's total time limit ({v.total_timeout:.0f}s) was reached"
            )
        elif v.on_failure == "stop":
            self.stop_reason = (
                f"the schedule stopped after run {rec['id']} failed (policy on_failure = stop)"
            )

    def placed(self, p: schedule.Planned) -> int:
        """The GPU `p` runs on: odd rounds base on the first GPU, even rounds the second."""
        base_first = p.round % 2 == 1
        on_first = (p.side == "base") == base_first
        return self.gpus[0] if on_first else self.gpus[1]

    def pair_of(self, p: schedule.Planned, q: schedule.Planned) -> list[dict[str, Any]]:
        """One pair: both servers started (and warmed) if needed, then both bursts at the
        same time; the records added in GPU order (the first GPU's run first)."""
        v = self.v
        runs = sorted((p, q), key=lambda r: self.gpus.index(self.placed(r)))
        slots = [self.slot(r.side, self.placed(r)) for r in runs]
        if not self.waited:
            wait = wait_idle(v.backend, v.gpu_idle_timeout)
            if not wait.idle:
                msg = (
                    f"the GPUs stayed busy for {wait.waited_s:.0f}s "
                    f"({wait.foreign.get('reason')}); the pair was not started"
                )
                return [self._failed(r, "gpu-busy", msg, wait.waited_s) for r in runs]
            self.waited = True

        try:
            for r, slot in zip(runs, slots, strict=True):
                self._ensure(slot, r)
        except RunFailure as exc:
            return [self._failed(r, exc.kind, exc.message, 0.0) for r in runs]
        self.pair = set(slots)
        self._only(slots[0])  # every server outside the pair frozen
        switch = gpu_quiet(v.backend)  # both GPUs: what the last pair queued has run
        out: list[dict[str, Any] | None] = [None, None]
        errors: list[BaseException] = []

        def one(i: int) -> None:
            try:
                out[i] = self.burst(runs[i], slot=slots[i], add=False)
            except BaseException as exc:  # a runner bug: raised again in the main thread
                errors.append(exc)

        try:
            if not switch["quiet"]:
                msg = (
                    f"the GPUs were still busy {switch['waited_s']:.1f}s after the other "
                    f"servers were frozen ({switch['util_pct']}% utilised): the pair was not "
                    "started"
                )
                return [self._failed(r, "gpu-busy", msg, 0.0) for r in runs]
            threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            self.pair = set()
        if errors:
            raise errors[0]
        recs = [r for r in out if r is not None]
        check = self.gpu_check()
        for rec, slot in zip(recs, slots, strict=True):
            rec["gpu_index"] = self.placed_slot(slot)
            rec["pair"] = rec["round"]
            rec["switch"] = switch
            rec["gpu_check"] = check
            if check["crossed"] and rec["status"] == "ok":
                rec["status"] = "failed"
                rec["failure"] = "crossed-gpu"
                rec["error"] = "; ".join(check["crossed"]) + ": the pair was not measured apart"
            v.bundle.add(rec)
        return recs

    def _owner(self, pid: int) -> Resident | None:
        """The resident server `pid` belongs to: by its cgroup, else by its process group."""
        pgrp: int | None = None
        for res in self.servers.values():
            if res.group is not None:
                if pid in res.group.pids():
                    return res
                continue
            if pgrp is None:
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    pgrp = int(stat.rsplit(")", 1)[1].split()[2])
                except (OSError, ValueError, IndexError):
                    return None
            if pgrp == res.server.pid:
                return res
        return None

    def gpu_check(self) -> dict[str, Any]:
        """After a pair: whether a server had a process on the other GPU.
        CUDA_VISIBLE_DEVICES is all that keeps a server on its GPU; a head that opened
        the base's GPU and queued work there would slow the base in the same instant.
        `read`: whether the GPUs' compute processes could be read with their GPU."""
        procs = self.v.backend.processes()
        known = [p for p in procs or [] if isinstance(p.get("gpu"), int)]
        crossed: list[str] = []
        for pr in known:
            pid = pr.get("pid")
            res = self._owner(pid) if isinstance(pid, int) else None
            if res is None:
                continue
            own = self.placed_slot(res.slot)
            if own != pr["gpu"]:
                crossed.append(
                    f"the {res.side} server given GPU {own} had a process (pid {pid}) on "
                    f"GPU {pr['gpu']}"
                )
        return {"read": procs is not None and (not procs or bool(known)), "crossed": crossed}

    @staticmethod
    def placed_slot(slot: str) -> int:
        return int(slot.split("@", 1)[1])

    def _failed(
        self, p: schedule.Planned, kind: str, message: str, waited_s: float
    ) -> dict[str, Any]:
        rec: dict[str, Any] = dict(p.record())
        now = iso()
        rec.update(
            {
                "status": "failed",
                "failure": kind,
                "error": message,
                "gpu_index": self.placed(p),
                "pair": p.round,
                "run_started_at": now,
                "run_ended_at": now,
                "started_at": now,
                "ended_at": now,
                "wall_clock_s": None,
                "run_s": 0.0,
                "startup_s": None,
                "gpu_wait_s": round(waited_s, 3),
                "accuracy": False,
                "files": {},
                "logs": {},
            }
        )
        self.v.bundle.add(rec)
        return rec

    def gpu_minutes(self, runs: list[dict[str, Any]]) -> dict[str, float]:
        """Each side's start-ups and bursts; the total is the time servers were resident,
        on both GPUs (two GPUs held the whole time)."""
        from runners.adaptive import held_minutes

        m = held_minutes(runs)
        m["total"] = round(max(m["total"], 2 * self.held_s / 60.0), 4)
        return m
