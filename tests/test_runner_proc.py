"""Child processes: a server and everything it spawned are stopped, stubborn ones killed."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from runners import proc

STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"],
    start_new_session=True)   # leaves the process group: found through /proc instead
print("child", child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_stubborn_server_and_escaped_child_are_killed(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    p = proc.Process([sys.executable, "-c", STUBBORN], tmp_path, os.environ, log, header="$ x")
    deadline = time.monotonic() + 10
    while "child" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(log.read_text().split("child", 1)[1].split()[0])
    assert _alive(child)
    t0 = time.monotonic()
    rc = p.stop(grace=0.5)
    assert time.monotonic() - t0 < 5
    assert rc == -9
    assert p.stopped_how == "sigkill"
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
    assert log.read_text().startswith("$ x\n")


def test_polite_server_stops_on_sigterm(tmp_path: Path) -> None:
    p = proc.Process(
        [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, os.environ, tmp_path / "l"
    )
    time.sleep(0.2)
    assert p.stop(grace=5) == -15
    assert p.stopped_how == "sigterm"
    assert proc.describe_exit(-15) == "killed by SIGTERM"
    assert proc.describe_exit(3) == "exit code 3"


def test_run_times_out_and_reports_it(tmp_path: Path) -> None:
    fin = proc.run(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        tmp_path,
        os.environ,
        tmp_path / "l",
        timeout=0.3,
    )
    assert fin.timed_out
    assert fin.returncode is None
    assert fin.wall_s < 10
    ok = proc.run([sys.executable, "-c", "print('hi')"], tmp_path, os.environ, tmp_path / "m", 30)
    assert (ok.returncode, ok.timed_out) == (0, False)
    assert (tmp_path / "m").read_text() == "hi\n"


def test_candidates_inherit_an_allowlist_not_a_denylist() -> None:
    """Only named variables reach candidate code, and none that looks like a credential
    even under an allowed prefix; everything else is withheld, by name."""
    env = {
        "PATH": "/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "CUDA_VISIBLE_DEVICES": "0",
        "NCCL_DEBUG": "WARN",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "HF_HOME": "/cache/huggingface",
        "NVIDIA_API_KEY": "x",
        "DATABASE_URL": "postgres://u:pw@db/x",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "GIT_CONFIG_PARAMETERS": "'http.extraheader'='x'",
        "RSI_JITCONFIG": "x",
        "HOME": "/root",
        "SOMETHING_ELSE": "1",
        "SGL_X": "1",
    }
    kept, withheld = proc.candidate_env(env)
    assert sorted(kept) == [
        "CUDA_VISIBLE_DEVICES",
        "HF_HOME",
        "HOME",
        "LANG",
        "LC_ALL",
        "NCCL_DEBUG",
        "NVIDIA_VISIBLE_DEVICES",
        "PATH",
    ]
    assert withheld == sorted(set(env) - set(kept))
    assert "SGL_X" in proc.candidate_env(env, ("SGL_X",))[0]
    assert proc.scrub_env(env)[1] == sorted(
        [
            "NVIDIA_API_KEY",
            "DATABASE_URL",
            "SSH_AUTH_SOCK",
            "GIT_CONFIG_PARAMETERS",
            "RSI_JITCONFIG",
        ]
    )
