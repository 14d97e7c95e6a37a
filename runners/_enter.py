"""Start one command as a candidate: join a cgroup, drop to an unprivileged user, exec.

Run by the runner as root with `python -I -S`, so nothing from the environment or a
worktree is imported here: argv is `CGROUP_PROCS UID GID -- COMMAND...`. The process
writes its own pid into the run's cgroup before it becomes the candidate, so every
process the command ever starts (double-forked, `setsid`, anything) is in that cgroup
and dies with it. `no_new_privs` stops a setuid binary from taking the privileges back.
"""

import ctypes
import os
import sys

PR_SET_NO_NEW_PRIVS = 38


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print("usage: _enter.py CGROUP_PROCS UID GID -- COMMAND...", file=sys.stderr)
        return 127
    procs, uid, gid, cmd = argv[0], int(argv[1]), int(argv[2]), argv[4:]
    try:
        with open(procs, "w", encoding="ascii") as f:
            f.write(str(os.getpid()))
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise OSError("the user switch did not take")
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    except OSError as exc:
        print(f"rsi-runner: cannot enter the sandbox: {exc}", file=sys.stderr)
        return 127
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        print(f"rsi-runner: cannot run {cmd[0]}: {exc}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
