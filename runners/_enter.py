"""Start one command as a candidate: join a cgroup, drop to an unprivileged user, exec.

Run by the runner as root with `python -I -S` and an environment of PATH alone, so
nothing from a worktree or a task's variables (no `LD_PRELOAD`, no `PYTHONPATH`) acts
while this process is root: argv is `CGROUP_PROCS UID GID ENV_FILE -- COMMAND...`, and
the candidate's environment comes from ENV_FILE (JSON, root-only, removed once read)
and applies only to the command, after the switch. With `--net PATH` before `--` the
command joins the network namespace at PATH, which the runner made for it with only a
loopback device (runners/netns.py: no network beyond it, no other candidate), and gets
a mount namespace of its own whose `/run` is an empty tmpfs: the host's services listen
on Unix sockets there (PostgreSQL, MySQL, Docker, D-Bus), which a network namespace does
not cut off (the NVIDIA persistence daemon's folder is bound back). The process
writes its own pid into the run's cgroup before it becomes the candidate, so every
process the command ever starts (double-forked, `setsid`, anything) is in that cgroup
and dies with it. `no_new_privs` stops a setuid binary from taking the privileges back.
"""

import ctypes
import json
import os
import sys

PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
# What a candidate still sees under /run: the folders a CUDA program may talk to.
RUN_KEPT = ("/run/nvidia-persistenced",)


def join_net(libc: ctypes.CDLL, path: str) -> None:
    """Move this process into the network namespace at `path` (as runners/netns.py)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({path}) failed")
    finally:
        os.close(fd)


def mask_run(libc: ctypes.CDLL, cwd: str) -> None:
    """A mount namespace of this process's own whose `/run` is an empty tmpfs (with its
    own `/run/lock`), but for `RUN_KEPT` and the folder the command runs in, bound back."""
    run = os.path.realpath("/run")
    keep = [p for p in (*RUN_KEPT, cwd) if p.startswith(run + "/") and os.path.isdir(p)]
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) failed")
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making the mounts private failed")
    held = [(p, os.open(p, os.O_PATH | os.O_CLOEXEC)) for p in keep]
    flags = MS_NOSUID | MS_NODEV
    if libc.mount(b"tmpfs", run.encode(), b"tmpfs", flags, b"mode=755,size=1m") != 0:
        raise OSError(ctypes.get_errno(), f"masking {run} failed")
    # Its own /run/lock, as every Linux has one: what a candidate locks there stays in it.
    os.mkdir(run + "/lock")
    os.chmod(run + "/lock", 0o1777)
    for path, fd in held:
        os.makedirs(path, mode=0o755, exist_ok=True)
        src = f"/proc/self/fd/{fd}".encode()
        if libc.mount(src, path.encode(), None, MS_BIND | MS_REC, None) != 0:
            raise OSError(ctypes.get_errno(), f"binding {path} back failed")
        os.close(fd)


def main(argv: list[str]) -> int:
    net = argv[5] if len(argv) > 5 and argv[4] == "--net" else None
    if net is not None:
        argv = argv[:4] + argv[6:]
    if len(argv) < 6 or argv[4] != "--":
        print(
            "usage: _enter.py CGROUP_PROCS UID GID ENV_FILE [--net PATH] -- COMMAND...",
            file=sys.stderr,
        )
        return 127
    procs, uid, gid, env_file, cmd = argv[0], int(argv[1]), int(argv[2]), argv[3], argv[5:]
    try:
        with open(env_file, encoding="utf-8") as f:
            env = {str(k): str(v) for k, v in json.load(f).items()}
        os.unlink(env_file)
        with open(procs, "w", encoding="ascii") as f:
            f.write(str(os.getpid()))
        libc = ctypes.CDLL(None, use_errno=True)
        if net is not None:
            join_net(libc, net)
            mask_run(libc, os.getcwd())
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise OSError("the user switch did not take")
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    except (OSError, ValueError, AttributeError) as exc:
        print(f"rsi-runner: cannot enter the sandbox: {exc}", file=sys.stderr)
        return 127
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as exc:
        print(f"rsi-runner: cannot run {cmd[0]}: {exc}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
