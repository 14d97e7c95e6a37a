"""`--design alternate`: base and head resident on one GPU, taking turns in short bursts.

Sequential rounds start a server every round, and on the reference task about nine tenths of
a run's GPU time is that start-up; they also put minutes between a base run and its head
run, in which a shared VM's CPU speed moves (runners/README.md, "Noise on the H200").
Here each side's server is started once and kept resident; it is warmed up once for each
mode; the idle side is frozen (`cgroup.freeze`, or SIGSTOP on its process group without
isolation) while the other serves one burst. Bursts follow the balanced plan — base, head,
head, base, … — so the two runs of a pair are seconds apart, and the evidence engine
analyses them as pairs with an order term (docs/statistics.md, "Paired designs").

Each burst is one run record (`round` = the pair); the burst that follows a server's start
carries that start's time (`startup_s`, and in `run_s`), so `gpu_minutes` per side still
counts start-ups. Before the head starts, the base's memory is read: a task that takes
more than half the GPU cannot hold two servers, and the verification falls back to the
sequential design, saying why (`design.refused`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runners import bursts, host, memory, netns, outputs, proc, schedule
from runners.adaptive import throughput
from runners.failures import RunFailure
from runners.gpu import Backend, Monitor, wait_idle
from runners.serving import wall_clock
from runners.util import iso, write_json_atomic

if TYPE_CHECKING:
    from runners.sandbox import Group
    from runners.study import Study

MEMORY_FRACTION = memory.RESIDENT  # `{memory_fraction}` of each of the two resident servers
SEQUENTIAL_MEMORY_FRACTION = memory.SEQUENTIAL  # … and of the one server of a sequential run
ROW_PLACEHOLDERS = ("{mode}", "{concurrency}", "{requests}", "{round}")

SUMMARY = {
    "alternate": (
        "base and head servers started once and kept resident on one GPU; the idle one "
        "frozen while the other serves a burst; bursts alternate base, head, head, base, …"
    ),
    "crossover": (
        "base and head servers resident on each of two GPUs; a pair is two simultaneous "
        "bursts, base on one GPU and head on the other, the GPUs swapped every pair; the "
        "two servers not in the pair frozen"
    ),
    "sequential": (
        "a server start a side and round (a run, where the server's command changes with the "
        "row); rounds of base and head interleaved base, head, head, base, …"
    ),
}
ASSUMES = {
    "alternate": [
        "the host's speed changes more slowly than a pair of bursts (seconds)",
        "a frozen server does not slow the one serving (it holds memory, not compute; "
        "each has a network of its own, and the GPU is idle before every switch)",
        "whoever serves second in a pair gains or loses the same for either side "
        "(the order term removes it)",
    ],
    "crossover": [
        "the host's drift at one instant is common to both GPUs (the two bursts of a pair "
        "run at the same time, so it cancels)",
        "the two GPUs' speed difference is constant over two pairs (the swap and the GPU "
        "term remove it)",
        "the frozen servers do not slow the two serving (they hold memory, not compute; each "
        "has a network of its own; both GPUs are idle before every pair)",
    ],
    "sequential": [
        "the host's speed moves little between the base and head runs of a round (a "
        "round's two runs are a pair; who ran second is an order term)",
        "a level shift of the host between a round's two runs is rare (it widens the "
        "interval: such a pair is far out)",
    ],
}


RESIDENT = ("alternate", "crossover")  # the designs whose servers stay resident
PAIRED = (*RESIDENT, "sequential")  # … and those whose runs are analysed as pairs


def describe(name: str, **extra: Any) -> dict[str, Any]:
    """The manifest's `design` for a design name."""
    return {
        "name": name,
        "paired": name in PAIRED,
        "unit": "burst" if name in RESIDENT else "round",
        "summary": SUMMARY[name],
        "assumes": ASSUMES[name],
        **extra,
    }


CONTROL_SUMMARY = (
    "base against the base code again, resident in its own cgroup, in the head's place"
)


class Refused(Exception):
    """The alternate design cannot run here (two servers do not fit); sequential runs."""


@dataclass
class Resident:
    """One resident server: `slot` is base, head or control (the base code again, in the
    head's place); `side` whose code and user it runs (the control's is the base's)."""

    slot: str
    side: str
    server: proc.Process
    group: Group | None
    vals: dict[str, object]
    log: Path
    started_t: float
    record: dict[str, Any]
    frozen: bool = False
    fresh: bool = True  # the next burst is the first since it started: it carries the start
    pending_s: float = 0.0  # start-up and warm-up time not yet carried by a burst's run_s
    net: str | None = None  # its network namespace (`/proc/PID/ns/net`), when it has one
    warmed: set[str] = field(default_factory=set)  # modes warmed up


