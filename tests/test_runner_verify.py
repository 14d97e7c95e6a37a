"""`rsi-runner verify` end to end with the dry task: real processes, a real bundle.

The runner runs as `python -S -E -m runners` (no site-packages: the standard library
only, as on a GPU image without the app's stack); its bundle is then read by the
evidence engine. Failures are provoked through the dry server's `rsi-dry.json` in the
repository under test, so base and head differ by commit, as they would for real.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from evidence.build import Inputs
from evidence.build import build as _build
from evidence.load import load
from tests import candidates

ROOT = Path(__file__).resolve().parent.parent
FAKE_SMI = ROOT / "tests" / "fixtures" / "nvidia-smi" / "bin"


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    """Each side runs as its own user, which must reach its worktree (conftest)."""
    return reachable_tmp


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def make_repo(path: Path, base: dict[str, Any], head: dict[str, Any]) -> tuple[str, str]:
    """A repository with two commits whose `rsi-dry.json` configures the dry server."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README.md").write_text("dry\n")
    (path / "rsi-dry.json").write_text(json.dumps(base))
    git(path, "add", ".")
    git(path, "commit", "-qm", "base")
    (path / "rsi-dry.json").write_text(json.dumps(head))
    (path / "README.md").write_text("dry, changed\n")
    git(path, "commit", "-qam", "head")
    return git(path, "rev-parse", "HEAD~1"), git(path, "rev-parse", "HEAD")


# The dry task's requests at 4 ms a character: bursts of about 1.7 s, not 0.4 s. A test that
# asserts an interval excludes zero (or a decision within a few rounds) uses them, so that a
# loaded test machine stalling a process for a tenth of a second moves a run by a few percent,
# not by a quarter (in CI one such stall took a 2x head's decision past round 3).
LONG_BURSTS: dict[str, Any] = {"char_ms": 4.0}


# The candidates' interpreter: the machine's own, which the candidate users can run (a
# virtual environment under /root is closed to them; the runner checks and says so).
CANDIDATE_PYTHON = candidates.PYTHON


def runner_cmd(repo: Path, base: str, head: str, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-S",
        "-E",
        "-m",
        "runners",
        "verify",
        "--repo",
        str(repo),
        "--base",
        base,
        "--head",
        head,
        "--task",
        "dry",
        "--gpu",
        "cpu",
        "--rounds",
        "2",
        "--modes",
        "non-streaming",
        "--requests",
        "20",
        "--out",
        str(out),
        "--workdir",
        str(out.parent / "work"),
        "--prelaunch-window",
        "0.1",
        "--sample-interval",
        "0.2",
        "--verification-id",
        "v-test",
        "--repo-name",
        "owner/repo",
        "--python",
        CANDIDATE_PYTHON,
        *candidates.users_arg(),
        *extra,
    ]


def runner_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RSI_", "FAKE_NVIDIA"))}
    env.update(extra)
    return env


