"""The forge proof on a real GPU: an A/A pair whose head tries to win anyway.

Base and head serve the same eager decoder; the head's server first double-forks a
`setsid` daemon that runs matmuls on the GPU to slow whatever is measured after it (the
base's rounds), tries to rewrite the base's worktree, the client's output and the bundle,
and outlives the server. With isolation the daemon dies with its run's cgroup, nothing
it tried to write changed, and the A/A pair stays "no change".

    python3 runners/reference/forge.py OUT_DIR [GPU] [-- extra verify flags]

Prints one JSON line: the verify exit code, processes of the candidate users left after
`verify` returned, whether the base's worktree was changed, and the digest check.
Standard library only (the GPU image has no rsi-bot stack); the evidence is built from
OUT_DIR/bundle afterwards with `rsi-bot evidence`.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runners import sandbox  # noqa: E402
from runners.bundle import check  # noqa: E402

TASK = """
name = "gpu-reference-forge"
description = "gpu-reference A/A whose head forks a daemon to slow the base"
model = "reference-decoder-8x2048"
unconfirmed = []

[prepare]
commands = []

[server]
command = "{python} {worktree}/server.py --port {port} --variant-file {worktree}/variant.txt"
health = "http://127.0.0.1:{port}/health"
startup_timeout_s = 300
env = { PYTHONPATH = "{rsi_root}", HF_HUB_OFFLINE = "1" }

[benchmark]
concurrencies = [16]
requests = 128
warmup_requests = 16
timeout_s = 600
output = "{out}/speed_results.json"

[benchmark.modes.streaming]
command = '''{python} -m runners.reference.client --port {port} --requests {requests}
  --concurrency {concurrency} --stream --output-dir {out}'''

[policy]
on_failure = "continue"
run_timeout_s = 600
total_timeout_s = 3600
gpu_idle_timeout_s = 120

[metrics]
primary = "throughput_qps"
report = ["throughput_qps", "latency_p95_s", "audio_ttfp_p95_s", "rtf_mean"]
"""

SHIM = """import runpy, sys
sys.argv[0] = {path!r}
runpy.run_path({path!r}, run_name="__main__")
"""

DAEMON = """import glob, os, time
def attack():
    here = os.getcwd()
    work = os.path.dirname(here)
    targets = [os.path.join(work, "base", "variant.txt")]
    try:
        import torch
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    except Exception:
        a = None
    end = time.time() + 3600
    while time.time() < end:
        found = targets + glob.glob(os.path.join(work, "..", "bundle", "**", "*.json"),
                                    recursive=True)
        found += glob.glob(os.path.join(work, "scratch", "*", "*", "*.json"))
        for t in found:
            try:
                with open(t + ".forged", "w") as f:
                    f.write("forged")
                os.replace(t + ".forged", t)
            except OSError:
                pass
        if a is not None:
            for _ in range(20):
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
        else:
            time.sleep(0.1)

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        attack()
        os._exit(0)
    os._exit(0)
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=rsi", "-c", "user.email=rsi@localhost", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def main(argv: list[str]) -> int:
    out = Path(argv[0]).resolve()
    gpu = argv[1] if len(argv) > 1 and not argv[1].startswith("-") else "h200"
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    work = Path(tempfile.mkdtemp(prefix="rsi-forge-"))
    work.chmod(0o711)
    repo = work / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    server = str(ROOT / "runners" / "reference" / "server.py")
    (repo / "variant.txt").write_text("eager\n")
    (repo / "server.py").write_text(SHIM.format(path=server))
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    (repo / "server.py").write_text(DAEMON + SHIM.format(path=server))
    git(repo, "commit", "-qam", "head: same decoder, plus a daemon")
    base, head = git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")
    task = work / "forge.toml"
    task.write_text(TASK)
    cmd = [sys.executable, "-m", "runners", "verify", "--repo", str(repo), "--base", base]
    cmd += ["--head", head, "--task", str(task), "--gpu", gpu, "--rounds", "3"]
    cmd += ["--modes", "streaming", "--out", str(out / "bundle"), "--workdir", str(work / "w")]
    cmd += ["--verification-id", "v-forge", "--repo-name", "openrsi-bot/gpu-reference-forge"]
    cmd += ["--keep-workdir", *extra]
    r = subprocess.run(cmd, cwd=ROOT, check=False)
    left = []
    for name in sandbox.DEFAULT_USERS.values():
        try:
            uid = pwd.getpwnam(name).pw_uid
        except KeyError:
            continue
        left += [f"{name} {pid} {c}" for pid, c in sandbox.processes_of(uid)]
    mine = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).find(str(work)) >= 0]
    report = {
        "verify_exit": r.returncode,
        "candidate_processes_left": left,
        "processes_naming_the_workdir_left": len(mine),
        "base_variant": (work / "w" / "base" / "variant.txt").read_text().strip()
        if (work / "w" / "base" / "variant.txt").exists()
        else None,
        "digest_problems": check(out / "bundle"),
    }
    for p in mine:  # an unisolated run's daemon is still there: end it
        with contextlib.suppress(OSError):
            os.kill(int(p), 9)
    print(json.dumps(report))
    return 0


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