def freeze(res: Resident, on: bool, timeout: float = 10.0) -> None:
    """Freeze or thaw a resident server and everything it started, and wait until done."""
    if res.frozen == on:
        return
    if res.group is not None:
        (res.group.path / "cgroup.freeze").write_text("1" if on else "0")
        want = f"frozen {1 if on else 0}"
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with suppress(OSError):
                if want in (res.group.path / "cgroup.events").read_text().splitlines():
                    break
            time.sleep(0.002)
    else:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(res.server.pid, signal.SIGSTOP if on else signal.SIGCONT)
    res.frozen = on


def gpu_quiet(backend: Backend, timeout_s: float = 5.0, poll_s: float = 0.05) -> dict[str, Any]:
    """Wait until the GPU has run no kernel for two readings in a row, at most `timeout_s`.

    A frozen process runs no code, but the kernels it queued before it froze still run:
    a head that queues seconds of GPU work as its burst ends would otherwise slow the
    base's next burst. NVML's utilisation is the share of its last sample period (1/6 s
    to 1 s) in which a kernel ran, so two readings at or below the idle level mean the
    queue has drained, and nothing frozen can fill it again."""
    limit = float(os.environ.get("RSI_GPU_IDLE_UTIL_PCT", 5))
    t0 = time.monotonic()
    quiet = 0
    util: int | None = None
    while True:
        samples = backend.sample()
        utils = [s.get("util_pct") for s in samples]
        known = [u for u in utils if isinstance(u, int | float)]
        if not known:  # nothing to read (no GPU, a MIG slice): no wait
            return {"quiet": True, "waited_s": 0.0, "util_pct": None, "read": False}
        util = int(max(known))
        quiet = quiet + 1 if util <= limit else 0
        waited = time.monotonic() - t0
        if quiet >= 2:
            return {"quiet": True, "waited_s": round(waited, 3), "util_pct": util, "read": True}
        if waited >= timeout_s:
            return {"quiet": False, "waited_s": round(waited, 3), "util_pct": util, "read": True}
        time.sleep(poll_s)


def per_row(v: Study) -> bool:
    """Whether the server's command changes with the row (then each row has its own)."""
    s = v.task.server
    texts = [s.command, s.health, *s.env.values()]
    return any(p in t for t in texts for p in ROW_PLACEHOLDERS)


