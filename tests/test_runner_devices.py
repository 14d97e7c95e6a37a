"""CUDA_VISIBLE_DEVICES: the idle check, the sampling and the fingerprint read only the
GPUs the job was given, by index or by GPU-/MIG- UUID.

nvidia-smi through the stand-in that answers from the recorded H100 (here as a machine of
four such GPUs: tests/fixtures/nvidia-smi/bin/nvidia-smi), NVML through a fake `pynvml`
with per-device state, and the runner end to end with the dry task.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from runners import devices, fingerprint, gpu
from tests.test_runner_verify import FAKE_SMI, runner_env, verify

UUID = "GPU-00000000-0000-0000-0000-000000000000"  # the recording's, zeroed


def uuid(i: int) -> str:
    return UUID[:-1] + str(i)


GPUS = [devices.Gpu(i, uuid(i)) for i in range(4)]
MIG0 = "MIG-00000000-0000-0000-0000-000000000000"
MIG1 = "MIG-00000000-0000-0000-0000-000000000001"


# ------------------------------------------------------------------ parsing


def sel(value: str | None, gpus: list[devices.Gpu] = GPUS) -> devices.Selection:
    env = {} if value is None else {devices.VISIBLE_VAR: value}
    return devices.select(gpus, env)


def test_unset_means_every_gpu() -> None:
    s = sel(None)
    assert s.limited is False
    assert s.indices == [0, 1, 2, 3]
    assert s.note is None


@pytest.mark.parametrize(
    ("value", "indices"),
    [
        ("2", [2]),
        ("2,0", [2, 0]),  # CUDA's order is the variable's order
        (" 3 , 1 ", [3, 1]),
        (uuid(1), [1]),
        (uuid(2), [2]),
        (f"{uuid(3)},1", [3, 1]),
    ],
)
def test_indices_and_uuids_name_gpus(value: str, indices: list[int]) -> None:
    s = sel(value)
    assert s.limited
    assert s.indices == indices
    assert s.note is None


def test_a_unique_uuid_prefix_is_enough_and_an_ambiguous_one_is_not() -> None:
    gpus = [devices.Gpu(0, "GPU-8932f937-aaaa"), devices.Gpu(1, "GPU-1b2c-bbbb")]
    assert sel("GPU-8932", gpus).indices == [0]
    assert sel("GPU-", gpus).indices == []


@pytest.mark.parametrize(
    ("value", "indices", "entry"),
    [
        ("0,7,1", [0], "entry 2 (7)"),  # no GPU 7: it and what follows are ignored
        ("1,-1,2", [1], "entry 2 (-1)"),
        ("2,2", [2], "names a duplicate"),
        ("GPU-ffff,0", [], "entry 1 (GPU-ffff)"),
    ],
)
def test_parsing_stops_at_the_first_entry_that_names_no_gpu(
    value: str, indices: list[int], entry: str
) -> None:
    s = sel(value)
    assert s.indices == indices
    assert s.note is not None
    assert entry in s.note


def test_empty_value_hides_every_gpu() -> None:
    s = sel("")
    assert s.targets == ()
    assert s.note == "CUDA_VISIBLE_DEVICES is empty: the run sees no GPU"


def test_mig_uuid_names_a_device_on_its_gpu() -> None:
    gpus = [devices.Gpu(0, uuid(0), (MIG0, MIG1)), devices.Gpu(1, uuid(1))]
    s = sel(f"{MIG1},1", gpus)
    assert s.targets == (devices.Target(0, MIG1, mig=True), devices.Target(1, uuid(1)))
    assert s.indices == [0, 1]


def test_smi_list_with_mig_devices() -> None:
    text = (
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {uuid(0)})\n"
        f"  MIG 1g.10gb     Device  0: (UUID: {MIG0})\n"
        f"  MIG 1g.10gb     Device  1: (UUID: {MIG1})\n"
        f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {uuid(1)})\n"
        "No devices were found\n"
    )
    assert devices.parse_smi_list(text) == [
        devices.Gpu(0, uuid(0), (MIG0, MIG1)),
        devices.Gpu(1, uuid(1)),
    ]


# ------------------------------------------------------------------ nvidia-smi


@pytest.fixture
def four_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four recorded H100s; GPUs 1 and 3 busy (another process, 9 GiB, 100%)."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.delenv("RSI_GPU_BACKEND", raising=False)
    monkeypatch.delenv(devices.VISIBLE_VAR, raising=False)
    monkeypatch.setenv("PATH", f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "4")
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "idle,busy,idle,busy")


def test_smi_without_the_variable_reads_every_gpu(four_smi: None) -> None:
    b = gpu.detect()
    assert isinstance(b, gpu.Smi)
    assert [s["gpu"] for s in b.sample()] == [0, 1, 2, 3]
    assert [p["pid"] for p in b.processes() or []] == [1689, 1691]
    assert b.info().gpu_count == 4
    assert gpu.wait_idle(b, timeout_s=0.2, poll_s=0.05).idle is False


def test_smi_reads_only_the_visible_gpus(four_smi: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(devices.VISIBLE_VAR, "2,0")
    b = gpu.detect()
    assert [s["gpu"] for s in b.sample()] == [2, 0]
    assert all(s["util_pct"] == 0 for s in b.sample())
    assert b.processes() == []  # the busy GPUs are somebody else's
    wait = gpu.wait_idle(b, timeout_s=5, poll_s=0.05)
    assert wait.idle
    info = b.info()
    assert (info.gpu_name, info.gpu_count) == ("NVIDIA H100 80GB HBM3", 2)
    fp = fingerprint.machine(b, env={})
    assert fp["gpu_count"] == 2
    assert fp["gpu_indices"] == [2, 0]
    assert fp["cuda_device_order"] == "PCI_BUS_ID"
    assert b.note is None


def test_smi_by_uuid_sees_its_own_gpu_busy(four_smi: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(devices.VISIBLE_VAR, uuid(3))
    b = gpu.detect()
    assert [s["gpu"] for s in b.sample()] == [3]
    assert b.processes() == [{"gpu": 3, "pid": 1691, "used_memory_mib": 9412}]
    wait = gpu.wait_idle(b, timeout_s=0.2, poll_s=0.05)
    assert not wait.idle
    assert "pids 1691" in wait.foreign["reason"]


def test_smi_mig_device_is_read_as_its_gpu(four_smi: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVIDIA_SMI_MIG", "2")
    monkeypatch.setenv(devices.VISIBLE_VAR, MIG1)
    b = gpu.detect()
    assert b.selection is not None
    assert b.selection.targets == (devices.Target(0, MIG1, mig=True),)
    assert [s["gpu"] for s in b.sample()] == [0]


def test_smi_empty_variable_reads_nothing_and_says_so(
    four_smi: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(devices.VISIBLE_VAR, "")
    b = gpu.detect()
    assert b.sample() == []
    assert b.processes() == []
    assert b.note == "CUDA_VISIBLE_DEVICES is empty: the run sees no GPU"
    fp = fingerprint.machine(b, env={})
    assert (fp["gpu_count"], fp["gpu_name"], fp["gpu_indices"]) == (0, None, [])


def test_recorded_single_gpu_is_unchanged_by_index_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "busy")
    monkeypatch.delenv("FAKE_NVIDIA_SMI_GPUS", raising=False)
    monkeypatch.setenv(devices.VISIBLE_VAR, "0")
    b = gpu.detect("nvidia-smi")
    assert b.sample()[0]["mem_used_mib"] == 9421
    assert b.processes() == [{"gpu": 0, "pid": 1688, "used_memory_mib": 9412}]
    assert b.info().gpu_memory_total_mib == 81559


# ------------------------------------------------------------------ NVML


class _NVMLError(Exception):
    pass


def fake_nvml(busy: set[int], migs: int = 0) -> Any:
    """Four GPUs (handles `g0`…`g3`); busy ones at 100% with 9 GiB and a process; GPU 0
    with `migs` MIG devices (`m0`…), which, as on real NVML, have no utilisation."""

    def fail(*_: object) -> Any:
        raise _NVMLError("Not Supported")

    def util(h: str) -> Any:
        if h.startswith("m"):
            fail()
        return SimpleNamespace(gpu=100 if int(h[1]) in busy else 0)

    def mem(h: str, version: object = None) -> Any:
        used = (2 << 30) if h.startswith("m") else (9 << 30) * (int(h[1]) in busy)
        return SimpleNamespace(used=used, total=(10 << 30) if h.startswith("m") else 80 << 30)

    def procs(h: str) -> list[Any]:
        return [SimpleNamespace(pid=5000 + int(h[1]), usedGpuMemory=9 << 30)] * (
            h.startswith("g") and int(h[1]) in busy
        )

    def mig(h: str, j: int) -> str:
        if h != "g0" or j >= migs:
            fail()
        return f"m{j}"

    def uuid_of(h: str) -> bytes:
        return (MIG0[:-1] + h[1] if h.startswith("m") else uuid(int(h[1]))).encode()

    return SimpleNamespace(
        NVML_CLOCK_SM=1,
        nvmlMemory_v2="v2",
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 4,
        nvmlDeviceGetHandleByIndex=lambda i: f"g{i}",
        nvmlDeviceGetUUID=uuid_of,
        nvmlDeviceGetMaxMigDeviceCount=lambda h: 7 if h == "g0" else fail(),
        nvmlDeviceGetMigDeviceHandleByIndex=mig,
        nvmlDeviceGetName=lambda h: b"NVIDIA H200" if h.startswith("g") else fail(),
        nvmlSystemGetDriverVersion=lambda: "580.159.04",
        nvmlSystemGetCudaDriverVersion_v2=lambda: 13000,
        nvmlDeviceGetUtilizationRates=util,
        nvmlDeviceGetMemoryInfo=mem,
        nvmlDeviceGetPowerUsage=lambda h: 700000 if h.startswith("g") else fail(),
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0 if h.startswith("g") else fail(),
        nvmlDeviceGetClockInfo=lambda h, c: 1980 if h.startswith("g") else fail(),
        nvmlDeviceGetComputeRunningProcesses=procs,
    )


def test_nvml_without_the_variable_reads_every_gpu() -> None:
    b = gpu.Nvml(fake_nvml({1}), env={})
    assert [s["gpu"] for s in b.sample()] == [0, 1, 2, 3]
    assert b.indices() is None
    assert not gpu.wait_idle(b, timeout_s=0.1, poll_s=0.05).idle


def test_nvml_reads_only_the_visible_gpus() -> None:
    b = gpu.Nvml(fake_nvml({1, 3}), env={devices.VISIBLE_VAR: f"2,{uuid(0)}"})
    assert [(s["gpu"], s["util_pct"], s["mem_used_mib"]) for s in b.sample()] == [
        (2, 0, 0),
        (0, 0, 0),
    ]
    assert b.processes() == []
    assert gpu.wait_idle(b, timeout_s=5, poll_s=0.05).idle
    assert b.info() == gpu.GpuInfo("NVIDIA H200", 2, "580.159.04", "13.0", 81920)
    assert fingerprint.machine(b, env={})["gpu_indices"] == [2, 0]


def test_nvml_visible_busy_gpu_is_waited_for() -> None:
    b = gpu.Nvml(fake_nvml({1, 3}), env={devices.VISIBLE_VAR: "3"})
    assert b.processes() == [{"gpu": 3, "pid": 5003, "used_memory_mib": 9216}]
    assert not gpu.wait_idle(b, timeout_s=0.1, poll_s=0.05).idle


def test_nvml_mig_device_memory_is_its_own_and_clocks_its_gpus() -> None:
    b = gpu.Nvml(fake_nvml(set(), migs=2), env={devices.VISIBLE_VAR: MIG1})
    (s,) = b.sample()
    assert s == {
        "gpu": 0,
        "sm_clock_mhz": 1980,  # the GPU's
        "util_pct": None,  # NVML has none for a MIG device
        "mem_used_mib": 2048,  # the MIG device's
        "power_w": 700.0,
        "throttle_reasons": [],
        "mig": True,
    }
    info = b.info()
    assert (info.gpu_name, info.gpu_count, info.gpu_memory_total_mib) == ("NVIDIA H200", 1, 10240)


def test_nvml_unknown_entry_is_noted() -> None:
    b = gpu.Nvml(fake_nvml(set()), env={devices.VISIBLE_VAR: "1,9"})
    assert [s["gpu"] for s in b.sample()] == [1]
    assert b.note is not None
    assert "entry 2 (9)" in b.note


def test_monitor_peak_counts_only_the_visible_gpus() -> None:
    b = gpu.Nvml(fake_nvml({1, 3}), env={devices.VISIBLE_VAR: "0,2"})
    mon = gpu.Monitor(b, interval_s=60).start()
    mon.stop()
    assert mon.summary()["peak_vram_mib"] == 0  # not the 18 GiB on GPUs 1 and 3


# ------------------------------------------------------------------ the runner


def test_runner_measures_the_visible_gpus_and_orders_cuda_by_pci_bus(reachable_tmp: Path) -> None:
    tmp_path = reachable_tmp  # each side runs as its own user, which must reach its worktree
    env = runner_env(
        PATH=f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}",
        RSI_GPU_BACKEND="nvidia-smi",
        FAKE_NVIDIA_SMI_GPUS="4",
        FAKE_NVIDIA_SMI="idle,busy,idle,busy",
        CUDA_VISIBLE_DEVICES="2,0",
        CUDA_DEVICE_ORDER="FASTEST_FIRST",
    )
    r, out, m = verify(
        tmp_path, {}, {}, "--gpu", "h100", "--rounds", "1", "--gpu-idle-timeout", "5", env=env
    )
    assert r.returncode == 0, r.stderr
    fp = m["environment"]["base"]
    assert (fp["gpu_count"], fp["gpu_indices"], fp["cuda_device_order"]) == (
        2,
        [2, 0],
        "PCI_BUS_ID",
    )
    assert m["runner"]["cuda_device_order"] == "PCI_BUS_ID"
    assert any("CUDA_DEVICE_ORDER was FASTEST_FIRST" in w for w in m["warnings"])
    for run in m["runs"]:
        assert run["status"] == "ok", run.get("error")
        server = json.loads((out / run["files"]["server"]).read_text())
        assert server["gpu_wait"]["idle"] is True
        assert {s["gpu"] for s in server["gpu_samples"]} == {0, 2}
        log = (out / run["logs"]["server"]).read_text()
        cuda = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "2,0"}
        assert f"cuda={json.dumps(cuda, sort_keys=True)}" in log
