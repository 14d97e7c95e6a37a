"""A hostile head against the runner's isolation, on this machine (real runner, real
processes, real users): attacks that got past `--isolation cgroup` when they were tried.

Each test builds a repository whose base commit is benign and whose head commit
attacks, runs `python -m runners verify` as root with a task written for the attack
(the dry server and client, as in tests/test_forge.py), and checks that the attack did
not work. Attacks that were tried and failed are listed in docs/threat-model.md.
"""

from __future__ import annotations

import json
import pwd
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runners import sandbox
from tests.test_runner_verify import ROOT, git, leftovers, runner_cmd, runner_env

DRY = ROOT / "runners" / "dry"


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    return reachable_tmp


@pytest.fixture(autouse=True)
def _nothing_of_the_candidates_left(tmp_path: Path) -> Any:
    yield
    # (by command line, not by user: other verifications may run on this machine)
    assert leftovers(tmp_path) == []


def task_file(tmp_path: Path, body: str) -> Path:
    """A dry task: the server from the worktree, the client from the runner's tree."""
    path = tmp_path / "attack.toml"
    path.write_text(
        'name = "dry-attack"\n'
        'description = "dry, against a hostile head"\n'
        'model = "dry-tts"\n'
        "unconfirmed = []\n" + body + "\n[policy]\n"
        'on_failure = "continue"\nrun_timeout_s = 120\ntotal_timeout_s = 600\n'
        "gpu_idle_timeout_s = 60\n\n[metrics]\n"
        'primary = "throughput_qps"\nreport = ["throughput_qps", "latency_p95_s"]\n'
    )
    return path


SERVER = """
[server]
command = '''{python} {worktree}/server.py --port {port} --config {worktree}/rsi-dry.json
  --round {round} --side {side}'''
health = "http://127.0.0.1:{port}/health"
startup_timeout_s = 60
stop_grace_s = 5
%s

[benchmark]
concurrencies = [2]
requests = 8
warmup_requests = 0
timeout_s = 60
output = "{out}/speed_results.json"

[benchmark.modes.non-streaming]
command = '''{python} {rsi_root}/runners/dry/client.py --port {port} --requests {requests}
  --concurrency {concurrency} --output-dir {out}'''
"""

# The plain dry server, run from the worktree.
PLAIN_SERVER = f"""import runpy, sys
sys.argv[0] = {str(DRY / "server.py")!r}
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def attack_repo(path: Path, base: dict[str, str], head: dict[str, str]) -> tuple[str, str]:
    """Two commits: the base's files, then the head's on top (same names overwrite)."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    files = {"server.py": PLAIN_SERVER, "rsi-dry.json": "{}", **base}
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-qm", "base")
    for name, text in head.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-qm", "head: faster")
    return git(path, "rev-parse", "HEAD~1"), git(path, "rev-parse", "HEAD")


def verify(tmp_path: Path, task: Path, base: str, head: str) -> dict[str, Any]:
    out = tmp_path / "bundle"
    cmd = runner_cmd(tmp_path / "repo", base, head, out, "--task", str(task), "--rounds", "1")
    r = subprocess.run(cmd, cwd=ROOT, env=runner_env(), capture_output=True, text=True, timeout=180)
    assert (out / "manifest.json").is_file(), r.stderr
    m: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return m


def run_of(m: dict[str, Any], side: str) -> dict[str, Any]:
    runs = [r for r in m["runs"] if r["side"] == side]
    assert len(runs) == 1, m["runs"]
    return runs[0]


# ------------------------------------------------------------------ the accuracy step

