"""The GPU, read through NVML (`pynvml` from nvidia-ml-py) or `nvidia-smi`, or not at all.

`detect()` picks the first that works: NVML when `pynvml` imports and initialises,
else `nvidia-smi` on PATH, else none (a CPU machine: nothing is sampled). The variable
`RSI_GPU_BACKEND` (`nvml`, `nvidia-smi`, `none`) forces one; `dry` is a simulated GPU
whose memory is what the dry servers hold (`DryGpu`).

Each backend gives samples (one per GPU: SM clock, utilisation, memory used, power,
throttle reasons), the compute processes on the GPUs, and static facts (name, count,
driver, CUDA, application and maximum clocks) for the fingerprint — of the GPUs
CUDA_VISIBLE_DEVICES gives the job only (`runners/devices.py`: NVML and nvidia-smi
themselves always list every GPU).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners import devices
from runners.dry.gpumem import FOLDER_VAR, H100_MIB, SIZE_VAR, held_mib
from runners.host import CpuLoad

# NVML's clock-event ("throttle") reason bits, named as in nvidia-smi -q.
THROTTLE_BITS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def throttle_names(mask: int | None) -> list[str]:
    if not mask:
        return []
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in THROTTLE_BITS)
    if rest:
        names.append(f"other_0x{rest:x}")
    return names


@dataclass
class GpuInfo:
    gpu_name: str | None = None
    gpu_count: int | None = None
    driver: str | None = None
    cuda: str | None = None
    gpu_memory_total_mib: int | None = None
    # Clocks of the first GPU read: the application (target) clocks the driver runs
    # the SM and memory at under load, and the SM's maximum.
    app_clock_mhz: int | None = None
    app_mem_clock_mhz: int | None = None
    max_clock_mhz: int | None = None


class Backend:
    name: str | None = None
    # The GPUs read (None: every GPU, CUDA_VISIBLE_DEVICES unset) and what to warn about.
    selection: devices.Selection | None = None
    note: str | None = None

    def indices(self) -> list[int] | None:
        """The indices (NVML / nvidia-smi, PCI bus order) of the GPUs read."""
        return None if self.selection is None else self.selection.indices

    def sample(self) -> list[dict[str, Any]]:
        """One dict per GPU: gpu, sm_clock_mhz, util_pct, mem_used_mib, power_w,
        throttle_reasons."""
        return []

    def processes(self) -> list[dict[str, Any]] | None:
        """Compute processes on the GPUs (pid, used_memory_mib); None if unknown."""
        return None

    def info(self) -> GpuInfo:
        return GpuInfo()

    def close(self) -> None:
        return None


class NoGpu(Backend):
    name = None


# ---------------------------------------------------------------------------- NVML


class Nvml(Backend):
    name = "nvml"

    def __init__(self, module: Any | None = None, env: Mapping[str, str] | None = None) -> None:
        self.nv: Any = module if module is not None else importlib.import_module("pynvml")
        self.nv.nvmlInit()
        n = int(self.nv.nvmlDeviceGetCount())
        gpu_handles = [self.nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        self._lock = threading.Lock()
        env = os.environ if env is None else env
        # (index, device handle, whole-GPU handle): a MIG device has its own memory and
        # processes, but clocks, power and throttling belong to the GPU it is part of.
        self.targets: list[tuple[int, Any, Any]] = [(i, h, h) for i, h in enumerate(gpu_handles)]
        if devices.VISIBLE_VAR in env:
            want_mig = any(
                e.startswith("MIG-") for e in devices.entries(env[devices.VISIBLE_VAR]) or []
            )
            gpus: list[devices.Gpu] = []
            mig_handles: dict[str, Any] = {}
            for i, h in enumerate(gpu_handles):
                migs = {self._uuid(m): m for m in self._migs(h)} if want_mig else {}
                mig_handles.update(migs)
                gpus.append(devices.Gpu(i, self._uuid(h), tuple(migs)))
            self.selection = devices.select(gpus, env)
            self.note = self.selection.note
            self.targets = [
                (
                    t.index,
                    mig_handles[t.uuid] if t.mig else gpu_handles[t.index],
                    gpu_handles[t.index],
                )
                for t in self.selection.targets
            ]
        self.handles = [h for _, h, _ in self.targets]

    def _uuid(self, h: Any) -> str:
        u = self._try("nvmlDeviceGetUUID", h)
        return (u.decode() if isinstance(u, bytes) else str(u)) if u is not None else ""

    def _migs(self, h: Any) -> list[Any]:
        """The MIG device handles of a GPU (none when MIG is off or unsupported)."""
        out = []
        for j in range(int(self._try("nvmlDeviceGetMaxMigDeviceCount", h) or 0)):
            m = self._try("nvmlDeviceGetMigDeviceHandleByIndex", h, j)
            if m is not None:
                out.append(m)
        return out

    def _try(self, fn: str, *args: Any) -> Any:
        f = getattr(self.nv, fn, None)
        if f is None:
            return None
        try:
            return f(*args)
        except Exception:  # NVMLError_NotSupported and friends: the field is unknown
            return None

    def _memory(self, h: Any) -> Any:
        """Memory info; v2 where NVML has it, whose `used` leaves out the driver's
        reservation (v1 counts it: 480 MiB more on an idle H100), as nvidia-smi does."""
        v2 = getattr(self.nv, "nvmlMemory_v2", None)
        if v2 is not None:
            mem = self._try("nvmlDeviceGetMemoryInfo", h, v2)
            if mem is not None:
                return mem
        return self._try("nvmlDeviceGetMemoryInfo", h)

    def sample(self) -> list[dict[str, Any]]:
        out = []
        with self._lock:
            for i, h, whole in self.targets:
                util = self._try("nvmlDeviceGetUtilizationRates", h)  # none for a MIG device
                mem = self._memory(h)
                power = self._try("nvmlDeviceGetPowerUsage", whole)
                reasons = self._try("nvmlDeviceGetCurrentClocksEventReasons", whole)
                if reasons is None:
                    reasons = self._try("nvmlDeviceGetCurrentClocksThrottleReasons", whole)
                sm = getattr(self.nv, "NVML_CLOCK_SM", 1)
                clock = self._try("nvmlDeviceGetClockInfo", whole, sm)
                out.append(
                    {
                        "gpu": i,
                        "sm_clock_mhz": int(clock) if clock is not None else None,
                        "util_pct": int(util.gpu) if util is not None else None,
                        "mem_used_mib": round(mem.used / 2**20) if mem is not None else None,
                        "power_w": round(power / 1000, 1) if power is not None else None,
                        "throttle_reasons": throttle_names(reasons),
                        **({"mig": True} if h is not whole else {}),
                    }
                )
        return out

    def processes(self) -> list[dict[str, Any]] | None:
        procs: list[dict[str, Any]] = []
        with self._lock:
            for i, h, _ in self.targets:
                got = self._try("nvmlDeviceGetComputeRunningProcesses", h)
                if got is None:
                    return None
                for p in got:
                    used = getattr(p, "usedGpuMemory", None)
                    procs.append(
                        {
                            "gpu": i,
                            "pid": int(p.pid),
                            "used_memory_mib": round(used / 2**20) if used else None,
                        }
                    )
        return procs

    def info(self) -> GpuInfo:
        def text(v: Any) -> str | None:
            if v is None:
                return None
            return v.decode() if isinstance(v, bytes) else str(v)

        with self._lock:
            whole = self.targets[0][2] if self.targets else None
            name = text(self._try("nvmlDeviceGetName", whole)) if whole is not None else None
            driver = text(self._try("nvmlSystemGetDriverVersion"))
            cuda_int = self._try("nvmlSystemGetCudaDriverVersion_v2")
            if cuda_int is None:
                cuda_int = self._try("nvmlSystemGetCudaDriverVersion")
            mem = self._memory(self.handles[0]) if self.handles else None
            clocks = [None, None, None]
            if whole is not None:
                graphics = getattr(self.nv, "NVML_CLOCK_GRAPHICS", 0)
                memory = getattr(self.nv, "NVML_CLOCK_MEM", 2)
                sm = getattr(self.nv, "NVML_CLOCK_SM", 1)
                clocks = [
                    self._try("nvmlDeviceGetApplicationsClock", whole, graphics),
                    self._try("nvmlDeviceGetApplicationsClock", whole, memory),
                    self._try("nvmlDeviceGetMaxClockInfo", whole, sm),
                ]
        cuda = f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}" if cuda_int else None
        app, app_mem, top = (int(c) if c is not None else None for c in clocks)
        return GpuInfo(
            gpu_name=name,
            gpu_count=len(self.handles),
            driver=driver,
            cuda=cuda,
            gpu_memory_total_mib=round(mem.total / 2**20) if mem is not None else None,
            app_clock_mhz=app,
            app_mem_clock_mhz=app_mem,
            max_clock_mhz=top,
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nv.nvmlShutdown()


# ---------------------------------------------------------------------- nvidia-smi

_QUERY = "index,clocks.sm,utilization.gpu,memory.used,power.draw,clocks_throttle_reasons.active"


def _num(s: str) -> float | None:
    s = s.strip()
    if not s or s.startswith("[") or s.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    try:
        return float(s)
    except ValueError:
        return None


def parse_query_gpu(text: str, with_reasons: bool = True) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=<_QUERY> --format=csv,noheader,nounits` → samples."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 5:
            continue
        idx, clock, util, mem, power = (_num(c) for c in cols[:5])
        reasons: list[str] = []
        if with_reasons and len(cols) > 5:
            try:
                reasons = throttle_names(int(cols[5], 16))
            except ValueError:
                reasons = []
        out.append(
            {
                "gpu": int(idx) if idx is not None else len(out),
                "sm_clock_mhz": int(clock) if clock is not None else None,
                "util_pct": int(util) if util is not None else None,
                "mem_used_mib": int(mem) if mem is not None else None,
                "power_w": round(power, 1) if power is not None else None,
                "throttle_reasons": reasons,
            }
        )
    return out


def parse_compute_apps(text: str) -> list[dict[str, Any]]:
    """`--query-compute-apps=pid,used_memory[,gpu_uuid]` (csv, no header, no units)."""
    out = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 2 or not cols[0].isdigit():
            continue
        used = _num(cols[1])
        row: dict[str, Any] = {"pid": int(cols[0]), "used_memory_mib": int(used) if used else None}
        if len(cols) > 2:
            row["gpu_uuid"] = cols[2]
        out.append(row)
    return out


def parse_smi_xml(text: str, index: int | None = None) -> GpuInfo:
    """`nvidia-smi -q -x` → name, count, driver, CUDA (the DTD is never fetched); name,
    memory and clocks of the GPU at `index` (its `<gpu>` elements are in index order)."""
    root = ET.fromstring(text)

    def find(el: ET.Element, path: str) -> str | None:
        v = el.findtext(path)
        return v.strip() if v and v.strip() and v.strip() != "N/A" else None

    def mhz(el: ET.Element | None, path: str) -> int | None:
        v = find(el, path) if el is not None else None
        n = _num(v.split()[0]) if v else None
        return int(n) if n is not None else None

    gpus = root.findall("gpu")
    count_text = find(root, "attached_gpus")
    mem_total = None
    gpu = gpus[index] if index is not None and 0 <= index < len(gpus) else None
    if gpu is None and gpus and index is None:
        gpu = gpus[0]
    if gpu is not None:
        total = find(gpu, "fb_memory_usage/total")
        if total:
            n = _num(total.split()[0])
            mem_total = int(n) if n is not None else None
    return GpuInfo(
        gpu_name=find(gpu, "product_name") if gpu is not None else None,
        gpu_count=int(count_text) if count_text and count_text.isdigit() else len(gpus),
        driver=find(root, "driver_version"),
        cuda=find(root, "cuda_version"),
        gpu_memory_total_mib=mem_total,
        app_clock_mhz=mhz(gpu, "applications_clocks/graphics_clock"),
        app_mem_clock_mhz=mhz(gpu, "applications_clocks/mem_clock"),
        max_clock_mhz=mhz(gpu, "max_clocks/sm_clock"),
    )


class Smi(Backend):
    name = "nvidia-smi"

    def __init__(self, exe: str, env: Mapping[str, str] | None = None) -> None:
        self.exe = exe
        self.with_reasons = True
        probe = self._run(f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits")
        if probe is None:  # an older or newer nvidia-smi without the reasons field
            self.with_reasons = False
            probe = self._run(f"--query-gpu={self._query()}", "--format=csv,noheader,nounits")
        if probe is None:
            raise RuntimeError(f"{exe} does not answer")
        env = os.environ if env is None else env
        self.gpu_uuids: dict[str, int] = {}
        if devices.VISIBLE_VAR in env:
            gpus = devices.parse_smi_list(self._run("-L") or "")
            if gpus:
                self.selection = devices.select(gpus, env)
                self.note = self.selection.note
                self.gpu_uuids = {g.uuid: g.index for g in gpus}
            else:
                self.note = (
                    f"{devices.VISIBLE_VAR} is set but `nvidia-smi -L` listed no GPU: "
                    "every GPU is read"
                )

    def _query(self) -> str:
        return _QUERY if self.with_reasons else _QUERY.rsplit(",", 1)[0]

    def _run(self, *args: str, timeout: float = 20.0) -> str | None:
        try:
            r = subprocess.run(
                [self.exe, *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout if r.returncode == 0 else None

    def sample(self) -> list[dict[str, Any]]:
        """Whole GPUs only: a MIG device is read as the GPU it is part of (nvidia-smi's
        queries have no per-MIG figures), so its neighbours' load is included."""
        out = self._run(f"--query-gpu={self._query()}", "--format=csv,noheader,nounits")
        rows = parse_query_gpu(out, self.with_reasons) if out else []
        want = self.indices()
        if want is None:
            return rows
        by_index = {r["gpu"]: r for r in rows}
        return [by_index[i] for i in want if i in by_index]

    def processes(self) -> list[dict[str, Any]] | None:
        fmt = "--format=csv,noheader,nounits"
        want = self.indices()
        if want is None:
            out = self._run("--query-compute-apps=pid,used_memory", fmt)
            return None if out is None else parse_compute_apps(out)
        out = self._run("--query-compute-apps=pid,used_memory,gpu_uuid", fmt)
        if out is None:
            return None
        procs = []
        for p in parse_compute_apps(out):
            i = self.gpu_uuids.get(str(p.pop("gpu_uuid", "")))
            if i in want:
                procs.append({"gpu": i, **p})
        return procs

    def info(self) -> GpuInfo:
        out = self._run("-q", "-x", timeout=60.0)
        if not out:
            return GpuInfo()
        want = self.indices()
        index = None if want is None else (want[0] if want else -1)  # -1: no GPU named
        try:
            info = parse_smi_xml(out, index)
        except ET.ParseError:
            return GpuInfo()
        if want is not None:
            info.gpu_count = len(self.selection.targets) if self.selection else len(want)
        return info


