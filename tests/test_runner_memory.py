"""Each server's share of the GPU (runners/memory.py): the placeholders, the task check,
the fit check and the fall-back, on the dry two-stage task and a simulated GPU
(runners/gpu.py `DryGpu`, runners/dry/gpumem.py) — real processes, real files."""

from __future__ import annotations

import fcntl
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runners import memory
from runners import task as tasks
from runners.dry import gpumem
from runners.gpu import Backend, DryGpu, GpuInfo
from runners.verify import Verifier
from tests.test_runner_verify import ROOT, make_repo, runner_cmd, runner_env

ARTICLE_TASKS = (
    "cosyvoice3",
    "qwen3-tts",
    "qwen3-asr",
    "whisper",
    "fish-s2-pro",
    "moss-tts",
    "moss-td",
    "ming3-tts",
)
H100 = 81559


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    """Isolated runs need a folder the candidate users can pass through."""
    return reachable_tmp


# ------------------------------------------------------------------ the placeholders


def test_the_free_memory_fraction_gives_the_second_server_the_same_share() -> None:
    m = memory.Memory(other_gib=4.0)
    first = memory.free_fraction(m, 0.45, H100, 0)
    assert first == pytest.approx((0.45 * H100 - 4096) / H100)
    took = int(first * H100) + 4096  # the engine's part, and what it holds outside
    second = memory.free_fraction(m, 0.45, H100, took)
    assert int(second * (H100 - took)) + 4096 == pytest.approx(took, rel=1e-3)
    assert second > 0.7  # SGLang takes it of what is left: about (0.45 - 4 GiB) / 0.55


def test_stage_budgets_are_carved_out_of_the_share_and_rounded_down() -> None:
    m = memory.Memory(shares={"vocoder": 0.2})
    v = memory.values(m, 0.45, H100, 0)
    assert v["memory_fraction"] == 0.45
    assert v["memory_fraction_vocoder"] == "0.090"
    assert v["mem_fraction_static"] == "0.360"  # 0.8 of 0.45 on an empty GPU
    assert memory.values(m, 1 / 3, None, None)["memory_fraction_vocoder"] == "0.066"
    assert memory.values(m, 0.45, None, None)["mem_fraction_static"] == "0.450"  # no GPU


def test_resident_shares_split_what_one_gpu_leaves() -> None:
    assert memory.resident_share(2) == 0.45
    assert memory.resident_share(3) == 0.3  # with the null control


def test_memory_flags_are_found_however_they_are_spelt() -> None:
    cmd = (
        "{python} -m sglang_omni.cli serve --mem-fraction-static 0.8 "
        "--asr.engine.mem_fraction_static={mem_fraction_static} "
        "--tts_engine.gpu_memory_fraction {memory_fraction_tts_engine} "
        "--gpu-memory-utilization 0.9 --max-running-requests 16"
    )
    assert memory.flags(cmd) == [
        ("--mem-fraction-static", "0.8"),
        ("--asr.engine.mem_fraction_static", "{mem_fraction_static}"),
        ("--tts_engine.gpu_memory_fraction", "{memory_fraction_tts_engine}"),
        ("--gpu-memory-utilization", "0.9"),
    ]
    m = memory.Memory(shares={"tts_engine": 0.9})
    assert memory.unshared(cmd, m) == ["--mem-fraction-static 0.8", "--gpu-memory-utilization 0.9"]
    for wrapped in (
        "sh -c 'exec python -m x --mem-fraction-static 0.5'",
        'bash -lc "python -m x --mem-fraction-static 0.5"',
        "env A=1 /bin/sh -ec 'cd w && exec python -m x --mem-fraction-static=0.5'",
    ):
        assert memory.flags(wrapped) == [("--mem-fraction-static", "0.5")], wrapped


def test_a_second_server_that_does_not_fit_is_refused_with_the_figures() -> None:
    assert memory.others_fit("base", 30_000, 30_000, H100, ["head"]) is None
    why = memory.others_fit("head", 40_000, 40_500, H100, ["base"])
    assert why == (
        "after the head server started, 41059 MiB of the GPU's 81559 MiB were free; the base "
        "server needs about 43024 MiB (the 40000 MiB the head took, +5% and 1024 MiB for "
        "first requests, each)"
    )
    why3 = memory.others_fit("base", 25_000, 30_000, H100, ["head", "control"])
    assert why3 is not None
    assert "the head and control servers need about 54548 MiB" in why3


# ------------------------------------------------------------------ the task check


