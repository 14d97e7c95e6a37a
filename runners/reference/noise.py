"""Where does round-to-round variance come from? The H200 noise study of the reference task.

    python3 -m runners.reference.noise --out DIR [--plan same,long,fresh,graph]

Runs the reference server and client directly (no runner, no sandbox), server and client
on disjoint core halves as the runner places them, and writes `noise.json`: per round the
wall clock, throughput, how the server batched the round's requests (`GET /stats`), the
client's CPU seconds, and the GPU's clocks, power and throttle reasons sampled every
0.2 s through NVML. Experiments:

- `same`:  one server, 12 rounds of 128 requests (what a round of the task is today);
- `long`:  the same server, 4 rounds of 1,024 requests (longer rounds);
- `fresh`: 5 fresh servers, each 3 rounds of 128 after the task's 16-request warm-up
  (what the runner does: a server per round);
- `graph`: the CUDA-graph server, 12 rounds of 128 and 4 of 1,024;
- `cpu`:   no server: on one server core, 40 repetitions of a fixed pure-Python loop, a
  fixed run of tiny eager GPU launches and eight eager decode steps of the full batch,
  each timed, to tell the host CPU's own speed from the GPU's;
- `siblings`: no server: how much a busy loop on each other core slows a pure-Python loop
  and eager decode on the first server core (a VM's vCPUs may share physical cores).

Each round also records the machine's CPU steal fraction (`/proc/stat`).

Never changes a GPU setting: clocks are read, not locked.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runners import host
from runners.fingerprint import cpu_model

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def halves() -> tuple[str, str]:
    cpus = sorted(os.sched_getaffinity(0))
    mid = len(cpus) // 2
    return ",".join(map(str, cpus[:mid])), ",".join(map(str, cpus[mid:]))


class Clocks:
    """NVML samples in a thread; `window(t0, t1)` summarises those inside."""

    def __init__(self, interval: float = 0.2) -> None:
        self.samples: list[dict[str, Any]] = []
        self.ok = False
        try:
            pynvml = importlib.import_module("pynvml")

            pynvml.nvmlInit()
            self.nv = pynvml
            self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.ok = True
        except Exception as exc:  # no NVML: the study still runs
            self.error = repr(exc)
        self.interval = interval
        self.stop = threading.Event()
        if self.ok:
            threading.Thread(target=self._run, daemon=True).start()

    def static(self) -> dict[str, Any]:
        if not self.ok:
            return {"error": self.error}
        nv, h = self.nv, self.h
        out: dict[str, Any] = {}
        for name, fn in {
            "name": lambda: nv.nvmlDeviceGetName(h),
            "driver": nv.nvmlSystemGetDriverVersion,
            "sm_max_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_max_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM),
            "sm_app_mhz": lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM),
            "sm_default_app_mhz": lambda: nv.nvmlDeviceGetDefaultApplicationsClock(
                h, nv.NVML_CLOCK_SM
            ),
            "persistence": lambda: nv.nvmlDeviceGetPersistenceMode(h),
            "power_limit_w": lambda: nv.nvmlDeviceGetPowerManagementLimit(h) / 1000,
            "locked_clocks_permitted": lambda: nv.nvmlDeviceGetAPIRestriction(
                h, nv.NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS
            ),
        }.items():
            try:
                v = fn()
                out[name] = v.decode() if isinstance(v, bytes) else v
            except Exception as exc:
                out[name] = f"unavailable: {exc}"
        return out

    def reasons(self, h: Any) -> int:
        nv = self.nv
        fn = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return int(fn(h))

    def _run(self) -> None:
        nv, h = self.nv, self.h
        while not self.stop.is_set():
            with contextlib.suppress(Exception):
                self.samples.append(
                    {
                        "t": time.monotonic(),
                        "sm": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                        "mem": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
                        "w": nv.nvmlDeviceGetPowerUsage(h) / 1000,
                        "c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                        "util": nv.nvmlDeviceGetUtilizationRates(h).gpu,
                        "thr": self.reasons(h),
                    }
                )
            time.sleep(self.interval)

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        s = [x for x in self.samples if t0 <= x["t"] <= t1]
        if not s:
            return {}
        reasons = 0
        for x in s:
            reasons |= x["thr"]
        return {
            "n": len(s),
            "sm_mean": round(statistics.fmean(x["sm"] for x in s), 1),
            "sm_min": min(x["sm"] for x in s),
            "sm_max": max(x["sm"] for x in s),
            "mem_mean": round(statistics.fmean(x["mem"] for x in s), 1),
            "power_mean_w": round(statistics.fmean(x["w"] for x in s), 1),
            "temp_max_c": max(x["c"] for x in s),
            "util_mean": round(statistics.fmean(x["util"] for x in s), 1),
            "throttle_reasons_or": reasons,
        }


class Server:
    def __init__(
        self,
        variant: str,
        cores: str,
        log: Path,
        extra: list[str],
        module: str = "runners.reference.server",
    ) -> None:
        self.port = free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        t0 = time.monotonic()
        self.p = subprocess.Popen(
            [
                "taskset",
                "-c",
                cores,
                sys.executable,
                "-m",
                module,
                "--port",
                str(self.port),
                "--variant",
                variant,
                *extra,
            ],
            env=env,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    break
            except Exception:
                if self.p.poll() is not None:
                    raise RuntimeError(f"server exited {self.p.returncode}") from None
                time.sleep(0.2)
        self.startup_s = time.monotonic() - t0

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as r:
            doc: dict[str, Any] = json.loads(r.read())
            return doc

    def close(self) -> None:
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def cpu_times() -> list[int]:
    """The machine's CPU time counters (/proc/stat's `cpu` line, in ticks)."""
    with open("/proc/stat") as fh:
        return [int(x) for x in fh.readline().split()[1:]]


def one_round(
    srv: Server, clocks: Clocks, cores: str, requests: int, stream: bool, out: Path
) -> dict[str, Any]:
    before = srv.stats()
    cpu0 = cpu_times()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = ["taskset", "-c", cores, sys.executable, "-m", "runners.reference.client"]
    argv += ["--port", str(srv.port), "--requests", str(requests), "--concurrency", "16"]
    argv += ["--output-dir", str(out)] + (["--stream"] if stream else [])
    t0 = time.monotonic()
    subprocess.run(argv, check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    t1 = time.monotonic()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = [b - a for a, b in zip(cpu0, cpu_times(), strict=True)]
    after = srv.stats()
    summary = json.loads((out / "speed_results.json").read_text())["summary"]
    sizes = {
        k: after["sizes"].get(k, 0) - before["sizes"].get(k, 0)
        for k in after["sizes"]
        if after["sizes"].get(k, 0) != before["sizes"].get(k, 0)
    }
    batches = after["batches"] - before["batches"]
    busy = after["busy_s"] - before["busy_s"]
    return {
        "requests": requests,
        "wall_s": round(summary["wall_clock_s"], 4),
        "qps": summary["throughput_qps"],
        "batches": batches,
        "mean_batch": round((after["jobs"] - before["jobs"]) / max(batches, 1), 2),
        "sizes": dict(sorted(sizes.items(), key=lambda kv: int(kv[0]))),
        "gpu_busy_frac": round(busy / max(t1 - t0, 1e-9), 3),
        "client_cpu_s": round((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime), 3),
        "clocks": clocks.window(t0, t1),
        # Steal: time the hypervisor gave this VM's vCPUs to someone else (a suspect for
        # the eager decoder's spread, which follows one Python thread's speed).
        "steal_frac": round(cpu[7] / max(sum(cpu), 1), 4) if len(cpu) > 7 else None,
    }


@contextlib.contextmanager
def pinned_decoder(core: int) -> Iterator[Any]:
    """The reference decoder, warmed, with this process pinned to `core` meanwhile."""
    import torch  # only on the GPU machine

    from runners.reference.model import Config, Decoder

    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        dec = Decoder(Config(), "cuda")
        dec.generate(list(range(16)), 8)
        torch.cuda.synchronize()
        yield dec
    finally:
        os.sched_setaffinity(0, saved)


def spinner(core: str) -> subprocess.Popen[bytes]:
    """A busy loop on `core` until killed."""
    return subprocess.Popen(["taskset", "-c", core, sys.executable, "-c", "while True: pass"])


def cpu_probe(core: int, reps: int) -> dict[str, Any]:
    """Time three fixed workloads, interleaved, on one core: if the pure-Python loop
    varies as much as the eager decoder does, the spread is the host CPU's speed."""
    import torch  # only on the GPU machine

    with pinned_decoder(core) as dec:
        x = torch.zeros(256, device="cuda")
        torch.cuda.synchronize()
        rows: list[dict[str, float]] = []
        for _ in range(reps):
            row: dict[str, float] = {}
            c0 = time.process_time()
            row["py_s"] = host.py_loop(2_000_000)
            row["py_cpu_s"] = time.process_time() - c0
            t0 = time.perf_counter()
            for _ in range(1500):
                x.add_(1.0)
            torch.cuda.synchronize()
            row["launch_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            dec.decode(8)
            row["decode_s"] = time.perf_counter() - t0
            rows.append({k: round(v, 5) for k, v in row.items()})
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    corr = {
        f"{a}~{b}": round(statistics.correlation(cols[a], cols[b]), 3)
        for a, b in (("py_s", "decode_s"), ("py_s", "launch_s"), ("launch_s", "decode_s"))
    }
    gov = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    return {
        "core": core,
        "cpu_model": cpu_model(),
        "governor": gov.read_text().strip() if gov.exists() else "no cpufreq (a VM)",
        "reps": rows,
        "cv_pct": {k: cv(v) for k, v in cols.items()},
        "corr": corr,
    }


def sibling_map(core: int, reps: int = 8) -> dict[str, Any]:
    """Per other core: the median slowdown of `core`'s Python loop and eager decode while
    that core spins. A hyper-thread sibling shows as a large slowdown."""
    others = sorted(os.sched_getaffinity(0) - {core})
    with pinned_decoder(core) as dec:

        def timed() -> tuple[float, float]:
            py, de = [], []
            for _ in range(reps):
                py.append(host.py_loop(1_000_000))
                t0 = time.perf_counter()
                dec.decode(8)
                de.append(time.perf_counter() - t0)
            return statistics.median(py), statistics.median(de)

        base = timed()
        rows = {}
        for other in others:
            spin = spinner(str(other))
            time.sleep(0.3)
            py, de = timed()
            spin.kill()
            spin.wait()
            rows[str(other)] = {"py_x": round(py / base[0], 3), "decode_x": round(de / base[1], 3)}
    return {"core": core, "alone_s": [round(b, 5) for b in base], "with_spin_on": rows}


def cpuidle() -> dict[str, Any]:
    """The guest's idle driver and states: deep idle states make a lone busy core slow."""
    base = Path("/sys/devices/system/cpu/cpuidle")
    states = sorted(Path("/sys/devices/system/cpu/cpu0/cpuidle").glob("state*"))
    out: dict[str, Any] = {
        "driver": (base / "current_driver").read_text().strip()
        if (base / "current_driver").exists()
        else None,
        "states": [(st / "name").read_text().strip() for st in states],
    }
    return out


def hold_pm_qos() -> tuple[Any, str]:
    """Ask the kernel for zero wake-up latency (no deep idle states) while the file stays
    open, as tuned's latency-performance profile does. Needs root."""
    try:
        fh = open("/dev/cpu_dma_latency", "wb", buffering=0)  # noqa: SIM115 (held open)
        fh.write((0).to_bytes(4, "little"))
        return fh, "held at 0 us"
    except OSError as exc:
        return None, f"unavailable: {exc.strerror}"


def cv(xs: list[float]) -> float | None:
    return round(statistics.stdev(xs) / statistics.fmean(xs) * 100, 2) if len(xs) > 1 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--plan", default="same,long,fresh,graph")
    ap.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--short", type=int, default=12, help="rounds of 128 requests")
    ap.add_argument("--long", type=int, default=4, help="rounds of 1,024 requests")
    ap.add_argument("--servers", type=int, default=5, help="fresh servers")
    ap.add_argument("--per-server", type=int, default=3, help="rounds per fresh server")
    ap.add_argument("--cores", help="SERVER:CLIENT core lists (default: the two halves)")
    ap.add_argument("--pm-qos", action="store_true", help="hold /dev/cpu_dma_latency at 0")
    ap.add_argument("--spin", help="keep a busy loop on this core for the whole study")
    ap.add_argument("--server-module", default="runners.reference.server")
    ap.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="passed on to the server (repeat), e.g. --server-arg=--engine-cpus=shared",
    )
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "servers.log"
    scratch = out / "scratch"
    server_cores, client_cores = args.cores.split(":") if args.cores else halves()
    clocks = Clocks()
    doc: dict[str, Any] = {
        "gpu": clocks.static(),
        "cores": {"server": server_cores, "client": client_cores},
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
        "server": [args.server_module, *args.server_arg],
        "cpuidle": cpuidle(),
        "experiments": {},
    }

    qos, doc["pm_qos"] = hold_pm_qos() if args.pm_qos else (None, "not asked")
    spin = None
    if args.spin:
        spin = spinner(args.spin)
        doc["spin"] = args.spin

    def save() -> None:
        (out / "noise.json").write_text(json.dumps(doc, indent=1))

    def rounds(name: str, srv: Server, n: int, requests: int) -> list[dict[str, Any]]:
        got = []
        for _ in range(n):
            r = one_round(srv, clocks, client_cores, requests, args.stream, scratch)
            got.append(r)
            print(
                name,
                r["qps"],
                r["batches"],
                r["mean_batch"],
                r["clocks"].get("sm_mean"),
                flush=True,
            )
        return got

    def warm(srv: Server) -> None:
        one_round(srv, clocks, client_cores, 16, args.stream, scratch)

    for step in args.plan.split(","):
        t0 = time.monotonic()
        exp: dict[str, Any] = {}
        if step in ("same", "long", "graph"):
            variant = "graph" if step == "graph" else "eager"
            srv = Server(variant, server_cores, log, args.server_arg, args.server_module)
            exp["startup_s"] = round(srv.startup_s, 2)
            warm(srv)
            if step in ("same", "graph"):
                exp["r128"] = rounds(step, srv, args.short, 128)
            if step in ("long", "graph"):
                exp["r1024"] = rounds(step, srv, args.long, 1024)
            srv.close()
        elif step == "cpu":
            exp = cpu_probe(int(server_cores.split(",")[0]), 40)
            print("cpu", exp["cv_pct"], exp["corr"], flush=True)
        elif step == "siblings":
            exp = sibling_map(int(server_cores.split(",")[0]))
            print("siblings", exp, flush=True)
        elif step == "fresh":
            exp["servers"] = []
            for _ in range(args.servers):
                srv = Server("eager", server_cores, log, args.server_arg, args.server_module)
                warm(srv)
                exp["servers"].append(
                    {
                        "startup_s": round(srv.startup_s, 2),
                        "rounds": rounds(step, srv, args.per_server, 128),
                    }
                )
                srv.close()
        for key in ("r128", "r1024"):
            if key in exp:
                exp[f"{key}_cv_pct"] = cv([r["qps"] for r in exp[key]])
        if "servers" in exp:
            firsts = [s["rounds"][0]["qps"] for s in exp["servers"]]
            lasts = [s["rounds"][-1]["qps"] for s in exp["servers"]]
            within = [cv([r["qps"] for r in s["rounds"]]) for s in exp["servers"]]
            exp["first_round_cv_pct"] = cv(firsts)
            exp["last_round_cv_pct"] = cv(lasts)
            exp["within_server_cv_pct"] = within
        exp["seconds"] = round(time.monotonic() - t0, 1)
        doc["experiments"][step] = exp
        save()
    clocks.stop.set()
    if spin:
        spin.kill()
    if qos:
        qos.close()
    save()
    for name, exp in doc["experiments"].items():
        print(name, {k: v for k, v in exp.items() if "cv" in k or k == "seconds"})


if __name__ == "__main__":
    main()