# ------------------------------------------------------------------- a simulated GPU


class DryGpu(Backend):
    """A simulated GPU's memory, for the dry tasks on a machine without one (CI).

    `RSI_GPU_BACKEND=dry` with `RSI_DRY_GPU=<folder>` (writable by the candidates'
    users: mode 1777) and `RSI_DRY_GPU_MIB` (its size; an 80 GB H100's by default). A dry
    server started with `--gpu-stage` (runners/dry/gpumem.py) takes its memory the way a
    serving engine does and writes what it holds into a file of that folder, locked for
    its life: the memory in use is the sum of the locked files (`held_mib`), so a killed
    server frees its memory and a frozen one keeps it. Clocks and power are constant,
    utilisation zero: nothing else of a GPU is simulated."""

    name = "dry"

    def __init__(self, folder: Path, total_mib: int = H100_MIB) -> None:
        self.folder = folder
        self.total_mib = total_mib

    @classmethod
    def from_env(cls, env: os._Environ[str] | dict[str, str] | None = None) -> DryGpu:
        env = os.environ if env is None else env
        folder = env.get(FOLDER_VAR)
        if not folder or not Path(folder).is_dir():
            raise RuntimeError(f"RSI_GPU_BACKEND=dry needs {FOLDER_VAR}, an existing folder")
        size = env.get(SIZE_VAR, "")
        return cls(Path(folder), int(size) if size.isdigit() else H100_MIB)

    def sample(self) -> list[dict[str, Any]]:
        return [
            {
                "gpu": 0,
                "sm_clock_mhz": 1980,
                "util_pct": 0,
                "mem_used_mib": held_mib(self.folder),
                "power_w": 100.0,
                "throttle_reasons": [],
            }
        ]

    def processes(self) -> list[dict[str, Any]] | None:
        return []

    def info(self) -> GpuInfo:
        return GpuInfo(
            gpu_name="Dry GPU (simulated memory)",
            gpu_count=1,
            gpu_memory_total_mib=self.total_mib,
            app_clock_mhz=1980,
            max_clock_mhz=1980,
        )


