"""GPU backends, the environment fingerprint and the load the runner records.

nvidia-smi is exercised through a stand-in that answers from recordings of a real H100
(tests/fixtures/nvidia-smi); NVML through a fake `pynvml` module; "no GPU" by a PATH
without nvidia-smi.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from runners import fingerprint, gpu, host, proc

FIX = Path(__file__).resolve().parent / "fixtures" / "nvidia-smi"
FAKE_SMI = FIX / "bin"


@pytest.fixture
def no_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as if not installed
    monkeypatch.delenv("RSI_GPU_BACKEND", raising=False)


@pytest.fixture
def fake_smi(monkeypatch: pytest.MonkeyPatch, no_pynvml: None) -> None:
    monkeypatch.setenv("PATH", f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "idle")


# ------------------------------------------------------------------ nvidia-smi


def test_recorded_xml_parses() -> None:
    info = gpu.parse_smi_xml((FIX / "nvidia-smi-q-x.xml").read_text())
    assert info == gpu.GpuInfo(
        gpu_name="NVIDIA H100 80GB HBM3",
        gpu_count=1,
        driver="580.159.04",
        cuda="13.0",
        gpu_memory_total_mib=81559,
        app_clock_mhz=1980,
        app_mem_clock_mhz=2619,
        max_clock_mhz=1980,
    )


def test_recorded_csv_parses() -> None:
    idle = gpu.parse_query_gpu((FIX / "query-gpu.idle.csv").read_text())
    assert idle == [
        {
            "gpu": 0,
            "sm_clock_mhz": 405,
            "util_pct": 0,
            "mem_used_mib": 0,
            "power_w": 124.7,
            "throttle_reasons": ["gpu_idle"],
        }
    ]
    busy = gpu.parse_query_gpu((FIX / "query-gpu.busy.csv").read_text())
    assert busy[0]["util_pct"] == 100
    assert busy[0]["mem_used_mib"] == 9421
    assert busy[0]["throttle_reasons"] == []
    apps = gpu.parse_compute_apps((FIX / "query-compute-apps.busy.csv").read_text())
    assert apps == [{"pid": 1688, "used_memory_mib": 9412}]
    assert gpu.parse_query_gpu("0, [N/A], [Not Supported], 5, [N/A], 0x0\n")[0] == {
        "gpu": 0,
        "sm_clock_mhz": None,
        "util_pct": None,
        "mem_used_mib": 5,
        "power_w": None,
        "throttle_reasons": [],
    }


def test_smi_backend_through_the_stand_in(fake_smi: None, monkeypatch: pytest.MonkeyPatch) -> None:
    b = gpu.detect()
    assert isinstance(b, gpu.Smi)
    assert b.name == "nvidia-smi"
    assert b.info().gpu_name == "NVIDIA H100 80GB HBM3"
    assert b.sample()[0]["sm_clock_mhz"] == 405
    assert b.processes() == []
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "busy")
    assert b.processes() == [{"pid": 1688, "used_memory_mib": 9412}]
    fp = fingerprint.machine(b, env={"RSI_IMAGE": "lmsysorg/sglang-omni:dev"})
    assert fp["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert (fp["gpu_count"], fp["driver"], fp["cuda"]) == (1, "580.159.04", "13.0")
    assert fp["image"] == "lmsysorg/sglang-omni:dev"
    assert fp["image_digest"] is None


def test_smi_without_throttle_reasons_field(
    fake_smi: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NVIDIA_SMI_OLD", "1")
    b = gpu.detect()
    assert isinstance(b, gpu.Smi)
    assert b.with_reasons is False
    s = b.sample()[0]
    assert s["sm_clock_mhz"] == 405
    assert s["throttle_reasons"] == []


def test_without_nvidia_smi_there_is_no_gpu(
    no_pynvml: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi on PATH
    b = gpu.detect()
    assert isinstance(b, gpu.NoGpu)
    assert b.name is None
    assert b.sample() == []
    assert b.processes() is None
    fp = fingerprint.machine(b, env={})
    assert fp["gpu_name"] is None
    assert fp["gpu_count"] == 0
    assert fp["driver"] is None
    assert fp["cuda"] is None
    assert fp["gpu_backend"] is None
    assert fp["cpu_count"] >= 1
    assert fp["image"] is None
    wait = gpu.wait_idle(b, timeout_s=5)
    assert wait.idle
    assert wait.checks == 0
    with pytest.raises(RuntimeError, match="not on PATH"):
        gpu.detect("nvidia-smi")
    assert isinstance(gpu.detect("none"), gpu.NoGpu)


# ------------------------------------------------------------------ NVML


class _NVMLError(Exception):
    pass


def fake_pynvml(used_v1: int = 480 << 20, used_v2: int = 0, procs: int = 0) -> Any:
    def meminfo(h: object, version: object = None) -> Any:
        used = used_v2 if version == "v2" else used_v1
        return SimpleNamespace(used=used, total=81559 << 20)

    def not_supported(*_: object) -> Any:
        raise _NVMLError("Not Supported")

    return SimpleNamespace(
        NVML_CLOCK_SM=1,
        nvmlMemory_v2="v2",
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlSystemGetDriverVersion=lambda: "580.159.04",
        nvmlSystemGetCudaDriverVersion_v2=lambda: 13000,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=97, memory=40),
        nvmlDeviceGetMemoryInfo=meminfo,
        nvmlDeviceGetPowerUsage=lambda h: 612345,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4 | 0x40,
        nvmlDeviceGetClockInfo=lambda h, clock: 1980,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [
            SimpleNamespace(pid=100 + i, usedGpuMemory=1 << 30) for i in range(procs)
        ],
        nvmlDeviceGetTotalEnergyConsumption=not_supported,
    )


def test_nvml_backend_with_a_fake_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(used_v2=61234 << 20, procs=1))
    monkeypatch.delenv("RSI_GPU_BACKEND", raising=False)
    b = gpu.detect()
    assert isinstance(b, gpu.Nvml)
    assert b.info() == gpu.GpuInfo("NVIDIA H200", 2, "580.159.04", "13.0", 81559)
    s = b.sample()
    assert len(s) == 2
    assert s[1] == {
        "gpu": 1,
        "sm_clock_mhz": 1980,
        "util_pct": 97,
        "mem_used_mib": 61234,  # v2: the driver's reservation left out
        "power_w": 612.3,
        "throttle_reasons": ["sw_power_cap", "hw_thermal_slowdown"],
    }
    assert b.processes() == [
        {"gpu": 0, "pid": 100, "used_memory_mib": 1024},
        {"gpu": 1, "pid": 100, "used_memory_mib": 1024},
    ]
    b.close()


def test_nvml_without_v2_memory_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fake_pynvml()
    del mod.nvmlMemory_v2
    b = gpu.Nvml(mod)
    assert b.sample()[0]["mem_used_mib"] == 480


def test_throttle_names() -> None:
    assert gpu.throttle_names(0) == []
    assert gpu.throttle_names(None) == []
    assert gpu.throttle_names(0x1) == ["gpu_idle"]
    assert gpu.throttle_names(0x8 | 0x1000) == ["hw_slowdown", "other_0x1000"]


# ------------------------------------------------------------------ idle wait, monitor


class Scripted(gpu.Backend):
    """A GPU that is busy for the first `busy` checks, then idle."""

    name = "scripted"

    def __init__(self, busy: int, mem: list[int] | None = None) -> None:
        self.busy = busy
        self.calls = 0
        self.mem = mem or [1000]

    def sample(self) -> list[dict[str, Any]]:
        self.calls += 1
        hot = self.calls <= self.busy
        m = self.mem[min(self.calls - 1, len(self.mem) - 1)]
        return [
            {
                "gpu": g,
                "sm_clock_mhz": 1980,
                "util_pct": 100 if hot else 0,
                "mem_used_mib": m,
                "power_w": 600.0,
                "throttle_reasons": [],
            }
            for g in range(2)
        ]

    def processes(self) -> list[dict[str, Any]] | None:
        return [{"pid": 7, "used_memory_mib": 5}] if self.calls <= self.busy else []


def test_wait_idle_records_the_foreign_load_it_waited_out() -> None:
    w = gpu.wait_idle(Scripted(busy=2), timeout_s=10, poll_s=0.01)
    assert w.idle
    assert w.checks == 4  # two busy, then two idle in a row
    assert w.foreign["util_pct"] == 100
    assert w.foreign["reason"].startswith("1 compute process(es) on the GPU")
    assert w.as_dict()["waited_s"] >= 0


def test_wait_idle_gives_up() -> None:
    t0 = time.monotonic()
    w = gpu.wait_idle(Scripted(busy=10**6), timeout_s=0.2, poll_s=0.05)
    assert not w.idle
    assert 0.2 <= time.monotonic() - t0 < 2
    assert w.foreign["processes"] == [{"pid": 7, "used_memory_mib": 5}]


def test_wait_idle_memory_threshold() -> None:
    w = gpu.wait_idle(Scripted(busy=0, mem=[5000]), timeout_s=0.1, poll_s=0.02, mem_max_mib=2048)
    assert not w.idle
    assert "MiB of GPU memory in use" in w.foreign["reason"]


def test_monitor_peak_is_summed_over_gpus_and_samples_are_thinned() -> None:
    backend = Scripted(busy=0, mem=[100, 900, 300] + [200] * 50)
    m = gpu.Monitor(backend, interval_s=0.005, max_samples=20).start()
    time.sleep(0.3)
    m.stop()
    s = m.summary()
    assert s["peak_vram_mib"] == 1800  # 900 on each of two GPUs at the same tick
    assert s["gpu_samples_total"] > 20
    assert len({x["t"] for x in s["gpu_samples"]}) <= 20
    assert s["sm_clock_mhz_min"] == 1980
    assert s["power_w_max"] == 600.0
    assert s["foreign_peak_cores"] is not None
    assert s["foreign_peak_cores"] >= 0


# ------------------------------------------------------------------ host and side facts


def test_cpu_model_from_cpuinfo() -> None:
    x86 = (
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    )
    assert fingerprint.cpu_model(x86) == "Intel(R) Xeon(R) Platinum 8480+"
    arm = "processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n"
    assert fingerprint.cpu_model(arm) == "0x41/0xd4f"


def test_side_probe_runs_the_sides_python(tmp_path: Path) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    assert fingerprint.top_level_packages(tmp_path) == ["mypkg"]
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    fp = fingerprint.side(sys.executable, tmp_path, env, packages=("numpy", "no-such-pkg"))
    assert fp["python"] == sys.version.split()[0]
    assert set(fp["packages"]) == {"numpy"}
    assert fp["imports"]["mypkg"] == str(tmp_path / "mypkg" / "__init__.py")
    assert fingerprint.outside(tmp_path, fp["imports"]) == {}
    assert fingerprint.outside(tmp_path, {"mypkg": "/usr/lib/mypkg/__init__.py"}) == {
        "mypkg": "/usr/lib/mypkg/__init__.py"
    }
    broken = fingerprint.side(str(tmp_path / "no-python"), tmp_path, env)
    assert broken["python"] is None
    assert broken["error"]


def test_cpu_load_and_cpuset() -> None:
    assert host.cpuset_spec([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert host.cpuset()
    load = host.CpuLoad()
    assert load.available
    time.sleep(0.1)
    f = load.window()
    assert f is not None
    assert f >= 0


def test_scrub_env_withholds_credentials() -> None:
    kept, dropped = proc.scrub_env(
        {
            "PATH": "/bin",
            "HF_HUB_OFFLINE": "1",
            "GITHUB_TOKEN": "x",
            "ACTIONS_ID_TOKEN_REQUEST_URL": "x",
            "AWS_SECRET_ACCESS_KEY": "x",
            "MY_API_KEY": "x",
            "RUNNER_NAME": "gpu-h200-07",
        }
    )
    assert kept == {"PATH": "/bin", "HF_HUB_OFFLINE": "1", "RUNNER_NAME": "gpu-h200-07"}
    assert dropped == sorted(
        ["GITHUB_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL", "AWS_SECRET_ACCESS_KEY", "MY_API_KEY"]
    )


@pytest.mark.parametrize(
    "answer",
    [
        '{"python": "3.11.7", "packages": ["torch==2.11.0"], "imports": {}}',
        '{"python": "3.11.7", "packages": {"torch": "\\ud800"}, "imports": {}}',
        '{"python": "3.11.7", "packages": {"not-asked": "1.0"}, "imports": {}}',
        '{"python": {"x": 1}, "packages": {}, "imports": {}}',
        '["3.11.7"]',
    ],
)
def test_a_probe_answer_of_another_shape_is_not_kept(tmp_path: Path, answer: str) -> None:
    """The side's interpreter answers the probe, and a json.py in the head's worktree
    can make it answer anything: a list of packages crashed the evidence engine, a lone
    surrogate the runner's own manifest writer."""
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho '{answer}'\n")
    fake.chmod(0o755)
    fp = fingerprint.side(str(fake), tmp_path, dict(os.environ), packages=("torch",))
    assert fp == {
        "python": None,
        "packages": {},
        "imports": {},
        "error": "malformed probe output",
    }