class Alternation:
    """Runs the plan with both servers resident; `Verifier.run` calls `run()`."""

    name = "alternate"

    def __init__(self, v: Study) -> None:
        self.v = v
        self.servers: dict[str, Resident] = {}
        self.records: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
        self.waited = False  # the GPU was seen idle before the first server started
        self.held_s = 0.0  # wall time any server was resident, for gpu_minutes.total
        self.held_since: float | None = None  # when the servers now resident began
        self.row: str | None = None
        self.starts = 0
        self.stop_reason: str | None = None
        self.control = v.o.control == "aa"
        self.active: str | None = None  # the slot that served the last burst
        # Resident side by side, a head that could reach the base's port would queue work
        # there while the base is frozen: each isolated server has a network of its own.
        self.own_net = v.sandbox.isolated
        # Which side's server starts (and is resident) first: from the verification id,
        # so across verifications each side goes first about half the time. The order is
        # recorded (`design.start_order`); the null control measures what it does.
        digest = hashlib.sha256(v.o.verification_id.encode()).digest()
        self.first = "head" if digest[0] % 2 else "base"
        self.control_runs: list[dict[str, Any]] = []
        # The burst length, sized after the first pairs (runners/bursts.py): rounds until
        # decided only, where a longer or shorter burst changes how soon, not how much.
        self.sizing: bursts.Sizing | None = None
        self.sizing_open = self.name == "alternate" and v.rounds.adaptive and v.o.burst_sizing
        self.first_pairs: bursts.Measured | None = None  # the task's length, while probing
        self.sizing_row: tuple[str, int] | None = None  # the row the length is tried on

    # ------------------------------------------------------------------ servers

    def _start(self, slot: str, p: schedule.Planned) -> Resident:
        v = self.v
        side = self._side(slot)
        device = self._device(slot)
        self.starts += 1
        label = f"resident-{slot}-{self.starts}"
        scratch = v.fresh_scratch(label)
        log = v.bundle.log_dir(label) / "server.log"
        t = time.monotonic()
        if self.held_since is None:
            self.held_since = t
        cpus = self._cpus(slot)
        s = v.launch_server(side, p, label, scratch, log, device=device, cpus=cpus)
        res = Resident(
            slot,
            side,
            s.process,
            s.group,
            dict(s.vals, scratch=str(scratch)),
            log,
            t,
            {
                "start": self.starts,
                "port": s.port,
                "health": s.health,
                "command": s.argv,
                "server_variant": s.variant,
                "log": v.bundle.rel(log),
                "started_at": iso(),
                "memory_fraction": s.vals.get("memory_fraction"),
                **{
                    k: s.vals[k]
                    for k in s.vals
                    if k == memory.FREE_PLACEHOLDER or k.startswith(memory.STAGE_PREFIX)
                },
                "network": v.sandbox.describe_net(s.group),
                **({"cuda_visible_devices": device} if device is not None else {}),
                **({"cpus": host.cpuset_spec(sorted(cpus))} if cpus else {}),
            },
        )
        res.net = s.net  # the runner holds the namespace open
        self.servers[slot] = res
        self.records.setdefault(slot, []).append(res.record)
        try:
            res.record["startup_s"] = round(
                v._wait_healthy(s.process, s.health, v.deadline, res.net), 4
            )
        except BaseException:
            self._end(res)  # never healthy: not left resident for the next burst to use
            raise
        res.pending_s += time.monotonic() - t
        return res

    def _unread(self, slot: str) -> None:
        """Say once that the GPU's memory could not be read around a server's start (with
        no GPU backend at all the verifier has said so already)."""
        if self.v.backend.name is None:
            return
        note = (
            "the GPU's memory could not be read around the servers' starts: whether they "
            "fit together was not checked, and each was given its share as if the GPU "
            "were empty ({mem_fraction_static} = {memory_fraction})"
        )
        if note not in self.v.warnings:
            self.v.warnings.append(note)

    def _compare_memory(self, slot: str, took: int) -> None:
        """A server that took far more or less than the first one did: their memory pools
        differ, and so may their speed (a share the command fixed, a stage that allocates
        before the engine sizes its pool, or the change itself)."""
        firsts = [r[0].get("vram_mib") for s, r in self.records.items() if s != slot and r]
        ref = next((f for f in firsts if isinstance(f, int) and f > 0), None)
        if ref is None or 0.8 * ref <= took <= 1.25 * ref:
            return
        first = next(s for s, r in self.records.items() if s != slot and r)
        self.v.warnings.append(
            f"the {first} server took {ref} MiB of GPU memory and the {slot} server {took} "
            "MiB: their memory pools differ, and so may their speed (a memory share the "
            "command fixes, a stage that allocates before the engine sizes its pool, or "
            "the change itself)"
        )

    def _others(self, slot: str) -> list[str]:
        """The slots whose servers start next to `slot`'s on its GPU."""
        slots = ["base", "head", "control"] if self.control else ["base", "head"]
        return [s for s in slots if s != slot]

    def _side(self, slot: str) -> str:
        """Whose code a slot's server runs (the control's is the base's)."""
        return "base" if slot == "control" else slot

    def _device(self, slot: str) -> str | None:
        """The GPU a slot's server is given (CUDA_VISIBLE_DEVICES); None: the runner's."""
        return None

    def _cpus(self, slot: str) -> frozenset[int] | None:
        """The cores a slot's server is pinned to; None: the placement's server half."""
        return None

    def _sampled(self, slot: str) -> Backend:
        """What a burst of `slot` samples (clocks, utilisation, power): the runner's GPUs."""
        return self.v.backend

    def _switch(self, slot: str) -> dict[str, Any] | None:
        """Before a burst of `slot`: wait until the GPU has run what another side queued."""
        switch = gpu_quiet(self.v.backend) if self.active not in (None, slot) else None
        self.active = slot
        return switch

    def _vram(self) -> tuple[int | None, int | None]:
        """GPU memory used now, and the GPU's total (MiB)."""
        samples = self.v.backend.sample()
        used = samples[0].get("mem_used_mib") if samples else None
        total = self.v.backend.info().gpu_memory_total_mib
        return (int(used) if isinstance(used, int | float) else None), total

    def _only(self, slot: str) -> None:
        """Freeze every resident server but `slot`'s."""
        for other in self.servers.values():
            if other.slot != slot:
                freeze(other, True)

    def _ensure(self, slot: str, p: schedule.Planned) -> Resident:
        """The slot's resident server, started (and warmed for the mode) when needed."""
        res = self.servers.get(slot)
        if res is not None and res.server.poll() is not None:
            self._end(res)  # it died: a new one takes its place
            res = None
        if res is None:
            first = not self.servers
            self._only(slot)
            before, total = self._vram()
            res = self._start(slot, p)
            after, _ = self._vram()
            if before is not None and after is not None:
                res.record["vram_mib"] = max(0, after - before)
            res.record["gpu_memory_total_mib"] = total
            took = res.record.get("vram_mib")
            if not total or not isinstance(took, int):
                self._unread(slot)
            elif first and after is not None:
                why = memory.others_fit(slot, took, after, total, self._others(slot))
                if why is not None:
                    n = len(self._others(slot)) + 1
                    raise Refused(
                        f"{why}: the {n} servers do not fit, so the sequential design ran"
                    )
            else:
                self._compare_memory(slot, took)
        if p.mode not in res.warmed and p.warmup_requests > 0:
            self._only(slot)
            freeze(res, False)
            t = time.monotonic()
            res.record.setdefault("warmup", {})[p.mode] = self._warm(res, p)
            res.pending_s += time.monotonic() - t
        res.warmed.add(p.mode)
        return res

    def _warm(self, res: Resident, p: schedule.Planned) -> dict[str, Any]:
        """Warm-up passes of a whole burst each (cheap on a resident server): a pass of a
        few requests leaves the first bursts of a mode still settling."""
        v = self.v
        p = dataclasses.replace(p, warmup_requests=max(p.warmup_requests, p.requests))
        scratch = Path(str(res.vals["scratch"]))
        vals = dict(res.vals, mode=p.mode, concurrency=p.concurrency)
        log = v.bundle.log_dir(f"resident-{res.slot}-{res.record['start']}") / "client.log"
        return v._warm_up(
            p, vals, scratch, v.client_env(vals), log, res.server, v.deadline, res.net
        )

    def _end(self, res: Resident) -> list[dict[str, Any]]:
        """Stop a resident server and its cgroup; once no server of its user is left, every
        process of that user too (the survivors, if any: they escaped their cgroup). The
        control runs as the base's user, so the base's end must not sweep it away."""
        freeze(res, False)
        rc = res.server.stop(self.v.task.server.stop_grace_s)
        res.record["exit"] = {"returncode": rc, "how": res.server.stopped_how}
        res.record["ended_at"] = iso()
        res.record["resident_s"] = round(time.monotonic() - res.started_t, 3)
        if self.servers.get(res.slot) is res:
            del self.servers[res.slot]
        if res.group is not None:
            res.group.kill()
        survivors: list[dict[str, Any]] = []
        if not any(o.side == res.side for o in self.servers.values()):
            survivors = self.v.sandbox.end(res.side, None)
        if survivors:
            res.record["survivors"] = survivors
        if not self.servers and self.held_since is not None:
            self.held_s += time.monotonic() - self.held_since
            self.held_since = None
        return survivors

    @property
    def servers_started(self) -> bool:
        return self.starts > 0

    def close(self) -> list[dict[str, Any]]:
        survivors: list[dict[str, Any]] = []
        for res in list(self.servers.values()):
            survivors += self._end(res)
        return survivors

    # ------------------------------------------------------------------ the plan

    def runs(self) -> Iterator[schedule.Planned]:
        return self.v.rounds.runs(lambda: self.v.bundle.runs)

    def run(self) -> str | None:
        """Every planned burst; the reason the schedule stopped early, or None."""
        v = self.v
        rows_share = per_row(v)
        why = netns.unavailable() if self.own_net else None
        if why is not None:
            raise Refused(
                f"this machine cannot give each resident server a network of its own ({why}), "
                "and without one a head could reach the base's port, so the sequential "
                "design ran"
            )
        try:
            for p in self.runs():
                v._check_signal()
                name = f"{p.mode} c{p.concurrency}"
                if name != self.row and self.row is not None and rows_share:
                    self.close()  # the server's command changes with the row
                self.row = name
                if self.stop_reason is None and time.monotonic() >= v.deadline:
                    self.stop_reason = (
                        f"the verification's total time limit ({v.total_timeout:.0f}s) was reached"
                    )
                if self.stop_reason is not None:
                    v.bundle.add(v._skipped(p, self.stop_reason))
                    continue
                if self.sizing is not None and self.sizing.chosen != self.sizing.initial:
                    n = bursts.for_row(self.sizing.chosen, p.concurrency)
                    p = dataclasses.replace(p, requests=n)
                rec = self.burst(p)
                if self.sizing_open and self._ends_pair(p):
                    self._size(p)
                if self.control and self._ends_pair(p) and time.monotonic() < v.deadline:
                    self._control_pair(p)
                if rec["status"] == "failed":
                    if rec.get("failure") == "total-time-limit":
                        self.stop_reason = (
                            f"the verification's total time limit ({v.total_timeout:.0f}s) "
                            "was reached"
                        )
                    elif rec.get("failure") == "refused":
                        raise Refused(str(rec.get("error")))
                    elif v.on_failure == "stop":
                        why = "(policy on_failure = stop)"
                        self.stop_reason = f"the schedule stopped after run {p.id} failed {why}"
        finally:
            survivors = self.close()
            if survivors:
                v.bundle.update(survivors=survivors)
            # recorded also when a signal or an error ended the schedule early
            if self.servers_started:
                starts = sorted(
                    (r["start"], slot) for slot, recs in self.records.items() for r in recs
                )
                sized = {"burst_sizing": self.sizing.record()} if self.sizing else {}
                v.bundle.update(
                    design=dict(
                        v._design(),
                        servers=self.records,
                        start_order=[slot for _, slot in starts],
                        **sized,
                    )
                )
                v.minutes = self.gpu_minutes
            if self.control:
                v.bundle.update(control=self.control_record())
        return self.stop_reason

    def _size(self, p: schedule.Planned) -> None:
        """After a pair of the first row: once `bursts.PAIRS` pairs of it measured well,
        propose a burst length (`bursts.size`); a length other than the task's is tried
        for `bursts.PAIRS` pairs of the row before the rest is sized (`bursts.after_probe`)."""
        pairs = self._pairs(p)
        if len(pairs) < bursts.PAIRS:
            return
        warm = pairs[0]["base"]["round"]  # the row's first pair carried the warm-up
        if self.sizing is None or self.first_pairs is None:
            first = pairs[: bursts.PAIRS]
            ratios, cvs, walls, held = self._measured(first, warm)
            self.sizing = bursts.size(p.requests, p.concurrency, ratios, cvs, walls, held)
            if self.sizing is None or self.sizing.chosen == self.sizing.initial:
                self.sizing_open = False
            else:
                self.sizing_row = (p.mode, p.concurrency)
                seconds = self._pair_seconds(first, warm)
                self.first_pairs = bursts.Measured(p.requests, ratios, seconds)
            return
        if (p.mode, p.concurrency) != self.sizing_row:
            return
        length = bursts.for_row(self.sizing.chosen, p.concurrency)
        tried = [x for x in pairs if x["base"].get("requests") == length]
        if len(tried) < bursts.PAIRS:
            return
        self.sizing_open = False
        ratios, _, _, _ = self._measured(tried, warm)
        probe = bursts.Measured(length, ratios, self._pair_seconds(tried, warm))
        self.sizing = bursts.after_probe(self.sizing, self.first_pairs, probe, p.concurrency)

    def _pairs(self, p: schedule.Planned) -> list[dict[str, dict[str, Any]]]:
        """The row's complete pairs that measured well, in round order."""
        got: dict[int, dict[str, dict[str, Any]]] = {}
        for r in self.v.bundle.runs:
            if r.get("mode") != p.mode or r.get("concurrency") != p.concurrency:
                continue
            if r.get("status") == "ok" and "speed" in r.get("files", {}):
                got.setdefault(int(r["round"]), {})[str(r["side"])] = r
        return [x for _, x in sorted(got.items()) if "base" in x and "head" in x]

    def _measured(
        self, pairs: list[dict[str, dict[str, Any]]], warm: int
    ) -> tuple[list[float], list[float], list[float], list[float]]:
        """The pairs' log ratios, and their bursts' latency CVs, walls and held seconds
        (walls of bursts that carried no start-up or warm-up)."""
        out = self.v.bundle.out
        ratios: list[float] = []
        cvs: list[float] = []
        walls: list[float] = []
        held: list[float] = []
        for pair in pairs:
            tp = {s: throughput(out / pair[s]["files"]["speed"]) for s in pair}
            if tp["base"] and tp["head"]:
                ratios.append(math.log(tp["head"] / tp["base"]))
            for r in pair.values():
                cv = bursts.latency_cv(out / r["files"]["speed"])
                if cv is not None:
                    cvs.append(cv)
                wall = r.get("wall_clock_s")
                if isinstance(wall, int | float) and not _carried(r, warm):
                    walls.append(float(wall))
                    held.append(float(r.get("run_s") or wall))
        return ratios, cvs, walls, held

    @staticmethod
    def _pair_seconds(pairs: list[dict[str, dict[str, Any]]], warm: int) -> list[float]:
        """GPU seconds each pair held, for the pairs neither of whose bursts carried a
        start-up or a warm-up."""
        got = []
        for pair in pairs:
            if any(_carried(r, warm) for r in pair.values()):
                continue
            secs = [r.get("run_s") or r.get("wall_clock_s") for r in pair.values()]
            if all(isinstance(x, int | float) for x in secs):
                got.append(float(sum(secs)))  # type: ignore[arg-type]
        return got

    @staticmethod
    def _ends_pair(p: schedule.Planned) -> bool:
        """Whether `p` is the second run of its pair (odd rounds: base then head)."""
        return p.side == ("head" if p.round % 2 else "base")

    def _control_pair(self, p: schedule.Planned) -> None:
        """The null control's pair of round `p.round`: the base against the base code again
        in the head's place, ordered as the real pair was."""
        order = ("base", "control") if p.round % 2 else ("control", "base")
        for slot in order:
            side = "head" if slot == "control" else "base"
            cid = f"ctl-{schedule.run_id(side, p.round, p.mode, p.concurrency)}"
            q = dataclasses.replace(p, id=cid, side=side)
            self.control_runs.append(self.burst(q, slot=slot, add=False))

    def control_record(self) -> dict[str, Any] | None:
        """The manifest's `control` (None without one)."""
        if not self.control:
            return None
        from runners.adaptive import held_minutes

        return {
            "kind": "aa",
            "summary": CONTROL_SUMMARY,
            "runs": self.control_runs,
            "gpu_minutes": held_minutes(self.control_runs)["total"],
        }

    def burst(
        self, p: schedule.Planned, slot: str | None = None, add: bool = True
    ) -> dict[str, Any]:
        """One burst of one slot (default: the run's side): thaw it, the others frozen, run
        the client, freeze it. `add`: record it among the bundle's runs."""

        slot = slot or p.side
        v = self.v
        rdir = v.bundle.run_dir(p.id)
        client_log = v.bundle.log_dir(p.id) / "client.log"
        rec: dict[str, Any] = dict(p.record())
        rec.update(
            {"status": "ok", "run_started_at": iso(), "accuracy": False, "files": {}, "logs": {}}
        )
        t0 = time.monotonic()
        info: dict[str, Any] = {
            "design": self.name,
            "startup_s": None,
            "peak_vram_mib": None,
            "gpu_backend": v.backend.name,
            "cpuset": host.cpuset_spec(host.cpuset()),
        }
        failure: RunFailure | None = None
        res: Resident | None = None
        try:
            if not self.waited:
                wait = wait_idle(v.backend, v.gpu_idle_timeout)
                rec["gpu_wait_s"] = round(wait.waited_s, 3)
                info["gpu_wait"] = wait.as_dict()
                if not wait.idle:
                    raise RunFailure(
                        "gpu-busy",
                        f"the GPU stayed busy for {wait.waited_s:.0f}s "
                        f"({wait.foreign.get('reason')}); the run was not started",
                        last="gpu",
                    )
                self.waited = True
                t0 = time.monotonic()
            if not self.servers and slot != self.first and self.first in ("base", "head"):
                self._ensure(self.first, p)  # the side that starts first, rotated
            res = self._ensure(slot, p)
            t0 = time.monotonic()  # start-ups and warm-ups are carried below, once each
            rec["logs"]["server"] = res.record["log"]
            if res.fresh:
                res.fresh = False
                info["startup_s"] = res.record.get("startup_s")
                info["warmup"] = (res.record.get("warmup") or {}).get(p.mode)
            info["resident"] = {"slot": slot, "start": res.record["start"]}
            info["peak_vram_mib"] = res.record.get("vram_mib")
            self._only(slot)
            # after another side served, its queued GPU work must be done before this one
            switch = self._switch(slot)
            info["switch"] = switch
            if switch is not None and not switch["quiet"]:
                raise RunFailure(
                    "gpu-busy",
                    f"the GPU was still busy {switch['waited_s']:.1f}s after the other servers "
                    f"were frozen ({switch['util_pct']}% utilised): work they had queued would "
                    "have run during this burst, which was not started",
                    last="gpu",
                )
            freeze(res, False)
            cores = self._cpus(slot) or (v.placement.server if v.placement else None)
            info["host_cpu_ms"] = host.loop_ms(min(cores) if cores else None)
            monitor = Monitor(self._sampled(slot), v.o.sample_interval_s).start()
            scratch = Path(str(res.vals["scratch"]))
            bvals = dict(
                res.vals,
                mode=p.mode,
                concurrency=p.concurrency,
                requests=p.requests,
                round=p.round,
                out=str(scratch / f"bench-{p.id}"),
            )
            v.sandbox.private(scratch / f"bench-{p.id}")
            try:
                fin = v._client(
                    "benchmark",
                    v.task.benchmark.modes[p.mode],
                    bvals,
                    v.client_env(bvals),
                    client_log,
                    res.server,
                    v.task.benchmark.timeout_s,
                    time.monotonic() + v.run_timeout,
                    res.net,
                )
            finally:
                monitor.stop()
                summary = monitor.summary()
                summary.pop("peak_vram_mib", None)  # both servers' memory; the side's is above
                info.update(summary)
                freeze(res, True)
            rec["started_at"], rec["ended_at"] = iso(fin.started), iso(fin.ended)
            rec["runner_wall_s"] = round(fin.wall_s, 4)
            src = v.benchmark_output(bvals)
            dest = rdir / src.name
            shutil.copyfile(src, dest)
            rec["files"]["speed"] = v.bundle.rel(dest)
            extra, missing = outputs.keep(v.task.benchmark, bvals, rdir, v.bundle.rel)
            rec["files"].update(extra)
            if missing:
                raise RunFailure(
                    "no-output",
                    f"the benchmark client exited 0 but wrote no {', '.join(missing)}",
                    last="client",
                )

            rec["wall_clock_s"], rec["wall_clock_source"] = wall_clock(dest, fin.wall_s)
        except Refused as exc:
            failure = RunFailure("refused", str(exc))
        except RunFailure as exc:
            failure = exc
        finally:
            spath = rdir / "server.json"
            write_json_atomic(spath, info, indent=None)
            rec["files"]["server"] = v.bundle.rel(spath)
            rec["run_ended_at"] = iso()
            # the burst's own time, and the start-up and warm-ups it is the first to follow
            carried = 0.0
            if res is not None:
                carried, res.pending_s = res.pending_s, 0.0
            rec["run_s"] = round(time.monotonic() - t0 + carried, 3)
            rec["startup_s"] = info.get("startup_s")
            rec.setdefault("gpu_wait_s", 0.0)
            if failure is not None:
                rec["status"] = "failed"
                rec["failure"] = failure.kind
                rec["error"] = failure.message
                rec["log_tail"] = v._log_tail(
                    failure, res.log if res else client_log, client_log, info
                )
                rec.setdefault("started_at", rec["run_started_at"])
                rec.setdefault("ended_at", rec["run_ended_at"])
                rec.setdefault("wall_clock_s", None)
            rec["logs"] = {k: x for k, x in rec["logs"].items() if (v.bundle.out / x).is_file()}
            if client_log.is_file():
                rec["logs"]["client"] = v.bundle.rel(client_log)
            if add and (failure is None or failure.kind != "refused"):
                v.bundle.add(rec)
        return rec

    def gpu_minutes(self, runs: list[dict[str, Any]]) -> dict[str, float]:
        """Each side's start-ups and bursts; the total is the time servers were resident."""
        from runners.adaptive import held_minutes

        m = held_minutes(runs)
        m["total"] = round(max(m["total"], self.held_s / 60.0), 4)
        return m


def _carried(r: dict[str, Any], warm: int) -> bool:
    """Whether burst `r` carried its server's start-up or its row's warm-up (the row's
    first pair, round `warm`): its time is not a burst's cost."""
    return r.get("startup_s") is not None or r.get("round") == warm