def detect(force: str | None = None) -> Backend:
    """The first GPU backend that works (see the module's docstring)."""
    want = (force or os.environ.get("RSI_GPU_BACKEND") or "").strip().lower()
    if want == "none":
        return NoGpu()
    if want == "dry":
        return DryGpu.from_env()
    if want in ("", "nvml"):
        try:
            return Nvml()
        except Exception:
            if want == "nvml":
                raise
    if want in ("", "nvidia-smi", "smi"):
        exe = shutil.which("nvidia-smi")
        if exe:
            try:
                return Smi(exe)
            except RuntimeError:
                if want:
                    raise
        elif want:
            raise RuntimeError("nvidia-smi is not on PATH")
    return NoGpu()


# ---------------------------------------------------------------------- idle wait


@dataclass
class IdleWait:
    idle: bool
    waited_s: float
    checks: int
    foreign: dict[str, Any] = field(default_factory=dict)  # the load seen at the last check

    def as_dict(self) -> dict[str, Any]:
        return {
            "idle": self.idle,
            "waited_s": round(self.waited_s, 3),
            "checks": self.checks,
            "foreign": self.foreign,
        }


def _load_of(backend: Backend) -> dict[str, Any]:
    samples = backend.sample()
    procs = backend.processes()
    return {
        "util_pct": max((s["util_pct"] or 0 for s in samples), default=None),
        "mem_used_mib": sum(s["mem_used_mib"] or 0 for s in samples) if samples else None,
        "processes": procs,
    }


