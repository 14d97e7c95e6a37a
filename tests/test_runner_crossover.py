"""`--design crossover` (runners/crossover.py) with the dry task on two fake GPUs (the
recorded nvidia-smi stand-in as a machine of two): real processes, isolated as the other
runner tests are, the bundle read back by the evidence engine."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evidence.build import Inputs
from evidence.design import design_result
from runners.crossover import Crossover
from runners.gpu import Backend, GpuInfo
from runners.placement import Placement, parse_cpulist
from runners.verify import Verifier
from tests.test_runner_resident import _in_process
from tests.test_runner_verify import FAKE_SMI, LONG_BURSTS, build, runner_env, verify


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    """Isolated runs need a folder the candidate users can pass through."""
    return reachable_tmp


def gpus_env(n: int) -> dict[str, str]:
    return runner_env(
        PATH=f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}",
        RSI_GPU_BACKEND="nvidia-smi",
        FAKE_NVIDIA_SMI="idle",
        FAKE_NVIDIA_SMI_GPUS=str(n),
    )


def crossover(
    tmp_path: Path,
    head_cfg: dict[str, Any],
    *extra: str,
    gpus: int = 2,
    base_cfg: dict[str, Any] | None = None,
) -> tuple[Path, dict[str, Any]]:
    r, out, m = verify(
        tmp_path,
        base_cfg or {},
        head_cfg,
        "--gpu",
        "h100",
        "--design",
        "crossover",
        *extra,
        env=gpus_env(gpus),
    )
    assert r.returncode == 0, r.stderr
    return out, m


def _t(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def _ok(m: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in m["runs"] if r["status"] == "ok"]


def test_crossover_runs_base_and_head_at_once_on_two_gpus_swapped_every_pair(
    tmp_path: Path,
) -> None:
    slow = LONG_BURSTS  # the two bursts of a pair also share the cores
    out, m = crossover(tmp_path, {**slow, "speed": 1.5}, "--rounds", "4", base_cfg=slow)
    assert m["isolation"]["mode"] == "cgroup"
    d = m["design"]
    assert (d["name"], d["paired"], d["unit"], d["gpus"]) == ("crossover", True, "burst", [0, 1])
    assert "refused" not in d
    # one resident server per side per GPU, each given its GPU alone
    for side in ("base", "head"):
        assert sorted(s["cuda_visible_devices"] for s in d["servers"][side]) == ["0", "1"]
        for s in d["servers"][side]:
            assert s["exit"]["how"] == "sigterm"
            log = (out / s["log"]).read_text()
            cuda = {
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                "CUDA_VISIBLE_DEVICES": s["cuda_visible_devices"],
            }
            assert f"cuda={json.dumps(cuda, sort_keys=True)}" in log
    # the two GPUs' servers on disjoint halves of the servers' cores
    if m["placement"]["mode"] == "split" and len(parse_cpulist(m["placement"]["server"])) > 1:
        cores = {s["cuda_visible_devices"]: s["cpus"] for s in d["servers"]["base"]}
        assert cores == {s["cuda_visible_devices"]: s["cpus"] for s in d["servers"]["head"]}
        assert cores["0"] != cores["1"]
    runs = _ok(m)
    # a pair's runs are recorded in GPU order; base on GPU 0 in odd pairs, GPU 1 in even
    assert [(x["pair"], x["side"], x["gpu_index"]) for x in runs] == [
        (1, "base", 0), (1, "head", 1),
        (2, "head", 0), (2, "base", 1),
        (3, "base", 0), (3, "head", 1),
        (4, "head", 0), (4, "base", 1),
    ]  # fmt: skip
    for x in runs:  # each burst sampled its own GPU only
        info = json.loads((out / x["files"]["server"]).read_text())
        assert info["design"] == "crossover"
        assert info["gpu_samples"]
        assert {g["gpu"] for g in info["gpu_samples"]} == {x["gpu_index"]}
    for a, b in zip(runs[::2], runs[1::2], strict=True):
        assert a["round"] == b["round"] == a["pair"]
        # the two bursts of a pair overlap in time
        assert max(_t(a["started_at"]), _t(b["started_at"])) < min(
            _t(a["ended_at"]), _t(b["ended_at"])
        )
    gm = m["gpu_minutes"]
    assert gm["total"] >= gm["base"] + gm["head"] > 0
    ev, sources = build(Inputs(bundles=[out]))
    assert ev.verdict == "improved"
    row = next(x for x in ev.study if x.primary)
    assert (row.method, row.pairs) == ("paired", 4)
    assert row.delta_pct is not None
    assert row.delta_pct > 30
    words = design_result(sources[0].manifest)
    assert (words.known, words.paired, words.unit) == (True, True, "burst")
    assert "two GPUs" in words.summary
    assert any("same time" in a for a in words.assumes)


def test_an_aa_crossover_reads_no_change(tmp_path: Path) -> None:
    out, m = crossover(tmp_path, {}, "--rounds", "4")
    assert [x["gpu_index"] for x in _ok(m)] == [0, 1] * 4
    ev, _ = build(Inputs(bundles=[out]))
    row = next(x for x in ev.study if x.primary)
    assert row.method == "paired"
    assert ev.verdict not in ("improved", "regressed")


def test_rounds_auto_decides_after_each_pair(tmp_path: Path) -> None:
    out, m = crossover(tmp_path, {"speed": 2.0}, "--rounds", "auto")
    a = m["adaptive"]
    assert a["looks"], a
    runs = _ok(m)
    assert len(runs) % 2 == 0
    pairs = len(runs) // 2
    assert 2 <= pairs < 10
    ev, _ = build(Inputs(bundles=[out]))
    assert ev.verdict == "improved"


def test_with_one_gpu_the_crossover_is_refused_and_the_alternate_design_runs(
    tmp_path: Path,
) -> None:
    out, m = crossover(tmp_path, {}, "--rounds", "2", gpus=1)
    d = m["design"]
    assert d["name"] == "alternate"
    assert d["refused_design"] == "crossover"
    assert "needs two whole GPUs and the runner was given 1 GPU" in d["refused"]
    assert any(w.startswith("design crossover refused") for w in m["warnings"])
    assert len(_ok(m)) == 4
    ev, _ = build(Inputs(bundles=[out]))
    assert next(x for x in ev.study if x.primary).method == "paired"


def test_without_a_gpu_the_crossover_falls_back_too(tmp_path: Path) -> None:
    r, _, m = verify(tmp_path, {}, {}, "--design", "crossover", "--rounds", "1")
    assert r.returncode == 0, r.stderr
    assert m["design"]["refused_design"] == "crossover"
    assert "was given 0 GPUs" in m["design"]["refused"]


# ------------------------------------------------------------------ in this process


def _dry_servers(within: Path) -> list[tuple[str, str, bool, int]]:
    """(side, CUDA_VISIBLE_DEVICES, running, pid) of every dry server process whose
    command line names `within` (this test's folder: other test processes run theirs)."""
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{e}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{e}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{e}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if not any(c.endswith(b"runners/dry/server.py") for c in cmd):
            continue
        if not any(str(within).encode() in c for c in cmd):
            continue
        side = cmd[cmd.index(b"--side") + 1].decode()
        dev = next((v[21:].decode() for v in env if v.startswith(b"CUDA_VISIBLE_DEVICES=")), "")
        out.append((side, dev, state not in ("T", "t"), int(e)))
    return out


class _TwoGpus(Backend):
    """Two GPUs; a dry server holds `per_server` MiB of the GPU it was given. Every
    sample records which servers were running (not stopped)."""

    name = "fake"

    def __init__(self, within: Path, per_server: int, cross: bool = False) -> None:
        self.within = within
        self.per_server = per_server
        self.cross = cross  # the head's servers show a process on the other GPU
        self.running: list[list[tuple[str, str]]] = []
        self.lock = threading.Lock()

    def sample(self) -> list[dict[str, Any]]:
        servers = _dry_servers(self.within)
        with self.lock:
            self.running.append(sorted((s, d) for s, d, run, _ in servers if run))
        return [
            {
                "gpu": i,
                "sm_clock_mhz": 1980,
                "util_pct": 0,
                "mem_used_mib": self.per_server * sum(x[1] == str(i) for x in servers),
                "power_w": 100.0,
                "throttle_reasons": [],
            }
            for i in (0, 1)
        ]

    def processes(self) -> list[dict[str, Any]] | None:
        out = []
        for side, dev, _, pid in _dry_servers(self.within):
            gpu = int(dev) if dev.isdigit() else 0
            if self.cross and side == "head":
                gpu = 1 - gpu
            out.append({"gpu": gpu, "pid": pid, "used_memory_mib": self.per_server})
        return out

    def info(self) -> GpuInfo:
        return GpuInfo(gpu_name="NVIDIA H200", gpu_count=2, gpu_memory_total_mib=143_771)


def test_only_the_pairs_two_servers_run_one_a_side_on_each_gpu(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    backend = _TwoGpus(tmp_path, 1000)
    opts = dataclasses.replace(
        _in_process(tmp_path, out, "v-frozen", backend), design="crossover", rounds=3
    )
    assert Verifier(opts).run() == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["design"]["name"] == "crossover"
    assert [s["vram_mib"] for side in ("base", "head") for s in m["design"]["servers"][side]] == [
        1000
    ] * 4
    runs = [r for r in m["runs"] if r["status"] == "ok"]
    assert len(runs) == 6
    assert all(r["gpu_check"] == {"read": True, "crossed": []} for r in runs)
    pairs = [r for r in backend.running if len(r) == 2]
    assert pairs  # the two bursts of a pair were sampled running together
    for r in backend.running:
        assert len(r) <= 2, r
        if len(r) == 2:  # base and head, on different GPUs
            assert {s for s, _ in r} == {"base", "head"}
            assert {d for _, d in r} == {"0", "1"}


def test_servers_that_cannot_fit_twice_on_a_gpu_fall_back_to_sequential_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSI_GPU_IDLE_MEM_MIB", "1000000")
    out = tmp_path / "bundle"
    opts = dataclasses.replace(
        _in_process(tmp_path, out, "v-fit", _TwoGpus(tmp_path, 100_000)), design="crossover"
    )
    assert Verifier(opts).run() == 0
    m = json.loads((out / "manifest.json").read_text())
    d = m["design"]
    assert (d["name"], d["paired"], d["refused_design"]) == ("sequential", True, "crossover")
    assert re.match(
        r"on GPU 0, after the (base|head) server started, 43771 MiB of the GPU's 143771 MiB "
        r"were free; the (base|head) server needs about 106024 MiB",
        d["refused"],
    ), d["refused"]
    assert [(x["side"], x["round"], x["status"]) for x in m["runs"]] == [
        ("base", 1, "ok"), ("head", 1, "ok"), ("head", 2, "ok"), ("base", 2, "ok")
    ]  # fmt: skip


def test_each_gpus_servers_get_their_own_half_of_the_servers_cores() -> None:
    v: Any = SimpleNamespace(
        o=SimpleNamespace(control="none", verification_id="v-cores"),
        sandbox=SimpleNamespace(isolated=False),
        placement=Placement(frozenset(range(8)), frozenset(range(8, 16)), None),
    )
    c = Crossover(v)
    c.gpus = [3, 1]  # the first GPU is the one the runner names first
    assert c._cpus("base@3") == c._cpus("head@3") == frozenset({0, 1, 2, 3})
    assert c._cpus("base@1") == c._cpus("head@1") == frozenset({4, 5, 6, 7})
    v.placement = Placement(frozenset({0}), frozenset({1}), None)
    assert c._cpus("base@3") is None  # one core: the runner's


def test_a_server_with_a_process_on_the_other_gpu_fails_its_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSI_GPU_IDLE_MEM_MIB", "1000000")
    out = tmp_path / "bundle"
    opts = dataclasses.replace(
        _in_process(tmp_path, out, "v-cross", _TwoGpus(tmp_path, 1000, cross=True)),
        design="crossover",
    )
    Verifier(opts).run()
    m = json.loads((out / "manifest.json").read_text())
    assert m["design"]["name"] == "crossover"
    runs = m["runs"]
    assert [(r["status"], r.get("failure")) for r in runs] == [("failed", "crossed-gpu")] * 4
    said = r"the head server given GPU [01] had a process \(pid \d+\) on GPU [01]"
    assert re.search(said, runs[0]["error"])
