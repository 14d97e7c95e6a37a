"""Candidate code out of the measurement's reach: a user per side, a cgroup per run.

The head commit comes from an automated search, which optimises whatever we measure:
its code must not be able to touch the other side, the benchmark client or the bundle.
With `--isolation cgroup` (the default) each side's prepare steps and server run as
that side's own unprivileged user (`rsi-base`, `rsi-head`), each command in a cgroup v2
of its own. When a run ends the runner kills the whole cgroup — a double-forked `setsid`
daemon is still in it — and then checks that no process of that user is left anywhere;
a survivor fails the run (`process-survived`). Each side's worktree, home and caches
belong to its user alone (0700); the bundle, the logs and the client's output belong to
the runner. What the user left in the shared folders (/tmp, /var/tmp, /dev/shm, /run/lock,
at any depth) and its System V shared memory, queues and semaphores are removed after
each command: they outlive its processes. Each command also runs in a network namespace
of its own, loopback only (runners/netns.py), with an allowlisted environment
(runners/proc.py): no secret of the runner's, no network but the hosts its task names.

`--isolation none` runs candidates as the runner's own user, as before; the manifest says
so and the evidence carries an error. Nothing else falls back silently: a machine that
cannot isolate is refused with what to fix (runners/README.md, "The runner machine").
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runners import netns

MODES = ("cgroup", "none")
DEFAULT_USERS = {"base": "rsi-base", "head": "rsi-head"}
ENTER = Path(__file__).resolve().parent / "_enter.py"
# Folders every user may write in; /var/lock is usually /run/lock. What a candidate left
# in them (at any depth: /tmp/.X11-unix is everyone's too) is removed after each command.
SHARED_DIRS = (
    Path("/tmp"),
    Path("/dev/shm"),
    Path("/var/tmp"),
    Path("/run/lock"),
    Path("/var/lock"),
    Path("/dev/mqueue"),
)
_IPC_RMID = 0
_IPC_KINDS = ("shm", "msg", "sem")  # /proc/sysvipc/<kind>


class SandboxError(RuntimeError):
    """The machine cannot isolate candidate code; the message says what to fix."""


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int


def cgroup2_mount(mountinfo: str | None = None) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `…/unified`)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
        except OSError:
            return None
    for line in mountinfo.splitlines():
        pre, sep, post = line.partition(" - ")
        if sep and post.split(" ", 1)[0] == "cgroup2":
            return Path(pre.split()[4])
    return None


def own_cgroup(text: str | None = None) -> str:
    """This process's cgroup v2 path (`0::/a/b` in /proc/self/cgroup) — "/" if unknown."""
    if text is None:
        try:
            text = Path("/proc/self/cgroup").read_text(encoding="utf-8")
        except OSError:
            return "/"
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:] or "/"
    return "/"


def processes_of(uid: int) -> Iterator[tuple[int, str]]:
    """(pid, command line) of every live process whose real or effective uid is `uid`."""
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            status = Path(f"/proc/{e}/status").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        uids: list[int] = []
        zombie = False
        for line in status.splitlines():
            if line.startswith("Uid:"):
                uids = [int(x) for x in line.split()[1:3]]
            elif line.startswith("State:"):
                zombie = line.split()[1] in ("Z", "X")
        if uid in uids and not zombie:
            try:
                raw = Path(f"/proc/{e}/cmdline").read_bytes()
            except OSError:
                raw = b""
            yield int(e), raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:300]


