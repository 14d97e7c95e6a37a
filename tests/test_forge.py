"""A head that forges its evidence, against the real runner (dry task, real processes).

The head's server starts a double-forked `setsid` daemon that outlives the server, burns
CPU while the base is measured, rewrites the base's configuration to slow it down and
tries to rewrite the records and the manifest; the head also ships its own benchmark
client, which writes whatever figures it likes. Before isolation this came out as
*improved* with a clean audit. Now: the daemon is dead when `verify` returns, the base
and the records are untouched, the forged client never runs, and the evidence is not
*improved*; without isolation (`--isolation none`) the evidence is invalid, by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evidence.build import Inputs
from runners import sandbox
from tests import candidates
from tests.reachable import dry_scripts
from tests.test_runner_verify import (
    CANDIDATE_PYTHON,
    ROOT,
    build,
    git,
    leftovers,
    make_repo,
    runner_cmd,
    runner_env,
)

TASK = """
name = "dry-forge"
description = "dry, with the server and the client taken from the repository under test"
model = "dry-tts"
unconfirmed = []

[prepare]
commands = []

[server]
command = '''{python} {worktree}/server.py --port {port} --config {worktree}/rsi-dry.json
  --round {round} --side {side}'''
health = "http://127.0.0.1:{port}/health"
startup_timeout_s = 60
stop_grace_s = 5
env = {}

[benchmark]
concurrencies = [4]
requests = 24
warmup_requests = 4
timeout_s = 120
output = "{out}/speed_results.json"
scripts = ["benchmarks"]

[benchmark.modes.non-streaming]
command = '''{python} -m benchmarks.client --port {port} --requests {requests}
  --concurrency {concurrency} --round {round} --output-dir {out}'''

[policy]
on_failure = "continue"
run_timeout_s = 300
total_timeout_s = 1800
gpu_idle_timeout_s = 60

[metrics]
primary = "throughput_qps"
report = ["throughput_qps", "latency_p95_s"]
"""

SHIM = """import runpy, sys
sys.argv[0] = {path!r}
runpy.run_path({path!r}, run_name="__main__")
"""

# The head's server: fork a daemon that outlives it, then serve as the base does.
FORGED_SERVER = (
    """import glob, json, os, sys, time
MARKER = {marker!r}

def attack():
    here = os.getcwd()              # the head's worktree
    work = os.path.dirname(here)    # the runner's work folder
    BUNDLE = os.path.join(work, "..", "bundle", "**", "*.json")
    hits = []
    end = time.time() + 300
    while time.time() < end:
        for target, text in (
            (os.path.join(work, "base", "rsi-dry.json"), '{{"speed": 0.25}}'),
            *[(p, "{{}}") for p in glob.glob(BUNDLE, recursive=True)],
            *[(p, "{{}}") for p in glob.glob(os.path.join(work, "scratch", "*", "*", "*.json"))],
        ):
            try:
                with open(target + ".forged", "w") as f:
                    f.write(text)
                os.replace(target + ".forged", target)
                hits.append(target)
            except OSError:
                pass
        t = time.time()
        while time.time() - t < 0.2:  # slow whatever runs next
            pass
        time.sleep(0.05)

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        attack()
        os._exit(0)
    os._exit(0)
"""
    + SHIM
)

FORGED_CLIENT = (
    """import json, os, sys