def busy_reason(load: dict[str, Any], util_max: float, mem_max_mib: float) -> str | None:
    procs = load.get("processes") or []
    if procs:
        pids = ", ".join(str(p["pid"]) for p in procs[:5])
        return f"{len(procs)} compute process(es) on the GPU (pids {pids})"
    util = load.get("util_pct")
    if util is not None and util > util_max:
        return f"utilisation {util}% (> {util_max:g}%)"
    mem = load.get("mem_used_mib")
    if mem is not None and mem > mem_max_mib:
        return f"{mem} MiB of GPU memory in use (> {mem_max_mib:g} MiB)"
    return None


def wait_idle(
    backend: Backend,
    timeout_s: float,
    poll_s: float = 0.5,
    util_max: float | None = None,
    mem_max_mib: float | None = None,
    stable: int = 2,
) -> IdleWait:
    """Wait until the GPU is idle for `stable` checks in a row, or `timeout_s` passes."""
    if backend.name is None:
        return IdleWait(True, 0.0, 0, {})
    util_max = (
        util_max if util_max is not None else float(os.environ.get("RSI_GPU_IDLE_UTIL_PCT", 5))
    )
    mem_max_mib = (
        mem_max_mib
        if mem_max_mib is not None
        else float(os.environ.get("RSI_GPU_IDLE_MEM_MIB", 2048))
    )
    t0 = time.monotonic()
    checks = 0
    quiet = 0
    first_load: dict[str, Any] | None = None
    while True:
        load = _load_of(backend)
        checks += 1
        why = busy_reason(load, util_max, mem_max_mib)
        if first_load is None and why is not None:
            first_load = dict(load, reason=why)
        if why is None:
            quiet += 1
            if quiet >= stable:
                foreign = first_load or dict(load, reason=None)
                return IdleWait(True, time.monotonic() - t0, checks, foreign)
        else:
            quiet = 0
        if time.monotonic() - t0 >= timeout_s:
            return IdleWait(False, time.monotonic() - t0, checks, dict(load, reason=why))
        time.sleep(poll_s)


