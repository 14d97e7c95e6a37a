"""`--design alternate` (runners/resident.py) with the dry task: real processes, real
freezing, the bundle read back by the evidence engine."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from evidence.build import Inputs
from runners import _toml, resident, sandbox
from runners import task as tasks
from runners.gpu import Backend, GpuInfo
from runners.verify import Options, Verifier
from tests import candidates
from tests.test_runner_verify import (
    CANDIDATE_PYTHON,
    LONG_BURSTS,
    ROOT,
    build,
    git,
    make_repo,
    runner_cmd,
    runner_env,
    verify,
)


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    """Isolated runs need a folder the candidate users can pass through."""
    return reachable_tmp


def _bursts(m: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in m["runs"] if r["status"] == "ok"]


def test_alternate_keeps_each_server_resident_and_runs_bursts_in_balanced_pairs(
    tmp_path: Path,
) -> None:
    slow = LONG_BURSTS  # three pairs: one stall must not pull it under +30%
    r, out, m = verify(
        tmp_path,
        slow,
        {**slow, "speed": 1.5},
        "--design",
        "alternate",
        "--rounds",
        "3",
    )
    assert r.returncode == 0, r.stderr
    assert m["isolation"]["mode"] == "cgroup"
    d = m["design"]
    assert (d["name"], d["paired"], d["unit"], d["burst_requests"]) == (
        "alternate",
        True,
        "burst",
        20,
    )
    # the dry server's command names {round}: still one start a side for the row
    assert [len(d["servers"][s]) for s in ("base", "head")] == [1, 1]
    # which side starts first is rotated by the verification id, and recorded
    first = "head" if hashlib.sha256(b"v-test").digest()[0] % 2 else "base"
    assert d["start_order"] == [first, "head" if first == "base" else "base"]
    for side in ("base", "head"):
        srv = d["servers"][side][0]
        assert srv["startup_s"] > 0
        assert srv["exit"]["how"] == "sigterm"
        assert srv["warmup"]["non-streaming"]["passes"] >= 1
    runs = _bursts(m)
    assert [(x["side"], x["round"]) for x in runs] == [
        ("base", 1), ("head", 1), ("head", 2), ("base", 2), ("base", 3), ("head", 3)
    ]  # fmt: skip
    # only the first burst of each server carries its start-up, in startup_s and run_s
    assert [x["startup_s"] is not None for x in runs] == [True, True, False, False, False, False]
    assert runs[0]["run_s"] > runs[0]["startup_s"]
    for x in runs:
        assert json.loads((out / x["files"]["server"]).read_text())["host_cpu_ms"] > 0
    gm = m["gpu_minutes"]
    assert gm["total"] >= max(gm["base"], gm["head"]) > 0
    ev, _ = build(Inputs(bundles=[out]))
    assert ev.verdict == "improved"
    row = next(x for x in ev.study if x.primary)
    assert row.delta_pct is not None
    assert row.delta_pct > 30
    assert (row.method, row.pairs) == ("paired", 3)


def test_without_isolation_the_idle_server_is_stopped_by_signal(tmp_path: Path) -> None:
    r, _, m = verify(tmp_path, {}, {}, "--design", "alternate", "--isolation", "none")
    assert r.returncode == 0, r.stderr
    assert [x["status"] for x in m["runs"]] == ["ok"] * 4
    assert m["design"]["name"] == "alternate"


def test_a_frozen_server_does_not_run_and_a_thawed_one_does(reachable_tmp: Path) -> None:
    """cgroup.freeze stops every process of the group, children included, until thawed."""
    box = sandbox.Sandbox.open("cgroup", reachable_tmp, candidates.USERS)
    proc: subprocess.Popen[bytes] | None = None
    try:
        group = box.group("freeze-test")
        assert group is not None
        tick = reachable_tmp / "tick"
        argv = [
            CANDIDATE_PYTHON,
            "-c",
            "import sys, time\nwhile True:\n    open(sys.argv[1], 'w').write(str(time.time()))\n"
            "    time.sleep(0.01)",
            str(tick),
        ]
        cmd, env = box.command("base", group, argv, {"PATH": os.environ["PATH"]})
        box.own("base", reachable_tmp)
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        deadline = time.monotonic() + 10
        while not tick.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        res = resident.Resident(
            "base",
            "base",
            _Proc(proc),  # type: ignore[arg-type]
            group,
            {},
            tick,
            time.monotonic(),
            {},
        )
        resident.freeze(res, True)
        assert "frozen 1" in (group.path / "cgroup.events").read_text()
        before = tick.read_text()
        time.sleep(0.3)
        assert tick.read_text() == before  # nothing ran while frozen
        resident.freeze(res, False)
        # thawed, it writes again: waited for (a loaded machine may take its time to
        # schedule it), where the frozen one had its 0.3 s and wrote nothing
        deadline = time.monotonic() + 10
        while tick.read_text() == before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert tick.read_text() != before
    finally:
        box.close()  # kills the group
        if proc is not None:
            proc.wait(timeout=10)


class _Proc:
    """What `freeze` needs of a server: its process group id."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.pid = popen.pid


