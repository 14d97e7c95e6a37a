"""Child processes: each in its own session, logged to a file, stopped as a whole group.

A server is started with `start_new_session`, so SIGTERM and SIGKILL reach every process
it spawned (workers, tokenizers, …) through its process group; descendants that left
the group are found through /proc and stopped too. Nothing a run started outlives it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# Names of variables never handed to a process the runner starts (defence in depth: the
# workflow already keeps secrets out of the job that runs candidate code).
_SECRET = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|API_KEY|ACCESS_KEY|_PAT$|_KEY$"
    r"|_AUTH$|_AUTH_|DSN|JITCONFIG|DATABASE_URL|GIT_CONFIG_PARAMETERS)",
    re.I,
)
_SECRET_PREFIXES = ("ACTIONS_ID_TOKEN", "ACTIONS_RUNTIME", "ACTIONS_RESULTS", "AWS_")

# What candidate code may inherit from the runner's environment: an allowlist (a denylist
# let DATABASE_URL, SSH_AUTH_SOCK, GIT_CONFIG_PARAMETERS and `*_KEY` through). The runner
# adds the candidate's own HOME, TMPDIR and caches, its worktree on PYTHONPATH, the GPU
# order and the task's variables; a task may name more (`[candidate] inherit`).
CANDIDATE_NAMES = frozenset(
    {
        "PATH",
        "HOME",  # isolated, the sandbox gives each side its own
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "PYTHONPATH",  # an image's (a codec checkout); the worktree is put first
        "LD_LIBRARY_PATH",  # an image's CUDA libraries (applied after the user switch)
        "HF_HOME",  # the read-only weights and data-set cache
        "HF_HUB_CACHE",
        "HF_DATASETS_CACHE",
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
    }
)
# GPU libraries' settings, the locale, and the dry stand-in's knobs (runners/dry).
CANDIDATE_PREFIXES = ("LC_", "CUDA_", "NCCL_", "NVIDIA_", "RSI_DRY_")


def secret_like(name: str) -> bool:
    """Whether a variable's name looks like a credential's."""
    return bool(_SECRET.search(name)) or name.upper().startswith(_SECRET_PREFIXES)


def scrub_env(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The environment without credentials, and the names that were dropped (for the
    runner's own trusted processes: the benchmark client)."""
    kept: dict[str, str] = {}
    dropped: list[str] = []
    for k, v in env.items():
        if secret_like(k):
            dropped.append(k)
        else:
            kept[k] = v
    return kept, sorted(dropped)


def candidate_may_inherit(name: str, extra: frozenset[str] = frozenset()) -> bool:
    """Whether candidate code may see the runner's variable `name` (never one whose name
    looks like a credential, even under an allowed prefix: NVIDIA_API_KEY)."""
    allowed = name in CANDIDATE_NAMES or name in extra or name.startswith(CANDIDATE_PREFIXES)
    return allowed and not secret_like(name)


def candidate_env(
    env: Mapping[str, str], extra: tuple[str, ...] = ()
) -> tuple[dict[str, str], list[str]]:
    """The allowlisted part of `env` for candidate code, and the names withheld."""
    names = frozenset(extra)
    kept = {k: v for k, v in env.items() if candidate_may_inherit(k, names)}
    return kept, sorted(k for k in env if k not in kept)


@dataclass
class Finished:
    returncode: int | None  # None: killed by the runner after its time limit
    timed_out: bool
    wall_s: float
    started: float  # time.time() at start
    ended: float


@dataclass(frozen=True)
class _Stat:
    pid: int
    ppid: int
    pgrp: int
    zombie: bool


def stat_fields() -> Iterator[tuple[int, list[str]]]:
    """Each process's `/proc/<pid>/stat` fields after the command name (state first)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                data = f.read().decode("ascii", "replace")
            yield int(e), data[data.rindex(")") + 2 :].split()
        except (OSError, ValueError):
            continue


def _scan() -> list[_Stat]:
    """Every process in /proc (pid, parent, process group, zombie or not)."""
    out: list[_Stat] = []
    for pid, rest in stat_fields():
        try:
            out.append(_Stat(pid, int(rest[1]), int(rest[2]), rest[0] in ("Z", "X")))
        except (ValueError, IndexError):
            continue
    return out


def descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for st in _scan():
        kids.setdefault(st.ppid, []).append(st.pid)
    out: set[int] = set()
    todo = [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _live(pgid: int, pids: set[int]) -> set[int]:
    """Processes of group `pgid` or among `pids` that still run (zombies do not count)."""
    return {st.pid for st in _scan() if (st.pgrp == pgid or st.pid in pids) and not st.zombie}


def _signal_all(pgid: int, pids: set[int], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)


class Process:
    """A started command: its Popen, log file and process group."""

    def __init__(
        self,
        argv: list[str],
        cwd: Path,
        env: Mapping[str, str],
        log: Path,
        header: str | None = None,
    ) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log
        self._log: IO[bytes] = open(log, "ab")  # noqa: SIM115 - closed in stop()/wait()
        if header:
            self._log.write(header.encode() + b"\n")
            self._log.flush()
        self.argv = argv
        self.started = time.time()
        self._t0 = time.monotonic()
        try:
            self.popen = subprocess.Popen(
                argv,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError:
            self._log.close()
            raise
        self.pid = self.popen.pid
        self.stopped_how: str | None = None

    def poll(self) -> int | None:
        return self.popen.poll()

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def wait(self, timeout: float | None) -> Finished:
        """Wait for the command; past `timeout` stop it (the result says `timed_out`)."""
        timed_out = False
        try:
            rc: int | None = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self.stop(grace=5.0)
            rc = None
        except BaseException:  # interrupted: leave nothing running
            self.stop(grace=2.0)
            raise
        wall = self.elapsed()
        self.stop(grace=2.0)  # stragglers of a command that exited on its own
        return Finished(rc, timed_out, wall, self.started, self.started + wall)

    def stop(self, grace: float) -> int | None:
        """SIGTERM to the group (and descendants), SIGKILL after `grace` seconds.

        `stopped_how` says what ended the command: `exited` (on its own, before this
        call), `sigterm`, or `sigkill`.
        """
        pgid = self.pid
        pids = descendants(self.pid) | {self.pid}
        leader_running = self.popen.poll() is None
        if self.stopped_how is None:
            self.stopped_how = "sigterm" if leader_running else "exited"

        def gone() -> bool:
            self.popen.poll()
            return self.popen.returncode is not None and not _live(pgid, pids)

        if not gone():
            _signal_all(pgid, pids, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while not gone():
                if time.monotonic() >= deadline:
                    _signal_all(pgid, pids, signal.SIGKILL)
                    if leader_running and self.stopped_how == "sigterm":
                        self.stopped_how = "sigkill"
                    break
                time.sleep(0.05)
        try:
            rc = self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            rc = None
        if not self._log.closed:
            self._log.close()
        return rc


def run(
    argv: list[str],
    cwd: Path,
    env: Mapping[str, str],
    log: Path,
    timeout: float | None,
    header: str | None = None,
) -> Finished:
    """Run a command to completion (or its time limit), output appended to `log`."""
    p = Process(argv, cwd, env, log, header)
    return p.wait(timeout)


def describe_exit(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"