# The trusted accuracy step of the TTS tasks (`after_server_stop = true`): the
# candidate's server is stopped, then the script starts its own transcriber on {port},
# waits until {port} answers, and scores the run's samples against it. Here the
# transcriber is the dry server with a noisy "ASR" (every sample gets some WER).
TRUSTED_ACCURACY = f"""import os, subprocess, sys, time, urllib.request
DRY = {str(DRY)!r}
args = sys.argv[1:]
port = args[args.index("--port") + 1]
env = dict(os.environ, RSI_DRY_WER_NOISE="0.5")
asr = subprocess.Popen([sys.executable, DRY + "/server.py", "--port", port], env=env)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
try:
    end = time.time() + 30
    while True:
        try:
            opener.open("http://127.0.0.1:%s/health" % port, timeout=2).read()
            break
        except OSError:
            if time.time() > end:
                sys.exit("the transcriber did not start")
            time.sleep(0.05)
    sys.exit(subprocess.call([sys.executable, DRY + "/client.py", "--accuracy", *args]))
finally:
    asr.kill()
"""

# The head's server listens with SO_REUSEPORT and forks a `setsid` daemon that listens
# on the same port: a perfect "transcriber". The runner stops the server, not the
# daemon (it is no descendant and in no process group of the server's), so the port is
# still the head's when the trusted transcriber tries to bind it.
SQUATTING_SERVER = f"""import importlib.util, os, socket, sys
spec = importlib.util.spec_from_file_location("dry_server", {str(DRY / "server.py")!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

class Shared(mod.Server):
    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()

mod.Server = Shared
port = int(sys.argv[sys.argv.index("--port") + 1])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        mod.Handler.state = mod.State(dict(mod.DEFAULTS), None)  # wer_noise 0
        Shared(("127.0.0.1", port), mod.Handler).serve_forever()
    os._exit(0)
sys.exit(mod.main(sys.argv[1:]))
"""

ACCURACY = """
[accuracy]
command = '''{python} -m benchmarks.acc --port {port} --requests {requests}
  --output-dir {out}'''
output = "{out}/wer_results.json"
after_server_stop = true
"""


def test_a_head_daemon_cannot_answer_the_trusted_accuracy_step(tmp_path: Path) -> None:
    task = task_file(tmp_path, SERVER % "env = {}" + ACCURACY)
    b, h = attack_repo(
        tmp_path / "repo",
        {"benchmarks/__init__.py": "", "benchmarks/acc.py": TRUSTED_ACCURACY},
        {"server.py": SQUATTING_SERVER},
    )
    m = verify(tmp_path, task, b, h)
    wer = {}
    for side in ("base", "head"):
        run = run_of(m, side)
        assert run["status"] == "ok", run
        doc = json.loads((tmp_path / "bundle" / run["files"]["wer"]).read_text())
        wer[side] = doc["summary"]["wer_mean"]
    assert wer["base"] > 0.1, wer  # the trusted transcriber is noisy
    # Both sides must be scored by the trusted transcriber; the head's daemon is perfect.
    assert wer["head"] > 0.1, wer


# ------------------------------------------------------------------ leftovers


def ipc_objects(uid: int) -> list[str]:
    """SysV shared memory, message queues and semaphores made or owned by `uid`."""
    found = []
    for kind in ("shm", "msg", "sem"):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        cols = lines[0].split()
        for line in lines[1:]:
            row = dict(zip(cols, line.split(), strict=False))
            if uid in (int(row["uid"]), int(row["cuid"])):
                found.append(f"{kind} {line.split()[:2]}")
    return found


LEAVE_BEHIND = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
# 8 MiB of memory that outlives every process (it could be most of the machine's):
# what the base's runs then have less of.
shm = libc.shmget(0, 8 << 20, 0o1000 | 0o600)
assert shm >= 0, ctypes.get_errno()
ctypes.memset(libc.shmat(shm, None, 0), 1, 8 << 20)
assert libc.msgget(0, 0o1000 | 0o600) >= 0
assert libc.semget(0, 1, 0o1000 | 0o600) >= 0
for path in ({lock!r}, {nested!r}):
    with open(path, "w") as f:
        f.write("left by the head")
