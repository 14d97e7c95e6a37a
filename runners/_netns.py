"""Run a command inside another process's network namespace: `_netns.py PATH -- COMMAND…`.

The trusted benchmark client, as root, enters the resident server's namespace
(`/proc/PID/ns/net`) and becomes the client (exec), so it reaches the server on its
loopback while no candidate can (runners/netns.py). Run with `python -I -S`, so it is
self-contained; the client's environment passes through the exec unchanged.
"""

import ctypes
import os
import sys

CLONE_NEWNET = 0x40000000


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: _netns.py PATH -- COMMAND...", file=sys.stderr)
        return 127
    try:
        fd = os.open(argv[0], os.O_RDONLY)
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns failed")
        os.close(fd)
        os.execvp(argv[2], argv[2:])
    except OSError as exc:
        print(f"rsi-runner: cannot run in {argv[0]}: {exc}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