# ---------------------------------------------------------------------- monitor


class Monitor:
    """Samples the GPU and the job's CPUs in a background thread while a server runs."""

    def __init__(self, backend: Backend, interval_s: float = 1.0, max_samples: int = 600) -> None:
        self.backend = backend
        self.interval = interval_s
        self.max_samples = max_samples
        self.gpu_samples: list[dict[str, Any]] = []
        self.foreign_cores: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._cpu = CpuLoad()
        self._thread = threading.Thread(target=self._loop, name="rsi-monitor", daemon=True)

    def start(self) -> Monitor:
        self._t0 = time.monotonic()
        self._cpu = CpuLoad()
        self._tick()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self._tick(cpu=True)

    def _tick(self, cpu: bool = False) -> None:
        t = round(time.monotonic() - self._t0, 3)
        try:
            for s in self.backend.sample():
                self.gpu_samples.append({"t": t, **s})
        except Exception:
            self.errors += 1
        if cpu:
            try:
                f = self._cpu.window()
                if f is not None:
                    self.foreign_cores.append(f)
            except Exception:
                self.errors += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._tick(cpu=True)

    def summary(self) -> dict[str, Any]:
        samples = self.gpu_samples
        by_t: dict[float, int] = {}
        for s in samples:
            if s.get("mem_used_mib") is not None:
                by_t[s["t"]] = by_t.get(s["t"], 0) + s["mem_used_mib"]
        clocks = sorted(s["sm_clock_mhz"] for s in samples if s.get("sm_clock_mhz") is not None)
        utils = [s["util_pct"] for s in samples if s.get("util_pct") is not None]
        powers = [s["power_w"] for s in samples if s.get("power_w") is not None]
        reasons = sorted({r for s in samples for r in s.get("throttle_reasons") or []})
        kept = samples
        if len(samples) > self.max_samples:
            stride = -(-len(samples) // self.max_samples)
            times = sorted(by_t) or sorted({s["t"] for s in samples})
            keep_t = set(times[::stride])
            kept = [s for s in samples if s["t"] in keep_t]
        return {
            "peak_vram_mib": max(by_t.values()) if by_t else None,
            "gpu_samples": kept,
            "gpu_samples_total": len(samples),
            "sm_clock_mhz_min": clocks[0] if clocks else None,
            "sm_clock_mhz_median": clocks[len(clocks) // 2] if clocks else None,
            "util_pct_mean": round(sum(utils) / len(utils), 1) if utils else None,
            "power_w_max": max(powers) if powers else None,
            "throttle_reasons_seen": reasons,
            "foreign_peak_cores": round(max(self.foreign_cores), 4) if self.foreign_cores else None,
            "foreign_mean_cores": round(sum(self.foreign_cores) / len(self.foreign_cores), 4)
            if self.foreign_cores
            else None,
            "monitor_errors": self.errors,
        }