"""


def test_a_head_leaves_nothing_in_shared_memory_or_world_writable_folders(
    tmp_path: Path,
) -> None:
    uid = pwd.getpwnam(sandbox.DEFAULT_USERS["head"]).pw_uid
    # A folder everyone may write in, inside /tmp but not the head's (as /tmp/.X11-unix).
    shared = Path("/tmp") / f".rsi-test-shared-{secrets.token_hex(4)}"
    shared.mkdir()
    shared.chmod(0o1777)
    lock = Path("/run/lock") / f"rsi-test-{secrets.token_hex(4)}"
    nested = shared / "left"
    try:
        task = task_file(
            tmp_path,
            "[prepare]\ncommands = ['{python} {worktree}/prepare.py']\n" + SERVER % "env = {}",
        )
        b, h = attack_repo(
            tmp_path / "repo",
            {"prepare.py": "pass\n"},
            {"prepare.py": LEAVE_BEHIND.format(lock=str(lock), nested=str(nested))},
        )
        m = verify(tmp_path, task, b, h)
        assert m["prepare"]["head"]["status"] == "ok", m["prepare"]
        assert ipc_objects(uid) == []
        assert not lock.exists()
        assert not nested.exists()
    finally:
        sandbox.remove_ipc(uid)
        lock.unlink(missing_ok=True)
        shutil.rmtree(shared, ignore_errors=True)


# ------------------------------------------------------------------ the client's environment

# A task that puts a source folder of the repository on the path — natural for a
# project laid out as python/<package> (SGLang is) — sets it in [server].env. The runner
# gives [server].env to the benchmark client too, rendered with the *head's* worktree
# on the head's runs; the client runs as root.
SITECUSTOMIZE = """import os
if os.getuid() == 0:
    with open({marker!r}, "a") as f:
        f.write("the head's code ran as root: %s\\n" % open("/proc/self/cmdline").read())
"""


def test_the_task_env_cannot_make_the_root_client_run_head_code(tmp_path: Path) -> None:
    marker = tmp_path / "head-code-ran-as-root"
    task = task_file(tmp_path, SERVER % "env = { PYTHONPATH = '{worktree}/python' }")
    b, h = attack_repo(
        tmp_path / "repo",
        {"python/pkg/__init__.py": ""},
        {"python/sitecustomize.py": SITECUSTOMIZE.format(marker=str(marker))},
    )
    m = verify(tmp_path, task, b, h)
    assert [r["status"] for r in m["runs"]] == ["ok", "ok"], m["runs"]
    assert not marker.exists(), marker.read_text()


# The same through the dynamic loader: LD_PRELOAD or LD_LIBRARY_PATH under {worktree}
# (a task whose sides build their own native extension). The loader reads them when
# runners/_enter.py's interpreter starts — as root, before it drops to the candidate.
PRELOAD_C = """
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void pwn(void) {
    if (getuid() != 0) return;
    FILE *f = fopen("%s", "a");
    if (!f) return;
    char cmd[512] = {0};
    FILE *c = fopen("/proc/self/cmdline", "r");
    size_t n = c ? fread(cmd, 1, sizeof cmd - 1, c) : 0;
    for (size_t i = 0; i < n; i++) if (!cmd[i]) cmd[i] = ' ';
    fprintf(f, "root loaded the head's library: %%s\\n", cmd);
    fclose(f);
    if (c) fclose(c);
}
"""


def test_the_task_env_cannot_make_root_load_a_head_library(tmp_path: Path) -> None:
    marker = tmp_path / "head-library-loaded-by-root"
    src = tmp_path / "pwn.c"
    src.write_text(PRELOAD_C % marker)
    lib = tmp_path / "libpwn.so"
    cc = shutil.which("cc")
    assert cc, "this test builds a shared library: install a C compiler (gcc)"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    task = task_file(tmp_path, SERVER % "env = { LD_PRELOAD = '{worktree}/libpwn.so' }")
    b, h = attack_repo(tmp_path / "repo", {}, {"README.md": "faster\n"})
    repo = tmp_path / "repo"
    shutil.copyfile(lib, repo / "libpwn.so")
    git(repo, "add", "libpwn.so")
    git(repo, "commit", "-qm", "head: a native extension")
    h = git(repo, "rev-parse", "HEAD")
    verify(tmp_path, task, b, h)
    assert not marker.exists(), marker.read_text()
