"""A hostile head against the runner's isolation, on this machine (real runner, real
processes, real users): attacks that got past `--isolation cgroup` when they were tried.

Each test builds a repository whose base commit is benign and whose head commit
attacks, runs `python -m runners verify` as root with a task written for the attack
(the dry server and client, as in tests/test_forge.py), and checks that the attack did
not work. Attacks that were tried and failed are listed in docs/threat-model.md.
"""

from __future__ import annotations

import atexit
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import threading
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from runners import proc, sandbox
from tests import candidates
from tests.reachable import dry_scripts
from tests.test_runner_verify import ROOT, git, leftovers, runner_cmd, runner_env

DRY = dry_scripts()  # candidate code runs them by path: a copy they can read


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


def verify(
    tmp_path: Path,
    task: Path,
    base: str,
    head: str,
    *extra: str,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    out = tmp_path / "bundle"
    cmd = runner_cmd(tmp_path / "repo", base, head, out, "--task", str(task), "--rounds", "1")
    r = subprocess.run(
        [*cmd, *extra],
        cwd=ROOT,
        env=runner_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=180,
    )
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
    uid = pwd.getpwnam(candidates.USERS["head"]).pw_uid
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


# ------------------------------------------------------------------ secrets and the network

# What the runner's own environment may hold on a real machine (a JIT runner's config, a
# deploy's database and error reporter, an agent socket, an auth header for git, cloud
# keys); none of it may reach candidate code. `INNOCENT_LOOKING` has no credential-like
# name: only an allowlist withholds it.
PLANTED = {
    "DATABASE_URL": "postgres://u:pw-planted@db.example:5432/rsi",
    "SENTRY_DSN": "https://planted-dsn@o1.ingest.sentry.io/1",
    "RSI_JITCONFIG": "planted-jit-config",
    "ACTIONS_RUNNER_INPUT_JITCONFIG": "planted-arc-jit-config",
    "SSH_AUTH_SOCK": "/tmp/planted-agent.sock",
    "GIT_CONFIG_PARAMETERS": "'http.extraheader'='AUTHORIZATION: basic planted-auth'",
    "FOO_KEY": "planted-foo-key",
    "BAR_AUTH": "planted-bar-auth",
    "AWS_ACCESS_KEY_ID": "AKIAPLANTED",
    "AWS_SECRET_ACCESS_KEY": "planted-aws-secret",
    "NVIDIA_API_KEY": "planted-ngc-key",
    "HTTPS_PROXY": "http://u:planted-proxy-pw@proxy.example:3128",
    "INNOCENT_LOOKING": "planted-innocent",
}

# A hostile head's prepare step and server: each prints its environment and tries to
# reach the runner's machine over TCP (its non-loopback address and its loopback), an
# abstract unix socket (scoped by network namespace) and a unix socket file under /run,
# where the host's services listen (not cut off by a network namespace).
SNOOP = """import json, os, socket, sys
targets = json.loads({targets!r})
print("ENV-DUMP " + json.dumps(dict(os.environ)), flush=True)
for name, addr in targets.items():
    try:
        if name.startswith("unix"):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(3)
            s.connect("\\0" + addr if name == "unix" else addr)
        else:
            host, port = addr.rsplit(":", 1)
            s = socket.create_connection((host, int(port)), timeout=3)
        print(f"NET {{name}} REACHED", flush=True)
        s.close()
    except OSError as exc:
        print(f"NET {{name}} BLOCKED {{exc}}", flush=True)
"""

SNOOPING_SERVER = """import runpy, sys
exec(open(__file__.replace("server.py", "snoop.py")).read())
sys.argv[0] = {dry!r}
runpy.run_path(sys.argv[0], run_name="__main__")
"""


PROBE_ADDRESS = "192.0.2.77"  # a documentation address


def primary_address() -> str:
    """A non-loopback address of this machine for a candidate to try to reach: the one on
    its default route (no packet is sent), else one added for the test to the host's
    loopback link: an address of the host, not of a candidate's own namespace, so the
    probe runs on a machine without a network too (the runner tests are root)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))
            addr: str = s.getsockname()[0]
        except OSError:
            addr = "127.0.0.1"
    if not addr.startswith("127."):
        return addr
    cmd = ["ip", "addr", "add", f"{PROBE_ADDRESS}/32", "dev", "lo"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0 or "exists" in done.stderr, (
        f"no non-loopback address to probe, and `{' '.join(cmd)}` failed: {done.stderr}"
    )
    atexit.register(subprocess.run, [*cmd[:2], "del", *cmd[3:]], check=False)
    return PROBE_ADDRESS


class Listeners:
    """TCP listeners on the host's address and loopback, an abstract unix socket and a
    unix socket file anyone may connect to under /run (as a database's is): whoever
    connects is recorded."""

    def __init__(self) -> None:
        self.reached: list[str] = []
        self.socks: dict[str, socket.socket] = {}
        token = secrets.token_hex(6)
        self.folder = Path("/run") / f"rsi-test-{token}"
        self.folder.mkdir(mode=0o755)
        path = str(self.folder / "service.sock")
        for name, fam, addr in (
            ("lan", socket.AF_INET, (primary_address(), 0)),
            ("loopback", socket.AF_INET, ("127.0.0.1", 0)),
            ("unix", socket.AF_UNIX, f"\0rsi-test-{token}"),
            ("unix-file", socket.AF_UNIX, path),
        ):
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.bind(addr)
            s.listen(16)
            self.socks[name] = s
            threading.Thread(target=self._accept, args=(name, s), daemon=True).start()
        os.chmod(path, 0o777)
        self.addresses = {"unix": f"rsi-test-{token}", "unix-file": path}
        for name, s in self.socks.items():
            if not name.startswith("unix"):
                host, port = s.getsockname()
                self.addresses[name] = f"{host}:{port}"

    def targets(self) -> dict[str, str]:
        return dict(self.addresses)

    def _accept(self, name: str, s: socket.socket) -> None:
        with suppress(OSError):
            while True:
                c, _ = s.accept()
                self.reached.append(name)
                c.close()

    def close(self) -> None:
        for s in self.socks.values():
            s.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def dumps(log: str) -> list[dict[str, str]]:
    return [
        json.loads(x[len("ENV-DUMP ") :]) for x in log.splitlines() if x.startswith("ENV-DUMP ")
    ]


def assert_clean(log: str, where: str) -> None:
    """One environment dump and blocked probes in `log`: allowlisted names only, no
    planted secret anywhere, no connection out."""
    envs = dumps(log)
    assert len(envs) == 1, (where, log[-2000:])
    env = envs[0]
    assert not set(PLANTED) & set(env), (where, sorted(set(PLANTED) & set(env)))
    text = json.dumps(env)
    assert not [v for v in PLANTED.values() if v in text], (where, env)
    assert [n for n in env if not proc.candidate_may_inherit(n) and n not in ALLOWED_SET] == [], (
        where,
        sorted(env),
    )
    assert "REACHED" not in log, (where, log[-2000:])
    assert log.count("BLOCKED") == 4, (where, log[-2000:])


# What the runner sets for a candidate besides what it may inherit (runners/sandbox.py,
# runners/verify.py): its own home and caches, its worktree on the path, the GPU order.
ALLOWED_SET = {
    "HOME",
    "TMPDIR",
    "XDG_CACHE_HOME",
    "USER",
    "LOGNAME",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_KEY_0",
    "GIT_CONFIG_VALUE_0",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "CUDA_DEVICE_ORDER",
}


@pytest.mark.parametrize("design", ["sequential", "alternate"])
def test_no_secret_and_no_network_reach_a_candidate(tmp_path: Path, design: str) -> None:
    net = Listeners()
    try:
        task = task_file(
            tmp_path,
            "[prepare]\ncommands = ['{python} {worktree}/snoop.py']\n" + SERVER % "env = {}",
        )
        snoop = SNOOP.format(targets=json.dumps(net.targets()))
        b, h = attack_repo(
            tmp_path / "repo",
            {"snoop.py": "pass\n"},
            {"snoop.py": snoop, "server.py": SNOOPING_SERVER.format(dry=str(DRY / "server.py"))},
        )
        m = verify(tmp_path, task, b, h, "--design", design, env=PLANTED)
    finally:
        net.close()
    out = tmp_path / "bundle"
    assert m["prepare"]["head"]["status"] == "ok", m["prepare"]
    assert_clean((out / m["prepare"]["head"]["log"]).read_text(), "prepare")
    if design == "alternate":
        assert m["design"]["name"] == "alternate", m["design"]
        server_log = m["design"]["servers"]["head"][0]["log"]
    else:
        server_log = run_of(m, "head")["logs"]["server"]
    assert run_of(m, "head")["status"] == "ok", run_of(m, "head")
    assert_clean((out / server_log).read_text(), "server")
    assert net.reached == []
    # names only, never values
    withheld = m["runner"]["env_withheld"]
    assert set(PLANTED) <= set(withheld)
    assert not [v for v in PLANTED.values() if v in json.dumps(m)]


# A head's prepare step with hosts named by its task: through the proxy it is told of,
# the named host answers and another does not; directly, neither does.
THROUGH_PROXY = """import json, os, socket
targets = json.loads({targets!r})
proxy = os.environ["RSI_CANDIDATE_PROXY"].rsplit(":", 1)
for name in ("lan", "loopback"):
    s = socket.create_connection(("127.0.0.1", int(proxy[1])), timeout=5)
    s.sendall(f"CONNECT {{targets[name]}} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".encode())
    print(f"PROXY {{name}} {{s.recv(100).split(b' ')[1].decode()}}", flush=True)
    s.close()
try:
    host, port = targets["lan"].rsplit(":", 1)
    socket.create_connection((host, int(port)), timeout=3).close()
    print("DIRECT REACHED", flush=True)
except OSError as exc:
    print(f"DIRECT BLOCKED {{exc}}", flush=True)
"""


def test_a_task_s_named_hosts_are_all_a_candidate_reaches(tmp_path: Path) -> None:
    net = Listeners()
    try:
        lan = net.targets()["lan"]
        task = task_file(
            tmp_path,
            "[prepare]\ncommands = ['{python} {worktree}/snoop.py']\n"
            + SERVER % "env = {}"
            + f'\n[candidate]\nhosts = ["{lan}"]\n',
        )
        b, h = attack_repo(
            tmp_path / "repo",
            {"snoop.py": "pass\n"},
            {"snoop.py": THROUGH_PROXY.format(targets=json.dumps(net.targets()))},
        )
        m = verify(tmp_path, task, b, h)
    finally:
        net.close()
    log = (tmp_path / "bundle" / m["prepare"]["head"]["log"]).read_text()
    assert "PROXY lan 200" in log, log
    assert "PROXY loopback 403" in log, log
    assert "DIRECT BLOCKED" in log, log
    assert net.reached == ["lan"]
    # the evidence shows the hosts and what was asked for
    network = m["isolation"]["network"]
    assert (network["mode"], network["hosts"], network["refused"]) == ("namespace", [lan], 1)
    asked = {(r["target"], r["allowed"]) for r in network["requests"]}
    assert asked == {(lan, True), (net.targets()["loopback"], False)}
    server = json.loads((tmp_path / "bundle" / run_of(m, "head")["files"]["server"]).read_text())
    assert server["network"] == f"its own namespace, loopback only; through a proxy: {lan}"