def verify(
    tmp_path: Path,
    base_cfg: dict[str, Any],
    head_cfg: dict[str, Any],
    *extra: str,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], Path, dict[str, Any]]:
    b, h = make_repo(tmp_path / "repo", base_cfg, head_cfg)
    out = tmp_path / "bundle"
    r = subprocess.run(
        runner_cmd(tmp_path / "repo", b, h, out, *extra),
        cwd=ROOT,
        env=env or runner_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (out / "manifest.json").is_file(), r.stderr
    return r, out, json.loads((out / "manifest.json").read_text())


def build(inputs: Inputs) -> Any:
    """`evidence.build.build`, minus one SciPy warning that is the engine's to fix.

    With two rounds a side, a figure can come out identical in both rounds of one side
    (a start-up time at millisecond resolution, a p95 of gaps rounded to 0.1 ms), and
    `evidence.stats.compare` then hands SciPy's t-test a zero-variance sample, which
    warns ("Precision loss … nearly identical"). That is reported to the engine's owner;
    here it must not make a runner test flaky.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        return _build(inputs)


def by_id(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in manifest["runs"]}


def leftovers(marker: Path) -> list[str]:
    """Processes whose command line mentions `marker` (nothing may outlive a run)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(marker) in cmd and "pytest" not in cmd:
            found.append(f"{pid}: {cmd}")
    return found


@pytest.fixture(autouse=True)
def _no_leftover_processes(tmp_path: Path) -> Any:
    yield
    deadline = time.monotonic() + 5
    while leftovers(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leftovers(tmp_path)


# ------------------------------------------------------------------ a clean run


def test_dry_verify_makes_a_bundle_the_engine_accepts(tmp_path: Path) -> None:
    r, out, m = verify(
        tmp_path, {"speed": 1.0}, {"speed": 2.5}, "--modes", "streaming", "--head-ref", "topic"
    )
    assert r.returncode == 0, r.stderr
    assert m["schema"] == "rsi-bundle/1"
    assert m["complete"] is True
    assert r.stderr.count(" left] run ") == len(m["runs"])  # each run said as it ended
    assert "rsi-runner: stopped: every planned run was made (fixed rounds)" in r.stderr
    assert m["repo"] == "owner/repo"
    assert m["task"] == "dry"
    assert m["gpu"] == "CPU"
    assert m["head"]["ref"] == "topic"
    assert len(m["base"]["sha"]) == 40
    assert m["base"]["sha"] != m["head"]["sha"]
    ids = [x["id"] for x in m["runs"]]
    assert ids == [
        "r1-base-stream-c4",
        "r1-head-stream-c4",
        "r2-head-stream-c4",
        "r2-base-stream-c4",
    ]
    for run in m["runs"]:
        assert run["status"] == "ok", run
        assert run["requests"] == 20
        assert run["warmup_requests"] == 4
        assert run["wall_clock_source"] == "client-summary"
        assert 0 < run["wall_clock_s"] <= run["runner_wall_s"]
        for rel in run["files"].values():
            assert (out / rel).is_file()
        assert (out / run["logs"]["server"]).is_file()
        assert (out / run["logs"]["client"]).is_file()
        server = json.loads((out / run["files"]["server"]).read_text())
        assert server["startup_s"] > 0
        assert server["gpu_samples"] == []
        assert server["peak_vram_mib"] is None
        assert isinstance(server["cpuset_busy_prelaunch"], float)
        assert isinstance(server["foreign_peak_cores"], float)
        assert isinstance(server["host_cpu_ms"], float)
        assert server["host_cpu_ms"] > 0
        assert server["server_exit"]["how"] == "sigterm"
        speed = json.loads((out / run["files"]["speed"]).read_text())
        assert len(speed["per_request"]) == 20
        assert speed["summary"]["wall_clock_s"] == run["wall_clock_s"]
    # accuracy once per side, in the first round
    assert [x["id"] for x in m["runs"] if "wer" in x["files"]] == ids[:2]
    env = m["environment"]
    version = subprocess.run(
        [CANDIDATE_PYTHON, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert env["base"]["python"] == env["head"]["python"] == version
    assert env["base"]["cpu_count"] >= 1
    assert env["base"]["gpu_count"] == 0
    assert m["benchmark"]["requests"] == 20
    assert m["benchmark"]["concurrencies"] == [4]

    src = load(out)
    assert src.findings == []
    ev, _ = build(Inputs(bundles=[out]))
    errors = [f for f in ev.audit if f.severity == "error"]
    assert errors == [], errors
    row = next(s for s in ev.study if s.metric == "throughput_qps" and s.mode == "streaming")
    assert row.base
    assert row.head
    assert row.head > 1.3 * row.base, (row.base, row.head)
    assert ev.gpus["CPU"].startup_s["base"] is not None


# ------------------------------------------------------------------ when things go wrong


def test_server_that_crashes_mid_round_is_a_failed_run(tmp_path: Path) -> None:
    r, out, m = verify(tmp_path, {}, {"crash_after": 9, "fail_rounds": [2]})
    assert r.returncode == 0, r.stderr
    assert m["complete"] is True  # the whole schedule ran; one run of it failed
    runs = by_id(m)
    bad = runs["r2-head-nonstream-c4"]
    assert bad["status"] == "failed"
    assert bad["failure"] == "crashed"
    assert "the server exited during the benchmark (exit code 70)" in bad["error"]
    assert "crashing on purpose" in bad["log_tail"]
    assert bad["log_tail"].rstrip().endswith("dry server: crashing on purpose at request 9")
    assert (out / bad["files"]["server"]).is_file()
    # what the client recorded up to the crash is kept, for diagnosis
    partial = json.loads((out / bad["files"]["speed"]).read_text())
    assert partial["summary"]["failed_requests"] > 0
    assert [x["status"] for x in m["runs"]].count("ok") == 3
    ev, _ = build(Inputs(bundles=[out]))
    failed = [f for f in ev.audit if f.code == "run-failed"]
    assert any("r2-head-nonstream-c4 failed" in f.message for f in failed)


def test_server_that_fails_to_start_with_policy_stop_skips_the_rest(tmp_path: Path) -> None:
    r, out, m = verify(tmp_path, {}, {"fail_start": True}, "--on-failure", "stop")
    assert r.returncode == 1
    assert m["complete"] is False
    assert m["stopped"].startswith("the schedule stopped after run r1-head-nonstream-c4 failed")
    statuses = [(x["id"], x["status"]) for x in m["runs"]]
    assert statuses == [
        ("r1-base-nonstream-c4", "ok"),
        ("r1-head-nonstream-c4", "failed"),
        ("r2-head-nonstream-c4", "skipped"),
        ("r2-base-nonstream-c4", "skipped"),
    ]
    bad = by_id(m)["r1-head-nonstream-c4"]
    assert bad["failure"] == "start-failed"
    assert "exited before its health check passed (exit code 3)" in bad["error"]
    assert "failing at start-up on purpose" in bad["log_tail"]
    assert all("on_failure = stop" in x["error"] for x in m["runs"] if x["status"] == "skipped")
    src = load(out)  # read, not refused
    assert len(src.runs) == 4


def test_client_that_exits_nonzero_is_a_failed_run(tmp_path: Path) -> None:
    r, _, m = verify(tmp_path, {"client_exit": 4, "fail_rounds": [2]}, {})
    assert r.returncode == 0, r.stderr
    bad = by_id(m)["r2-base-nonstream-c4"]
    assert bad["status"] == "failed"
    assert bad["failure"] == "client-failed"
    assert bad["error"] == "the warm-up client failed (exit code 4)"
    assert bad["log_tail"].rstrip().endswith("dry client: exiting with code 4 on purpose")
    assert sum(x["status"] == "ok" for x in m["runs"]) == 3


def test_hung_server_is_stopped_at_the_run_time_limit(tmp_path: Path) -> None:
    t0 = time.monotonic()
    r, _, m = verify(tmp_path, {}, {"hang_after": 7, "fail_rounds": [1]}, "--run-timeout", "4")
    assert time.monotonic() - t0 < 40
    assert r.returncode == 0, r.stderr
    bad = by_id(m)["r1-head-nonstream-c4"]
    assert bad["status"] == "failed"
    assert bad["failure"] == "run-time-limit"
    assert "did not finish within" in bad["error"]
    assert "hanging on purpose" in bad["log_tail"]
    assert bad["run_s"] < 15
    assert sum(x["status"] == "ok" for x in m["runs"]) == 3


def test_total_time_limit_skips_what_is_left(tmp_path: Path) -> None:
    # A request takes seconds (200 ms a character), so no run can end within the limit; the
    # limit of 10 s leaves room for the runner's set-up on a loaded machine (at 3 s, set-up
    # alone spent it in 4 of 6 tries under load and every run was skipped, none cut).
    slow = {"char_ms": 200}
    r, _, m = verify(tmp_path, slow, slow, "--total-timeout", "10")
    assert r.returncode == 1
    assert m["complete"] is False
    statuses = [x["status"] for x in m["runs"]]
    assert "skipped" in statuses
    assert any(x.get("failure") == "total-time-limit" for x in m["runs"])
    for x in m["runs"]:  # the budget ran out: not blamed on the server
        if x.get("failure") == "total-time-limit":
            assert "server may hang" not in x["error"]
    assert all(
        "total time limit (10s)" in x["error"] for x in m["runs"] if x["status"] == "skipped"
    )


def test_busy_gpu_fails_the_run_without_starting_it(tmp_path: Path) -> None:
    env = runner_env(
        PATH=f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}",
        RSI_GPU_BACKEND="nvidia-smi",
        FAKE_NVIDIA_SMI="busy",
    )
    r, out, m = verify(
        tmp_path, {}, {}, "--gpu", "h100", "--rounds", "1", "--gpu-idle-timeout", "1", env=env
    )
    assert r.returncode == 0, r.stderr
    assert m["gpu"] == "H100"
    for run in m["runs"]:
        assert run["status"] == "failed"
        assert run["failure"] == "gpu-busy"
        assert "the GPU stayed busy" in run["error"]
        assert "1 compute process(es) on the GPU (pids 1688)" in run["error"]
        assert "server" not in run.get("logs", {})
        server = json.loads((out / run["files"]["server"]).read_text())
        assert server["gpu_wait"]["idle"] is False
        assert server["gpu_wait"]["foreign"]["util_pct"] == 100
        assert server["startup_s"] is None


def test_idle_gpu_is_sampled_through_nvidia_smi(tmp_path: Path) -> None:
    env = runner_env(
        PATH=f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}",
        RSI_GPU_BACKEND="nvidia-smi",
        FAKE_NVIDIA_SMI="idle",
    )
    r, out, m = verify(
        tmp_path, {}, {}, "--gpu", "h100", "--rounds", "1", "--sample-interval", "0.5", env=env
    )
    assert r.returncode == 0, r.stderr
    fp = m["environment"]["base"]
    assert fp["gpu_backend"] == "nvidia-smi"
    assert fp["gpu_name"]
    assert fp["driver"]
    assert fp["cuda"]
    assert fp["gpu_count"] >= 1
    assert m["environment"]["head"] == fp
    for run in m["runs"]:
        assert run["status"] == "ok", run
        server = json.loads((out / run["files"]["server"]).read_text())
        assert server["peak_vram_mib"] == 0
        assert server["gpu_samples"][0] == {
            "t": server["gpu_samples"][0]["t"],
            "gpu": 0,
            "sm_clock_mhz": 405,
            "util_pct": 0,
            "mem_used_mib": 0,
            "power_w": 124.7,
            "throttle_reasons": ["gpu_idle"],
        }
        assert server["gpu_wait"]["idle"] is True
        assert server["sm_clock_mhz_min"] == 405


def test_checkout_failure_still_writes_an_incomplete_manifest(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo", {}, {})
    out = tmp_path / "bundle"
    r = subprocess.run(
        runner_cmd(tmp_path / "repo", "0" * 40, "1" * 40, out),
        cwd=ROOT,
        env=runner_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    m = json.loads((out / "manifest.json").read_text())
    assert m["complete"] is False
    assert m["error"].startswith("checkout failed")
    assert {x["status"] for x in m["runs"]} == {"skipped"}
    assert len(m["runs"]) == 4


def test_sigterm_mid_run_leaves_an_honest_incomplete_bundle(tmp_path: Path) -> None:
    b, h = make_repo(tmp_path / "repo", {"char_ms": 8}, {"char_ms": 8})
    out = tmp_path / "bundle"
    p = subprocess.Popen(
        runner_cmd(tmp_path / "repo", b, h, out, "--rounds", "3", "--requests", "12"),
        cwd=ROOT,
        env=runner_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        second = out / "logs" / "r1-head-nonstream-c4" / "client.log"
        deadline = time.monotonic() + 60
        while not second.exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        assert second.exists(), "the second run never started"
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + signal.SIGTERM, err
    m = json.loads((out / "manifest.json").read_text())
    assert m["complete"] is False
    assert m["interrupted"] == "SIGTERM"
    runs = m["runs"]
    assert len(runs) == 6
    assert runs[0]["status"] == "ok"
    assert runs[1]["status"] == "failed"
    assert runs[1]["failure"] == "interrupted"
    assert runs[1]["error"].startswith("interrupted by SIGTERM during")
    assert {x["status"] for x in runs[2:]} == {"skipped"}
    assert all("interrupted (SIGTERM)" in x["error"] for x in runs[2:])
    server = json.loads((out / runs[1]["files"]["server"]).read_text())
    assert server["server_exit"]["how"] in ("sigterm", "sigkill")
    assert load(out).manifest.complete is False


# ------------------------------------------------------------------ the command line


def test_usage_errors_write_no_bundle(tmp_path: Path) -> None:
    b, h = make_repo(tmp_path / "repo", {}, {})
    cases = [
        (["--task", "no-such-task"], "no task named 'no-such-task'"),
        (["--modes", "sideways"], "modes are streaming and non-streaming"),
        (["--rounds", "0"], "expected a positive integer"),
    ]
    for i, (extra, message) in enumerate(cases):
        out = tmp_path / f"bundle{i}"
        r = subprocess.run(
            runner_cmd(tmp_path / "repo", b, h, out, *extra),
            cwd=ROOT,
            env=runner_env(),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 2, (extra, r.stderr)
        assert message in r.stderr
        assert not (out / "manifest.json").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("")
    r = subprocess.run(
        runner_cmd(tmp_path / "repo", b, h, busy),
        cwd=ROOT,
        env=runner_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "is not empty" in r.stderr


def _stdlib_python() -> str:
    return "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def test_help_needs_only_the_standard_library() -> None:
    r = subprocess.run(
        [_stdlib_python(), "-S", "-E", "-m", "runners", "verify", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    for flag in ("--repo", "--base", "--head-repo", "--head", "--task", "--gpu", "--rounds"):
        assert flag in r.stdout
    for flag in ("--modes", "--out", "--verification-id", "--concurrencies", "--total-timeout"):
        assert flag in r.stdout


def test_every_runner_module_imports_with_the_standard_library_only() -> None:
    code = (
        "import sys, pkgutil, importlib, runners\n"
        "names = [m.name for m in pkgutil.walk_packages(runners.__path__, 'runners.')\n"
        "         if not m.name.startswith('runners.reference')]\n"
        "for n in names: importlib.import_module(n)\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)\n"
        "             - {'runners', '__main__'})\n"
        "print(len(names), bad)\n"
    )
    r = subprocess.run(
        [_stdlib_python(), "-S", "-E", "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    count, bad = r.stdout.split(" ", 1)
    assert int(count) >= 12
    assert bad.strip() == "[]"


# ------------------------------------------------------------------ recorded on a real H100


def test_bundles_recorded_on_a_real_h100_are_read() -> None:
    fix = ROOT / "tests" / "fixtures" / "nvidia-smi"
    ev, _ = build(Inputs(bundles=[fix / "h100-dry-vram.zip"]))
    assert [f for f in ev.audit if f.severity == "error"] == []
    h100 = ev.gpus["H100"]
    assert h100.fingerprint["base"]["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert h100.peak_vram_mib == {"base": 4715.0, "head": 4715.0}  # the 4 GiB the server took
    assert all(v is not None and v > 3 for v in h100.startup_s.values())  # PyTorch's start-up
    busy, _ = build(Inputs(bundles=[fix / "h100-dry-busy.zip"]))
    failed = [f for f in busy.audit if f.code == "run-failed" and f.severity == "warning"]
    assert len(failed) == 2
    assert all("the GPU stayed busy" in f.message for f in failed)


def _python310() -> str | None:
    """A Python 3.10 (no tomllib) if this machine has one: the oldest the runner supports."""
    cands = sorted(Path.home().glob(".pyenv/versions/3.10*/bin/python3.10"))
    cands += [Path("/usr/bin/python3.10"), Path("/usr/local/bin/python3.10")]
    for c in cands:
        if c.exists():
            r = subprocess.run([str(c), "--version"], capture_output=True, text=True, check=False)
            if r.returncode == 0 and r.stdout.startswith("Python 3.10"):
                return str(c)
    return None


def test_runs_on_python_3_10_without_tomllib(tmp_path: Path) -> None:
    py = _python310()
    if py is None:
        pytest.fail(
            "no Python 3.10 found (pyenv's 3.10.x or /usr/bin/python3.10): the "
            "runner's oldest supported Python must be tested; install one"
        )
    r = subprocess.run(
        [py, "-S", "-E", "-m", "runners", "tasks"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dry: dry-tts" in r.stdout
    b, h = make_repo(tmp_path / "repo", {}, {"speed": 2.0})
    out = tmp_path / "bundle"
    cmd = runner_cmd(tmp_path / "repo", b, h, out, "--rounds", "1", "--requests", "8")
    r = subprocess.run(
        [py, *cmd[1:]], cwd=ROOT, env=runner_env(), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["complete"] is True
    assert m["runner"]["python"].startswith("3.10")
    # the candidates run the machine's interpreter (--python), not the runner's
    assert m["environment"]["base"]["python"] == m["environment"]["head"]["python"]


def _task_with_prepare(tmp_path: Path, commands: list[str]) -> Path:
    text = (ROOT / "runners" / "tasks" / "dry.toml").read_text()
    text = text.replace("commands = []", f"commands = {json.dumps(commands)}", 1)
    p = tmp_path / "dry-prepare.toml"
    p.write_text(text)
    return p


def test_prepare_runs_in_each_worktree(tmp_path: Path) -> None:
    task = _task_with_prepare(
        tmp_path, ["{python} -c \"import os; print('prepared', '{side}', os.getcwd())\""]
    )
    r, out, m = verify(tmp_path, {}, {}, "--task", str(task), "--rounds", "1")
    assert r.returncode == 0, r.stderr
    assert m["prepare"]["base"]["status"] == "ok"
    assert m["prepare"]["head"]["status"] == "ok"
    log = (out / m["prepare"]["head"]["log"]).read_text()
    assert f"prepared head {tmp_path / 'work' / 'head'}" in log
    assert all(x["status"] == "ok" for x in m["runs"])


def test_failed_prepare_skips_every_run(tmp_path: Path) -> None:
    task = _task_with_prepare(tmp_path, ["{python} -c \"import sys; sys.exit('no deps')\""])
    r, _, m = verify(tmp_path, {}, {}, "--task", str(task))
    assert r.returncode == 1
    assert m["complete"] is False
    assert m["error"].startswith("prepare failed on base")
    assert m["prepare"]["base"]["status"] == "failed"
    assert "no deps" in m["prepare"]["base"]["log_tail"]
    assert {x["status"] for x in m["runs"]} == {"skipped"}


def test_wall_clock_sources(tmp_path: Path) -> None:
    from runners.verify import wall_clock

    f = tmp_path / "speed_results.json"
    cases: list[tuple[Any, tuple[float, str]]] = [
        ({"summary": {"wall_clock_s": 12.5}, "config": {}}, (12.5, "client-summary")),
        ({"summary": {}, "config": {"wall_clock_s": 9.0}}, (9.0, "client-config")),
        ({"duration": 7.25, "completed": 10}, (7.25, "client-duration")),
        (
            {"summary": {"completed_requests": 128, "throughput_qps": 5.12}},
            (25.0, "client-throughput"),
        ),
        ({"summary": {"completed_requests": 0, "throughput_qps": 0}}, (3.1416, "runner")),
        ([1, 2], (3.1416, "runner")),
    ]
    for doc, want in cases:
        f.write_text(json.dumps(doc))
        assert wall_clock(f, 3.14159) == want, doc
    f.write_text('{"duration": 1.0}\n{"duration": 2.5, "request_rate": Infinity}\n')
    assert wall_clock(f, 9.0) == (2.5, "client-duration")
    f.write_text("not json")
    assert wall_clock(f, 9.0) == (9.0, "runner")


def test_warm_up_runs_until_two_passes_agree(tmp_path: Path) -> None:
    """A server whose first 4 requests are 8× slower needs two 4-request warm-up passes
    (slow, fast) and a third that agrees with the second; the server record says so."""
    task = (ROOT / "runners" / "tasks" / "dry.toml").read_text()
    task = task.replace(
        "warmup_requests = 4\n",
        "warmup_requests = 4\nwarmup_max_passes = 6\nwarmup_steady_pct = 25.0\n",
    )
    (tmp_path / "task.toml").write_text(task)
    cold = {"cold_requests": 4, "cold_factor": 8.0, "char_ms": 2.0, "jitter": 0.0}
    r, out, m = verify(tmp_path, cold, cold, "--task", str(tmp_path / "task.toml"), "--rounds", "1")
    assert r.returncode == 0, r.stderr
    for run in m["runs"]:
        assert run["status"] == "ok", run
        warm = json.loads((out / run["files"]["server"]).read_text())["warmup"]
        assert warm["steady"] is True, warm
        assert warm["passes"] == 3, warm
        first, second, third = warm["rates"]
        assert second > 2 * first, warm
        assert abs(third / second - 1) <= 0.25, warm


def test_a_warm_up_that_never_steadies_is_extended_then_named(tmp_path: Path) -> None:
    """Rates that keep moving (a wide spread a request, 1% asked): the warm-up gets as many
    passes again as the task allows, then the audit names it with its rates."""
    task = (ROOT / "runners" / "tasks" / "dry.toml").read_text()
    task = task.replace(
        "warmup_requests = 4\n",
        "warmup_requests = 4\nwarmup_max_passes = 2\nwarmup_steady_pct = 0.001\n",
    )
    (tmp_path / "task.toml").write_text(task)
    noisy = {"jitter": 0.8, "char_ms": 1.0}
    r, out, m = verify(
        tmp_path, noisy, noisy, "--task", str(tmp_path / "task.toml"), "--rounds", "1"
    )
    assert r.returncode == 0, r.stderr
    warm = json.loads((out / m["runs"][0]["files"]["server"]).read_text())["warmup"]
    assert warm["steady"] is False, warm
    assert (warm["passes"], warm["extended"], warm["max_passes"]) == (4, 2, 2), warm
    ev, _ = build(Inputs(bundles=[out]))
    [base] = [f for f in ev.audit if f.code == "warm-up-unsteady" and f.message.startswith("base")]
    assert "even with 2 pass(es) past the task's `warmup_max_passes`" in base.message
    assert " → " in base.message  # its rates


def test_one_warm_up_pass_by_default(tmp_path: Path) -> None:
    """Without `warmup_max_passes` a task warms up once, as before, and says it did not
    look for a steady state."""
    cold = {"cold_requests": 8, "cold_factor": 8.0, "char_ms": 2.0, "jitter": 0.0}
    r, out, m = verify(tmp_path, cold, cold, "--rounds", "1")
    assert r.returncode == 0, r.stderr
    warm = json.loads((out / m["runs"][0]["files"]["server"]).read_text())["warmup"]
    assert warm["passes"] == 1
    assert warm["steady"] is None
    assert len(warm["rates"]) == 1


# ------------------------------------------------------------------ no network namespace


def _unshareless(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, hosts: tuple[str, ...]) -> Any:
    """A verifier on a machine that cannot make network namespaces (no CAP_SYS_ADMIN)."""
    from dataclasses import replace

    from runners import netns, sandbox
    from runners import task as tasks
    from runners.verify import Options, Verifier

    monkeypatch.setattr(netns, "unavailable", lambda: "unshare(CLONE_NEWNET): not permitted")
    task = replace(tasks.load("dry"), candidate=tasks.Candidate(hosts=hosts))
    opts = Options("r", "b", "r", "h", task, "cpu", 1, ["streaming"], tmp_path, "v")
    v = Verifier(opts)
    v.sandbox = sandbox.Sandbox("cgroup", {}, None, tmp_path)
    v.sandbox.hosts = hosts
    return v


def test_without_namespaces_candidates_have_the_host_network_and_the_record_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    v = _unshareless(monkeypatch, tmp_path, ())
    v._network_warnings()
    assert v.sandbox.describe()["network"] == {
        "mode": "host",
        "reason": "unshare(CLONE_NEWNET): not permitted",
        "hosts": [],
    }
    assert v.warnings == [
        "candidate code had the machine's network (unshare(CLONE_NEWNET): not permitted): it "
        "could reach the internet, the LAN and the other side's server"
    ]


def test_a_task_naming_hosts_is_refused_where_namespaces_cannot_be_made(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Never the whole network for a task that asked for some hosts."""
    from runners.verify import _Abort

    v = _unshareless(monkeypatch, tmp_path, ("huggingface.co:443",))
    with pytest.raises(_Abort, match=r"names the hosts .*huggingface.co:443.* every host"):
        v._network_warnings()


def test_a_runner_in_a_private_folder_gives_the_candidates_a_copy_of_its_scripts(
    tmp_path: Path,
) -> None:
    """A clone under root's 0700 home or in `mktemp -d`: the candidate users cannot read
    the runner's dry server there, so the runner copies its package into the work folder
    for `{rsi_root}`, says so in the manifest, and every run is measured."""
    private = Path(tempfile.mkdtemp(prefix="rsi-private-"))  # 0700, like mktemp -d
    try:
        shutil.copytree(
            ROOT / "runners", private / "runners", ignore=shutil.ignore_patterns("__pycache__")
        )
        b, h = make_repo(tmp_path / "repo", {"speed": 1.0}, {"speed": 1.0})
        out = tmp_path / "bundle"
        r = subprocess.run(
            runner_cmd(tmp_path / "repo", b, h, out),
            cwd=private,
            env=runner_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(private, ignore_errors=True)
    m = json.loads((out / "manifest.json").read_text())
    assert r.returncode == 0, r.stderr
    assert [run["status"] for run in m["runs"]] == ["ok"] * 4
    copied = m["isolation"]["rsi_root"]
    assert copied["why"] == f"{private} is not searchable by others"
    assert copied["copied_to"] == str(tmp_path / "work" / "rsi-root")


def test_the_sandbox_check_names_an_interpreter_the_candidates_cannot_run(
    tmp_path: Path,
) -> None:
    private = Path(tempfile.mkdtemp(prefix="rsi-private-"))
    try:
        python = private / "python3"
        python.symlink_to(CANDIDATE_PYTHON)
        users = candidates.users_arg()
        cmd = [sys.executable, "-m", "runners", "sandbox", *users, "--python", str(python)]
        bad = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
        ok = subprocess.run(
            [*cmd[:-1], CANDIDATE_PYTHON, "--workdir", str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        closed = subprocess.run(
            [*cmd[:-1], CANDIDATE_PYTHON, "--workdir", str(private / "work")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(private, ignore_errors=True)
    assert bad.returncode == 1
    base = candidates.USERS["base"]
    assert f"user {base} cannot run {python} ({private} is not searchable" in bad.stderr
    assert "give verify --python" in bad.stderr
    assert bad.stderr.rstrip().endswith("NOT READY: 2 thing(s) to fix first (above)")  # each side
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr.rstrip().endswith("READY: this machine can run candidates in the sandbox")
    assert json.loads(ok.stdout)  # stdout stays the sandbox's description, JSON only
    assert closed.returncode == 1
    assert f"cannot reach the work folder {private / 'work'}: {private} is not" in closed.stderr