class _BigServers(Backend):
    """A GPU whose memory fills when a dry server of this test runs (its command line
    names `within`; other test processes run theirs): 100 GB of 140 GB each."""

    name = "fake"

    def __init__(self, within: Path) -> None:
        self.within = str(within).encode()

    def sample(self) -> list[dict[str, Any]]:
        servers = 0
        for e in os.listdir("/proc"):
            if e.isdigit():
                try:
                    cmd = Path(f"/proc/{e}/cmdline").read_bytes()
                except OSError:
                    continue
                servers += b"runners/dry/server.py" in cmd and self.within in cmd
        return [
            {
                "gpu": 0,
                "sm_clock_mhz": 1980,
                "util_pct": 0,
                "mem_used_mib": 100_000 * servers,
                "power_w": 100.0,
                "throttle_reasons": [],
            }
        ]

    def processes(self) -> list[dict[str, Any]] | None:
        return []

    def info(self) -> GpuInfo:
        return GpuInfo(gpu_name="NVIDIA H200", gpu_count=1, gpu_memory_total_mib=143_771)


def _in_process(tmp_path: Path, out: Path, vid: str, backend: Backend) -> Options:
    """An alternate A/A of the dry task run in this process, unisolated, on `backend`."""
    b, h = make_repo(tmp_path / "repo", {}, {})
    return Options(
        repo=str(tmp_path / "repo"),
        base=b,
        head_repo=str(tmp_path / "repo"),
        head=h,
        task=tasks.load("dry"),
        gpu="h200",
        rounds=2,
        modes=["non-streaming"],
        out=out,
        verification_id=vid,
        repo_name="owner/repo",
        requests=10,
        workdir=tmp_path / "work",
        prelaunch_s=0.0,
        sample_interval_s=0.2,
        backend=backend,
        isolation="none",
        design="alternate",
        python=CANDIDATE_PYTHON,
    )


def test_servers_that_cannot_fit_twice_fall_back_to_sequential_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSI_GPU_IDLE_MEM_MIB", "1000000")
    out = tmp_path / "bundle"
    opts = _in_process(tmp_path, out, "v-fit", _BigServers(tmp_path))
    assert Verifier(opts).run() == 0
    m = json.loads((out / "manifest.json").read_text())
    d = m["design"]
    assert (d["name"], d["paired"]) == ("sequential", True)  # rounds are pairs too
    assert re.match(
        r"after the (base|head) server started, 43771 MiB of the GPU's 143771 MiB were free; "
        r"the (base|head) server needs about 106024 MiB \(the 100000 MiB",
        d["refused"],
    ), d["refused"]
    assert any("design alternate refused" in w for w in m["warnings"])
    runs = m["runs"]
    assert [(x["side"], x["round"], x["status"]) for x in runs] == [
        ("base", 1, "ok"), ("head", 1, "ok"), ("head", 2, "ok"), ("base", 2, "ok")
    ]  # fmt: skip
    assert all(x["startup_s"] for x in runs)  # a server start per run again


def test_a_server_command_that_changes_with_the_row_gets_a_server_per_row() -> None:
    class V:
        task = tasks.load("gpu-reference")

    assert resident.per_row(V()) is False  # type: ignore[arg-type]
    V.task = tasks.load("dry")  # its command names {round}
    assert resident.per_row(V()) is True  # type: ignore[arg-type]


def test_a_null_control_pairs_the_base_code_with_the_base_beside_every_real_pair(
    tmp_path: Path,
) -> None:
    r, _, m = verify(tmp_path, {}, {}, "--design", "alternate", "--control", "aa")
    assert r.returncode == 0, r.stderr
    assert not m.get("survivors")  # the control shares the base's user, not its cgroup
    c = m["control"]
    assert c["kind"] == "aa"
    assert c["gpu_minutes"] > 0
    assert [(x["id"], x["status"]) for x in c["runs"]] == [
        ("ctl-r1-base-nonstream-c4", "ok"), ("ctl-r1-head-nonstream-c4", "ok"),
        ("ctl-r2-head-nonstream-c4", "ok"), ("ctl-r2-base-nonstream-c4", "ok"),
    ]  # fmt: skip
    assert [x["id"] for x in m["runs"]] == [
        "r1-base-nonstream-c4", "r1-head-nonstream-c4",
        "r2-head-nonstream-c4", "r2-base-nonstream-c4",
    ]  # fmt: skip
    servers = m["design"]["servers"]
    assert [len(servers[s]) for s in ("base", "head", "control")] == [1, 1, 1]
    assert "/base/" in " ".join(servers["control"][0]["command"])  # the base's code
    for x in c["runs"]:
        assert x["files"]["speed"] in m["digests"]