class Group:
    """One cgroup: the processes of one candidate command (a prepare step or a run)."""

    def __init__(self, path: Path, create: bool = True, net: netns.Namespace | None = None) -> None:
        self.path = path
        self.net = net  # the command's network namespace, when it has one
        if create:
            path.mkdir()

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in self.procs.read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL every process in the group (frozen first where cgroup.kill is missing)."""
        kill_file = self.path / "cgroup.kill"
        deadline = time.monotonic() + timeout
        while self.pids() and time.monotonic() < deadline:
            if kill_file.exists():
                with suppress(OSError):
                    kill_file.write_text("1")
            else:  # kernels before 5.14: freeze, kill each, thaw
                freeze = self.path / "cgroup.freeze"
                with suppress(OSError):
                    freeze.write_text("1")
                for pid in self.pids():
                    with suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                with suppress(OSError):
                    freeze.write_text("0")
            time.sleep(0.05)
        with suppress(OSError):
            self.path.rmdir()
        if self.net is not None:
            self.net.close()


def clean_shared(uid: int, dirs: tuple[Path, ...] = SHARED_DIRS) -> None:
    """Remove what `uid` left in the machine's shared folders, and in any folder in them
    that everyone may write in (a sticky `/tmp/.X11-unix`), however deep."""
    seen: set[tuple[int, int]] = set()

    def walk(d: Path, depth: int) -> None:
        try:
            st = d.lstat()
            entries = list(d.iterdir())
        except OSError:
            return
        if (st.st_dev, st.st_ino) in seen:
            return
        seen.add((st.st_dev, st.st_ino))
        for p in entries:
            try:
                pst = p.lstat()
            except OSError:
                continue
            try:
                if pst.st_uid == uid:
                    if stat.S_ISDIR(pst.st_mode):
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink()
                elif stat.S_ISDIR(pst.st_mode) and pst.st_mode & 0o002 and depth < 8:
                    walk(p, depth + 1)
            except OSError:
                continue

    for d in dirs:
        walk(d, 0)


def remove_ipc(uid: int) -> list[str]:
    """Remove the System V shared memory, message queues and semaphores that `uid` made
    or owns: they outlive every process (memory the base's runs would lack). Returns
    what was removed (`shm 123`)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return []
    ctl = {"shm": libc.shmctl, "msg": libc.msgctl, "sem": libc.semctl}
    removed: list[str] = []
    for kind in _IPC_KINDS:
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text(encoding="ascii").splitlines()
        except OSError:
            continue
        if not lines:
            continue
        cols = lines[0].split()
        for line in lines[1:]:
            row = dict(zip(cols, line.split(), strict=False))
            try:
                ident = int(row[f"{kind}id" if kind != "msg" else "msqid"])
                owners = {int(row["uid"]), int(row["cuid"])}
            except (KeyError, ValueError):
                continue
            if uid not in owners:
                continue
            args = (ident, 0, _IPC_RMID, None) if kind == "sem" else (ident, _IPC_RMID, None)
            if ctl[kind](*args) == 0:
                removed.append(f"{kind} {ident}")
    return removed


class Sandbox:
    """How candidate commands run on this machine; one per verification."""

    def __init__(
        self, mode: str, accounts: Mapping[str, Account], parent: Path | None, work: Path
    ) -> None:
        self.mode = mode
        self.accounts = dict(accounts)
        self.parent = parent
        self.work = work
        self._n = 0
        self.hosts: tuple[str, ...] = ()  # what the task's candidates may reach (a proxy)
        self.proxies: list[netns.Proxy] = []
        self._nets: list[netns.Namespace] = []
        self.net_unavailable: str | None = None  # why commands have the host's network
        if self.isolated:
            self.net_unavailable = netns.unavailable()

    @classmethod
    def open(cls, mode: str, work: Path, users: Mapping[str, str] | None = None) -> Sandbox:
        """The sandbox for `mode`, or SandboxError naming everything this machine lacks."""
        if mode not in MODES:
            raise SandboxError(f"unknown isolation {mode!r}: use one of {', '.join(MODES)}")
        if mode == "none":
            return cls("none", {}, None, work)
        users = dict(users or DEFAULT_USERS)
        problems: list[str] = []
        if os.geteuid() != 0:
            problems.append(
                "the runner is not root, so it cannot switch to the candidate users or "
                "create cgroups (run it as root in its container, or through the sudo rule)"
            )
        mount = cgroup2_mount()
        if mount is None:
            problems.append("no cgroup v2 hierarchy is mounted")
        accounts: dict[str, Account] = {}
        for side, name in users.items():
            try:
                pw = pwd.getpwnam(name)
            except KeyError:
                problems.append(
                    f"the {side} side's user {name} does not exist "
                    "(create both: python3 -m runners sandbox --create-users)"
                )
                continue
            if pw.pw_uid == 0 or pw.pw_uid == os.geteuid():
                problems.append(f"user {name} is not an unprivileged user of its own")
            accounts[side] = Account(name, pw.pw_uid, pw.pw_gid)
        uids = [a.uid for a in accounts.values()]
        if len(set(uids)) != len(uids):
            problems.append("base and head must run as two different users")
        parent: Path | None = None
        if mount is not None and not problems:
            parent = mount / own_cgroup().lstrip("/") / f"rsi-{os.getpid()}-{secrets.token_hex(3)}"
            try:
                parent.mkdir()
            except OSError as exc:
                problems.append(f"cannot create a cgroup under {parent.parent}: {exc.strerror}")
        if problems:
            raise SandboxError(
                "this machine cannot isolate candidate code: "
                + "; ".join(problems)
                + ". See runners/README.md (The runner machine), or pass --isolation none "
                "to run candidates as the runner's user (the evidence then carries an error)"
            )
        work.mkdir(parents=True, exist_ok=True)
        return cls(mode, accounts, parent, work)

    @property
    def isolated(self) -> bool:
        return self.mode != "none"

    def describe(self) -> dict[str, Any]:
        """What the manifest records (`isolation`)."""
        return {
            "mode": self.mode,
            "users": {s: a.name for s, a in self.accounts.items()},
            "runner_uid": os.geteuid(),
            "cgroup": str(self.parent) if self.parent else None,
            "network": self.network(),
        }

    def network(self) -> dict[str, Any]:
        """What network candidate commands had (`isolation.network`): each its own
        namespace, loopback only, plus the task's hosts through a proxy; or the host's,
        and why."""
        if not self.isolated or self.net_unavailable is not None:
            why = self.net_unavailable or "--isolation none"
            return {"mode": "host", "reason": why, "hosts": list(self.hosts)}
        out: dict[str, Any] = {"mode": "namespace", "hosts": list(self.hosts)}
        if self.hosts:
            log = [r for p in self.proxies for r in p.log][: netns.Proxy.MAX_LOG]
            out["requests"] = log
            out["refused"] = sum(p.refused for p in self.proxies)
        return out

    # ------------------------------------------------------------------ files

    def home(self, side: str) -> Path:
        """The side's own home, temporary folder and caches (kept across its runs)."""
        h = self.work / "home" / side
        if not h.is_dir():
            (self.work / "home").mkdir(parents=True, exist_ok=True)
            (h / "tmp").mkdir(parents=True)
            self.own(side, h)
        return h

    def own(self, side: str, path: Path) -> None:
        """Give `path` (recursively) to the side's user, closed to everyone else."""
        if not self.isolated:
            return
        a = self.accounts[side]
        os.chown(path, a.uid, a.gid, follow_symlinks=False)
        for root, dirs, files in os.walk(path):
            for n in dirs + files:
                os.chown(os.path.join(root, n), a.uid, a.gid, follow_symlinks=False)
        path.chmod(0o700)

    def private(self, path: Path) -> Path:
        """A folder only the runner's user may enter (the client's output, the bundle)."""
        path.mkdir(parents=True, exist_ok=True)
        if self.isolated:
            path.chmod(0o700)
        return path

    def env(self, side: str, env: Mapping[str, str]) -> dict[str, str]:
        """The candidate's environment: its own home, temp and cache folders."""
        out = dict(env)
        if not self.isolated:
            return out
        h = self.home(side)
        out.update(
            HOME=str(h),
            TMPDIR=str(h / "tmp"),
            XDG_CACHE_HOME=str(h / ".cache"),
            USER=self.accounts[side].name,
            LOGNAME=self.accounts[side].name,
            # git refuses a repository owned by someone else; the worktree's is the runner's
            GIT_CONFIG_COUNT="1",
            GIT_CONFIG_KEY_0="safe.directory",
            GIT_CONFIG_VALUE_0="*",
        )
        return out

    # ------------------------------------------------------------------ processes

    def group(self, label: str) -> Group | None:
        """A new cgroup for one candidate command (None without isolation), with a network
        namespace of its own (and a proxy to the task's hosts) where the machine can."""
        if self.parent is None:
            return None
        self._n += 1
        net = self._namespace(label) if self.net_unavailable is None else None
        try:
            return Group(self.parent / f"{self._n:04d}-{label}"[:60], net=net)
        except BaseException:
            if net is not None:
                net.close()
            raise

    @staticmethod
    def describe_net(group: Group | None) -> str:
        """One command's network, for its record."""
        if group is None or group.net is None:
            return "the host's"
        proxy = group.net.proxy
        if proxy is None:
            return "its own namespace, loopback only"
        return "its own namespace, loopback only; through a proxy: " + ", ".join(
            sorted(proxy.allowed)
        )

    def _namespace(self, label: str) -> netns.Namespace:
        ns = netns.Namespace()
        self._nets.append(ns)
        if self.hosts:
            try:
                ns.proxy = netns.Proxy(ns, self.hosts, label)
            except BaseException:
                ns.close()
                raise
            self.proxies.append(ns.proxy)
        return ns

    def command(
        self,
        side: str,
        group: Group | None,
        argv: list[str],
        env: Mapping[str, str],
    ) -> tuple[list[str], dict[str, str]]:
        """`argv` as the side's user, inside `group` and its network namespace, with `env`:
        the command line and environment to start. While the starter is root its
        environment is PATH alone; `env` reaches the command through a root-only file (no
        `LD_PRELOAD` as root)."""
        if not self.isolated or group is None:
            return argv, dict(env)
        net = group.net
        if net is not None:
            env = {**env, **net.env()}
        a = self.accounts[side]
        self._n += 1
        folder = self.work / "env"
        folder.mkdir(mode=0o700, exist_ok=True)
        env_file = folder / f"{self._n:04d}.json"
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(dict(env), f)
        starter = [
            sys.executable,
            "-I",
            "-S",
            str(ENTER),
            str(group.procs),
            str(a.uid),
            str(a.gid),
            str(env_file),
            *(["--net", net.path] if net is not None else []),
            "--",
            *argv,
        ]
        return starter, {"PATH": env.get("PATH") or os.defpath, "LC_ALL": "C"}

    def end(self, side: str, group: Group | None) -> list[dict[str, Any]]:
        """Kill the group, then every process of the side's user that is still alive.

        Returns those survivors (pid and command line): processes that escaped the
        group. Also removes what the user left in the machine's shared temp folders.
        """
        if not self.isolated:
            return []
        if group is not None:
            group.kill()
        a = self.accounts[side]
        found = list(processes_of(a.uid))
        for pid, _ in found:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        survivors: list[dict[str, Any]] = [{"pid": pid, "command": cmd} for pid, cmd in found]
        clean_shared(a.uid)
        remove_ipc(a.uid)
        return survivors

    def close(self) -> None:
        """End every group left and remove this verification's cgroup."""
        if self.parent is None:
            return
        with suppress(OSError):
            for child in self.parent.iterdir():
                if child.is_dir():
                    Group(child, create=False).kill()
        for side in self.accounts:
            self.end(side, None)
        for ns in self._nets:
            ns.close()
        with suppress(OSError):
            self.parent.rmdir()