open({marker!r}, "w").write("the head's own client ran")
"""
    + SHIM
)


def forge_repo(path: Path, marker: Path) -> tuple[str, str]:
    dry = dry_scripts()
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "benchmarks").mkdir()
    (path / "benchmarks" / "__init__.py").write_text("")
    (path / "benchmarks" / "client.py").write_text(SHIM.format(path=str(dry / "client.py")))
    (path / "server.py").write_text(SHIM.format(path=str(dry / "server.py")))
    (path / "rsi-dry.json").write_text("{}")
    git(path, "add", ".")
    git(path, "commit", "-qm", "base")
    (path / "server.py").write_text(
        FORGED_SERVER.format(marker=str(marker), path=str(dry / "server.py"))
    )
    (path / "benchmarks" / "client.py").write_text(
        FORGED_CLIENT.format(marker=str(marker), path=str(dry / "client.py"))
    )
    git(path, "commit", "-qam", "head: faster (forged)")
    return git(path, "rev-parse", "HEAD~1"), git(path, "rev-parse", "HEAD")


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    return reachable_tmp


def run_forge(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    task = tmp_path / "dry-forge.toml"
    task.write_text(TASK)
    marker = tmp_path / "forged-client-ran"
    b, h = forge_repo(tmp_path / "repo", marker)
    out = tmp_path / "bundle"
    cmd = runner_cmd(tmp_path / "repo", b, h, out, "--task", str(task), "--rounds", "3")
    r = subprocess.run(
        [*cmd, "--keep-workdir", *extra],
        cwd=ROOT,
        env=runner_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (out / "manifest.json").is_file(), r.stderr
    return r, out


def candidate_processes() -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for name in candidates.USERS.values():
        import pwd

        found += list(sandbox.processes_of(pwd.getpwnam(name).pw_uid))
    return found


def test_a_forging_head_cannot_change_the_verdict(tmp_path: Path) -> None:
    r, out = run_forge(tmp_path)
    # the daemon died with its run: nothing of the candidate is left when verify returns
    assert leftovers(tmp_path) == []
    assert candidate_processes() == []
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["isolation"]["mode"] == "cgroup"
    assert m["isolation"]["users"] == candidates.USERS
    assert all(run["status"] == "ok" for run in m["runs"]), m["runs"]
    # the base and the records are as the runner left them
    assert (tmp_path / "work" / "base" / "rsi-dry.json").read_text() == "{}"
    check = subprocess.run(
        [sys.executable, "-m", "runners", "check-bundle", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    # the client came from the trusted tree (the base), never from the head
    assert not (tmp_path / "forged-client-ran").exists()
    tree = m["benchmark_tree"]
    assert tree["source"] == "base"
    assert tree["sha"] == m["base"]["sha"]
    assert tree["changed_by_head"] == ["benchmarks/client.py"]
    ev, _ = build(Inputs(bundles=[out]))
    assert ev.verdict != "improved", [(s.metric, s.delta_pct) for s in ev.study]
    assert "benchmark-changed" in {f.code for f in ev.audit}
    assert not [f for f in ev.audit if f.severity == "error"], ev.audit


def test_without_isolation_the_forge_works_which_is_why_the_evidence_is_invalid(
    tmp_path: Path,
) -> None:
    # What the runner did before isolation, and still does when told `--isolation none`:
    # the daemon slows the base and rewrites the bundle (the client, though, still comes
    # from the trusted tree).
    try:
        run_forge(tmp_path, "--isolation", "none")
        assert not (tmp_path / "forged-client-ran").exists()
        assert (tmp_path / "work" / "base" / "rsi-dry.json").read_text() == '{"speed": 0.25}'
    finally:  # the unisolated daemon is beyond the runner's reach: end it here
        for line in leftovers(tmp_path):
            os.kill(int(line.split(":")[0]), 9)
        deadline = time.monotonic() + 5
        while leftovers(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)
    # So a bundle made without isolation is never evidence, however clean it looks.
    plain = tmp_path / "plain"
    plain.mkdir()
    b, h = make_repo(plain / "repo", {}, {"speed": 2.0})
    cmd = runner_cmd(plain / "repo", b, h, plain / "bundle", "--isolation", "none")
    r = subprocess.run(cmd, cwd=ROOT, env=runner_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = json.loads((plain / "bundle" / "manifest.json").read_text())
    assert m["isolation"]["mode"] == "none"
    assert any("without isolation" in w for w in m["warnings"])
    ev, _ = build(Inputs(bundles=[plain / "bundle"]))
    assert ev.verdict == "invalid"
    assert "unisolated" in {f.code for f in ev.audit if f.severity == "error"}


def test_a_changed_file_is_found_by_its_digest(tmp_path: Path) -> None:
    r, out = run_forge(tmp_path)
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    speed = out / m["runs"][0]["files"]["speed"]
    doc = json.loads(speed.read_text())
    doc["summary"]["throughput_qps"] = 1e6
    speed.write_text(json.dumps(doc))
    check = subprocess.run(
        [sys.executable, "-m", "runners", "check-bundle", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 1
    assert "changed after the manifest was written" in check.stderr
    ev, _ = build(Inputs(bundles=[out]))
    assert ev.verdict == "invalid"
    assert "digest-mismatch" in {f.code for f in ev.audit}


def test_a_process_that_escaped_its_cgroup_is_killed_and_named(tmp_path: Path) -> None:
    sb = sandbox.Sandbox.open("cgroup", tmp_path / "sb", candidates.USERS)
    try:
        assert sb.parent is not None
        outside = sandbox.Group(sb.parent / "elsewhere")  # not the run's group
        run = sb.group("run")
        sleep = [CANDIDATE_PYTHON, "-c", "import time; time.sleep(60)"]
        cmd, env = sb.command("head", outside, sleep, {"PATH": "/usr/bin:/bin"})
        escaped = subprocess.Popen(cmd, env=env, start_new_session=True)
        cmd, env = sb.command("head", run, sleep, {"PATH": "/usr/bin:/bin"})
        inside = subprocess.Popen(cmd, env=env, start_new_session=True)
        deadline = time.monotonic() + 10
        while len(candidate_processes()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        survivors = sb.end("head", run)
        assert [s["pid"] for s in survivors] == [escaped.pid]
        assert escaped.wait(timeout=10) == -9
        assert inside.wait(timeout=10) == -9
        assert candidate_processes() == []
        outside.kill()
    finally:
        sb.close()


def test_the_base_may_pin_the_benchmark_scripts_the_head_cannot(tmp_path: Path) -> None:
    """`.github/rsi.yml`'s `benchmark_ref`, read from the base commit, picks the tree the
    client runs from; the same key in the head's copy changes nothing."""
    dry = dry_scripts()
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "benchmarks").mkdir()
    (repo / "benchmarks" / "__init__.py").write_text("")
    pinned = tmp_path / "pinned-client-ran"
    (repo / "benchmarks" / "client.py").write_text(
        f"open({str(pinned)!r}, 'w').write('x')\n" + SHIM.format(path=str(dry / "client.py"))
    )
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "benchmark scripts v1")
    git(repo, "tag", "bench-v1")
    (repo / "benchmarks" / "client.py").write_text(SHIM.format(path=str(dry / "client.py")))
    (repo / "server.py").write_text(SHIM.format(path=str(dry / "server.py")))
    (repo / "rsi-dry.json").write_text("{}")
    (repo / ".github").mkdir()
    (repo / ".github" / "rsi.yml").write_text("rounds: 3\nbenchmark_ref: bench-v1  # pinned\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    (repo / ".github" / "rsi.yml").write_text("benchmark_ref: HEAD\n")
    git(repo, "commit", "-qam", "head: tries to pick its own scripts")
    base, head = git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")
    task = tmp_path / "dry-forge.toml"
    task.write_text(TASK)
    out = tmp_path / "bundle"
    cmd = runner_cmd(repo, base, head, out, "--task", str(task), "--rounds", "1")
    r = subprocess.run(cmd, cwd=ROOT, env=runner_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tree = json.loads((out / "manifest.json").read_text())["benchmark_tree"]
    assert tree["source"] == "pinned"
    assert tree["ref"] == "bench-v1"
    assert tree["sha"] == git(repo, "rev-parse", "bench-v1")
    assert pinned.exists()