def test_a_null_control_needs_the_alternate_design(tmp_path: Path) -> None:
    b, h = make_repo(tmp_path / "repo", {}, {})
    out = tmp_path / "bundle"
    r = subprocess.run(
        runner_cmd(tmp_path / "repo", b, h, out, "--design", "sequential", "--control", "aa"),
        cwd=ROOT,
        env=runner_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "--control aa needs the alternate design (this verification's is sequential" in r.stderr
    assert not out.exists()


def test_a_null_control_asked_for_with_design_auto_takes_the_alternate_design(
    tmp_path: Path,
) -> None:
    r, _, m = verify(tmp_path, {}, {}, "--control", "aa")  # the dry task's own is sequential
    assert r.returncode == 0, r.stderr
    assert (m["design"]["name"], m["design"]["chosen_by"]) == ("alternate", "control")
    assert len(m["control"]["runs"]) == 4


def test_without_design_the_task_chooses() -> None:
    assert tasks.load("gpu-reference").benchmark.design == "alternate"
    assert tasks.load("dry").benchmark.design == "sequential"
    doc = _toml.loads(tasks.resolve("dry").read_text())
    doc["benchmark"]["design"] = "both"
    with pytest.raises(tasks.TaskError, match=r"`benchmark.design` must be one of sequential, alt"):
        tasks.parse(doc, "dry.toml")


def test_a_resident_server_that_crashes_fails_its_burst_and_is_started_again(
    tmp_path: Path,
) -> None:
    # 20 warm-up requests, then the first burst's tenth request crashes the head's server
    # (the dry server counts requests per process, and only in the round it started in)
    r, _, m = verify(
        tmp_path,
        {},
        {"crash_after": 30, "fail_rounds": [1]},
        "--design",
        "alternate",
        "--rounds",
        "3",
    )
    assert r.returncode == 0, r.stderr
    assert m["complete"] is True
    status = {x["id"]: (x["status"], x.get("failure")) for x in m["runs"]}
    assert status["r1-head-nonstream-c4"] == ("failed", "crashed")
    assert [s for s, _ in status.values()].count("ok") == 5
    heads = m["design"]["servers"]["head"]
    assert len(heads) == 2  # started again for round 2
    assert heads[0]["exit"]["returncode"] == 70
    assert not m.get("survivors")


class _Util(Backend):
    """A GPU whose utilisation readings are given in order (the last one repeats)."""

    name = "fake"

    def __init__(self, *utils: int | None) -> None:
        self.utils = list(utils)

    def sample(self) -> list[dict[str, Any]]:
        u = self.utils.pop(0) if len(self.utils) > 1 else self.utils[0]
        return [{"gpu": 0, "util_pct": u, "mem_used_mib": 0}]


def test_a_switch_waits_until_the_frozen_sides_queued_gpu_work_has_run() -> None:
    got = resident.gpu_quiet(_Util(100, 100, 100, 0, 3), poll_s=0.01)
    assert got["quiet"] is True
    assert got["read"] is True
    assert got["util_pct"] == 3
    assert got["waited_s"] >= 0.03  # three busy readings before two quiet ones


def test_work_queued_past_the_limit_stops_the_next_burst_from_being_measured() -> None:
    got = resident.gpu_quiet(_Util(100), timeout_s=0.2, poll_s=0.01)
    assert got["quiet"] is False
    assert got["util_pct"] == 100
    assert got["waited_s"] >= 0.2


def test_a_gpu_without_utilisation_readings_does_not_wait() -> None:
    assert resident.gpu_quiet(_Util(None), timeout_s=0.2)["read"] is False
    assert resident.gpu_quiet(Backend())["quiet"] is True


class _BusyWhileServed(_BigServers):
    """A GPU that stays busy whenever a dry server exists: as if a frozen side's queued
    kernels ran on after it froze."""

    def sample(self) -> list[dict[str, Any]]:
        (s,) = super().sample()
        return [dict(s, util_pct=100 if s["mem_used_mib"] else 0, mem_used_mib=0)]


def test_a_burst_after_a_switch_is_not_measured_while_the_gpu_is_still_busy(
    tmp_path: Path,
) -> None:
    out = tmp_path / "bundle"
    opts = _in_process(tmp_path, out, "v-busy", _BusyWhileServed(tmp_path))
    Verifier(opts).run()
    m = json.loads((out / "manifest.json").read_text())
    runs = {x["id"]: x for x in m["runs"]}
    # the second burst of each pair follows a switch: the GPU never went quiet
    for rid in ("r1-head-nonstream-c4", "r2-base-nonstream-c4"):
        assert (runs[rid]["status"], runs[rid]["failure"]) == ("failed", "gpu-busy")
        assert "still busy" in runs[rid]["error"]
    for rid in ("r1-base-nonstream-c4", "r2-head-nonstream-c4"):
        assert runs[rid]["status"] == "ok"


PROBE = '''"""A hostile head: before serving, it looks for the base's resident server (its port is
on its public command line) and tries to reach it."""
import os, runpy, socket, sys, time

def ports():
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
        except OSError:
            continue
        cmd = [c.decode(errors="replace") for c in cmd]
        if "--side" in cmd and "--port" in cmd and cmd[cmd.index("--side") + 1] == "base":
            found.append(int(cmd[cmd.index("--port") + 1]))
    return found

targets = ports()
print(f"PROBE saw base ports {targets}", file=sys.stderr, flush=True)
for port in targets:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        print(f"PROBE REACHED {port}", file=sys.stderr, flush=True)
    except OSError as exc:
        print(f"PROBE BLOCKED {port}: {exc}", file=sys.stderr, flush=True)
sys.argv[0] = os.path.join(os.path.dirname(__file__), "dry_server.py")
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def test_a_resident_head_cannot_reach_the_base_it_sits_beside(tmp_path: Path) -> None:
    """An outside try: with both servers resident, a head connected to the base's port
    and queued heavy requests there while the base was frozen; an A/A read +80%. Each
    isolated server now has a network namespace of its own, loopback only."""
    task_file = tmp_path / "dry-worktree.toml"
    task_file.write_text(
        tasks.resolve("dry")
        .read_text()
        .replace("{rsi_root}/runners/dry/server.py", "{worktree}/srv.py", 1)
    )
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    dry = (ROOT / "runners" / "dry" / "server.py").read_text()
    (repo / "srv.py").write_text(dry)
    (repo / "rsi-dry.json").write_text("{}")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "dry_server.py").write_text(dry)
    (repo / "srv.py").write_text(PROBE)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "head")
    head = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "bundle"
    cmd = runner_cmd(repo, base, head, out, "--task", str(task_file), "--design", "alternate")
    # the base starts first, so the head's probe runs while the base is resident
    cmd[cmd.index("--verification-id") + 1] = "v-base-first"
    assert hashlib.sha256(b"v-base-first").digest()[0] % 2 == 0
    r = subprocess.run(cmd, cwd=ROOT, env=runner_env(), capture_output=True, text=True, timeout=120)
    m = json.loads((out / "manifest.json").read_text())
    assert [x["status"] for x in m["runs"]] == ["ok"] * 4, r.stderr
    servers = m["design"]["servers"]
    log = (out / servers["head"][0]["log"]).read_text()
    assert "PROBE saw base ports [" in log
    assert "PROBE REACHED" not in log
    assert "PROBE BLOCKED" in log
    assert {s[0]["network"] for s in servers.values()} == {"its own namespace, loopback only"}


def test_a_server_variable_naming_a_run_placeholder_does_not_break_the_probes(
    tmp_path: Path,
) -> None:
    """An outside try: `env = { RSI_MODE = "{mode}" }` raised KeyError('mode') while the
    sides were fingerprinted, and every run was skipped as a runner error."""
    task_file = tmp_path / "dry-env.toml"
    task_file.write_text(
        tasks.resolve("dry").read_text().replace("env = {}", 'env = { RSI_MODE = "{mode}" }', 1)
    )
    b, h = make_repo(tmp_path / "repo", {}, {})
    out = tmp_path / "bundle"
    cmd = runner_cmd(tmp_path / "repo", b, h, out, "--task", str(task_file), "--isolation", "none")
    r = subprocess.run(cmd, cwd=ROOT, env=runner_env(), capture_output=True, text=True, timeout=120)
    m = json.loads((out / "manifest.json").read_text())
    assert m["error"] is None, r.stderr
    assert [x["status"] for x in m["runs"]] == ["ok"] * 4