def _task(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.toml"
    p.write_text(text)
    return p


def _with(server: str, design: str, memory_table: str = "") -> str:
    dry = (ROOT / "runners" / "tasks" / "dry.toml").read_text()
    dry = re.sub(r'(?m)^command = "\{python\} \{rsi_root\}/runners/dry/server.py.*$', server, dry)
    dry = dry.replace("env = {}\n", "env = {}\n" + memory_table, 1)
    return dry.replace('dataset = "dry', f'design = "{design}"\ndataset = "dry', 1)


def test_an_alternate_task_with_a_fixed_memory_flag_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    fixed = 'command = "{python} -m srv --port {port} --mem-fraction-static 0.80"'
    with pytest.raises(tasks.TaskError) as e:
        tasks.load(str(_task(tmp_path, _with(fixed, "alternate"))))
    assert "`server.command` sets GPU memory with --mem-fraction-static 0.80" in str(e.value)
    assert "{mem_fraction_static}" in str(e.value)
    # run sequential, one server has the GPU alone: a fixed fraction is its own business
    assert tasks.load(str(_task(tmp_path, _with(fixed, "sequential")))).benchmark.design == (
        "sequential"
    )


def test_each_memory_flag_must_take_the_share_in_the_form_it_reads(tmp_path: Path) -> None:
    """--mem-fraction-static reads a fraction of free memory; a budget flag, of the whole
    GPU: either told the other's placeholder would starve or swell the second server."""
    table = "\n[server.memory]\nshares = { x = 0.5 }\n"
    for cmd, said in [
        ("--mem-fraction-static {memory_fraction}", "--mem-fraction-static {memory_fraction}"),
        ("--x.gpu_memory_fraction {mem_fraction_static}", "--x.gpu_memory_fraction {mem"),
    ]:
        text = _with(f'command = "{{python}} -m srv --port {{port}} {cmd}"', "alternate", table)
        with pytest.raises(tasks.TaskError) as e:
            tasks.load(str(_task(tmp_path, text)))
        assert f"sets GPU memory with {said}" in str(e.value), str(e.value)


def test_a_variant_without_a_share_is_refused_though_the_command_has_one(
    tmp_path: Path,
) -> None:
    ok = 'command = "{python} -m srv --port {port} --mem-fraction-static {mem_fraction_static}"'
    text = _with(ok, "alternate") + (
        '\n[[server.variants]]\nwhen_exists = "new.yaml"\n'
        'command = "{python} -m srv --port {port} --config new.yaml"\n'
    )
    # the variants table must sit inside [server]: move it up before [benchmark]
    head, rest = text.split("\n[benchmark]\n", 1)
    variant = rest[rest.index("\n[[server.variants]]") :]
    text = head + variant + "\n[benchmark]\n" + rest[: rest.index("\n[[server.variants]]")]
    with pytest.raises(tasks.TaskError, match=r"`server.variants\[0\].command` sets no GPU"):
        tasks.load(str(_task(tmp_path, text)))


def test_an_alternate_task_that_sets_no_share_must_say_why(tmp_path: Path) -> None:
    bare = 'command = "{python} -m srv --port {port}"'
    with pytest.raises(tasks.TaskError, match="sets no GPU memory share"):
        tasks.load(str(_task(tmp_path, _with(bare, "alternate"))))
    why = '\n[server.memory]\nunmanaged = "a small model, allocated as it goes"\n'
    t = tasks.load(str(_task(tmp_path, _with(bare, "alternate", why))))
    assert t.server.memory.unmanaged == "a small model, allocated as it goes"


def test_bad_shares_are_refused_by_key(tmp_path: Path) -> None:
    cmd = 'command = "{python} -m srv --port {port} --x.gpu_memory_fraction {memory_fraction_x}"'
    for table, said in [
        ("shares = { x = 0.7, y = 0.5 }", "`server.memory.shares` must sum to at most 1"),
        ("shares = { X = 0.5 }", "`server.memory.shares` 'X' is not a stage name"),
        ("shares = { x = 0 }", "`server.memory.shares.x` must lie in (0, 1]"),
        ("other_gib = -1", "`server.memory.other_gib` must lie in [0, 1024)"),
        ("shares = { x = 0.5 }\nextra = 1", "server.memory"),
    ]:
        text = _with(cmd, "alternate", f"\n[server.memory]\n{table}\n")
        with pytest.raises(tasks.TaskError) as e:
            tasks.load(str(_task(tmp_path, text)))
        assert said in str(e.value), str(e.value)
    # a stage placeholder the shares do not declare is an unknown placeholder
    with pytest.raises(tasks.TaskError, match=r"unknown placeholder\(s\) \{memory_fraction_x\}"):
        tasks.load(str(_task(tmp_path, _with(cmd, "alternate"))))


@pytest.mark.parametrize("name", ARTICLE_TASKS)
def test_every_article_task_runs_alternate_and_its_memory_flags_take_the_share(name: str) -> None:
    t = tasks.load(name)
    assert t.benchmark.design == "alternate"
    assert t.server.memory.unmanaged is None
    for _key, command in t.server.commands():
        found = memory.flags(command)
        assert found, f"{name}: {command}"
        assert all(v.strip("{}") in t.server.memory.placeholders() for _, v in found)
    text = (ROOT / "runners" / "tasks" / f"{name}.toml").read_text()
    for said in ("sglang-omni 0.1.9", "H100", "H200"):  # cited, and sized for both GPUs
        assert said in text


def test_the_tasks_list_says_each_design_and_memory_share() -> None:
    r = subprocess.run(
        [sys.executable, "-S", "-E", "-m", "runners", "tasks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    said = {lines[i].split(":")[0]: lines[i + 1].strip() for i in range(0, len(lines), 2)}
    assert said["moss-tts"] == (
        "design alternate; memory --preprocessing.gpu_memory_fraction "
        "{memory_fraction_preprocessing} = 0.06 × 0.45 = 0.027; --tts_engine.gpu_memory_fraction "
        "{memory_fraction_tts_engine} = 0.8 × 0.45 = 0.360; --vocoder.gpu_memory_fraction "
        "{memory_fraction_vocoder} = 0.14 × 0.45 = 0.063"
    )
    assert said["whisper"] == (
        "design alternate; memory --mem-fraction-static {mem_fraction_static} "
        "(of free memory, for 0.45 of the GPU less 3 GiB)"
    )
    assert said["dry"] == "design sequential; memory not set"
    assert said["gpu-reference"].startswith("design alternate; memory not set (the reference")


# ------------------------------------------------------------------ the simulated GPU


def test_the_simulated_gpu_frees_a_dead_servers_memory_and_keeps_a_live_ones(
    tmp_path: Path,
) -> None:
    gpu = tmp_path / "gpu"
    gpu.mkdir()
    live = (gpu / "1-1.mib").open("wb")
    fcntl.flock(live, fcntl.LOCK_EX)
    live.write(b"5000")
    live.flush()
    (gpu / "2-2.mib").write_text("7000")  # nobody holds it: a killed server's
    backend = DryGpu(gpu, 20_000)
    assert backend.sample()[0]["mem_used_mib"] == 5000
    assert not (gpu / "2-2.mib").exists()
    assert backend.info().gpu_memory_total_mib == 20_000
    live.close()
    assert backend.sample()[0]["mem_used_mib"] == 0


def test_a_dry_stage_given_less_than_its_weights_is_out_of_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(gpumem.FOLDER_VAR, str(tmp_path))
    monkeypatch.setenv(gpumem.SIZE_VAR, "10000")
    with pytest.raises(gpumem.OutOfMemory, match="cannot hold its 6000 MiB of weights"):
        gpumem.take(["engine=0.5:free:6000"], "a")
    held = gpumem.take(["engine=0.5:free:1000", "vocoder=0:fixed:3000"], "b")
    assert held is not None
    assert held[1] == [
        "stage engine: 5000 MiB (free 0.5; 10000 MiB were free)",
        "stage vocoder: 3000 MiB (fixed 0.0; 5000 MiB were free)",
    ]
    with pytest.raises(gpumem.OutOfMemory, match="3000 MiB wanted, 2000 MiB free"):
        gpumem.take(["vocoder=0:fixed:3000"], "c")
    held[0].close()


def _stages(tmp_path: Path, gpu_mib: int, task_text: str | None = None) -> dict[str, Any]:
    """An A/A of the dry two-stage task, isolated, on a simulated GPU of `gpu_mib`."""
    gpu = tmp_path / "gpu"
    gpu.mkdir()
    gpu.chmod(0o1777)
    task = "dry-stages"
    if task_text is not None:
        (tmp_path / "dry-stages-x.toml").write_text(task_text)
        task = str(tmp_path / "dry-stages-x.toml")
    b, h = make_repo(tmp_path / "repo", {}, {})
    out = tmp_path / "bundle"
    cmd = runner_cmd(tmp_path / "repo", b, h, out, "--design", "auto")
    cmd[cmd.index("--task") + 1] = task
    cmd[cmd.index("--gpu") + 1] = "h100"
    env = runner_env(
        RSI_GPU_BACKEND="dry",
        RSI_DRY_GPU=str(gpu),
        RSI_DRY_GPU_MIB=str(gpu_mib),
        RSI_GPU_IDLE_MEM_MIB="1000000",  # the resident servers' memory is ours
    )
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    m: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return m


def _took(m: dict[str, Any], slot: str) -> int:
    return int(m["design"]["servers"][slot][0]["vram_mib"])


def test_two_stage_servers_each_take_their_share_of_a_simulated_h100(tmp_path: Path) -> None:
    m = _stages(tmp_path, H100)
    d = m["design"]
    assert (d["name"], d.get("refused")) == ("alternate", None)
    first, second = d["start_order"][:2]
    want = 0.45 * H100
    assert _took(m, first) == pytest.approx(want, rel=0.01)
    assert _took(m, second) == pytest.approx(want, rel=0.01)  # not half of it
    rec = d["servers"][second][0]
    assert rec["memory_fraction"] == 0.45
    assert rec["memory_fraction_vocoder"] == "0.090"
    assert float(rec["mem_fraction_static"]) > 0.6  # of what the first one left free
    assert all(r["status"] == "ok" for r in m["runs"])
    assert not [w for w in m["warnings"] if "memory" in w]


def test_a_fraction_of_free_memory_passed_as_a_share_of_the_gpu_starves_the_second(
    tmp_path: Path,
) -> None:
    """Why `{mem_fraction_static}` exists: the same task told `{memory_fraction}`."""
    text = (ROOT / "runners" / "tasks" / "dry-stages.toml").read_text()
    text = text.replace("engine={mem_fraction_static}:free", "engine={memory_fraction}:free")
    text = text.replace(" --gpu-stage vocoder={memory_fraction_vocoder}:total:2000", "")
    text = text.replace("shares = { vocoder = 0.2 }", "")
    m = _stages(tmp_path, H100, text)
    assert m["design"]["name"] == "alternate"
    first, second = m["design"]["start_order"][:2]
    assert _took(m, second) < 0.7 * _took(m, first)
    said = f"the {first} server took {_took(m, first)} MiB of GPU memory and the {second} "
    assert [w for w in m["warnings"] if w.startswith(said)], m["warnings"]


def test_a_gpu_too_small_for_two_falls_back_to_sequential_saying_why(tmp_path: Path) -> None:
    text = (ROOT / "runners" / "tasks" / "dry-stages.toml").read_text()
    # a vocoder that holds 10 GB whatever it is told (cosyvoice3's prefix pool)
    text = text.replace("vocoder={memory_fraction_vocoder}:total:2000", "vocoder=0:fixed:10000")
    m = _stages(tmp_path, 40_000, text)
    d = m["design"]
    assert d["name"] == "sequential"
    assert re.fullmatch(
        r"after the (base|head) server started, 15600 MiB of the GPU's 40000 MiB were free; "
        r"the (base|head) server needs about 26644 MiB \(the 24400 MiB the (base|head) took, "
        r"\+5% and 1024 MiB for first requests, each\): the 2 servers do not fit, so the "
        r"sequential design ran",
        d["refused"],
    ), d["refused"]
    assert all(r["status"] == "ok" for r in m["runs"])  # alone, each server fits
    assert any("design alternate refused" in w for w in m["warnings"])


def test_the_dry_backend_needs_its_folder() -> None:
    with pytest.raises(RuntimeError, match="RSI_DRY_GPU, an existing folder"):
        DryGpu.from_env({"RSI_DRY_GPU": "/nonexistent/rsi"})


class _NoMemory(Backend):
    """A GPU whose memory cannot be read (NVML answering, its memory query failing)."""

    name = "fake"

    def sample(self) -> list[dict[str, Any]]:
        return [
            {"gpu": 0, "sm_clock_mhz": 1980, "util_pct": 0, "mem_used_mib": None, "power_w": 100.0}
        ]

    def processes(self) -> list[dict[str, Any]] | None:
        return []

    def info(self) -> GpuInfo:
        return GpuInfo(gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1)


def test_a_gpu_whose_memory_cannot_be_read_is_said_not_to_have_been_checked(
    tmp_path: Path,
) -> None:
    from tests.test_runner_resident import _in_process

    opts = _in_process(tmp_path, tmp_path / "bundle", "v-unread", _NoMemory())
    assert Verifier(opts).run() == 0
    m = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert m["design"]["name"] == "alternate"
    said = [w for w in m["warnings"] if "memory could not be read" in w]
    assert said == [
        "the GPU's memory could not be read around the servers' starts: whether they fit "
        "together was not checked, and each was given its share as if the GPU were empty "
        "({mem_fraction_static} = {memory_fraction})"
    ]
