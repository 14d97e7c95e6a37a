"""Network namespaces, with the standard library (ctypes on libc): a resident server gets
a namespace of its own with only a loopback device, so no other candidate can reach it.

With both servers resident (runners/resident.py), a head that could connect to the base's
port queued heavy requests in its listen queue while the base was frozen, and the base
worked them off during its own burst: an A/A read +80% (an outside try). In a namespace of
its own a server is reachable only from that namespace: the runner's health checks and
the trusted client enter it (`run_in`, `runners/_netns.py`); nothing else does. It also
leaves the server no network beyond its own loopback. (`runners/_enter.py` and
`runners/_netns.py` carry their own copies of the two calls: they run with `python -I`.)
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
_SIOCSIFFLAGS = 0x8914
_IFF_UP, _IFF_LOOPBACK, _IFF_RUNNING = 0x1, 0x8, 0x40

T = TypeVar("T")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def own_loopback() -> None:
    """Move this process into a new network namespace and bring its loopback up
    (root only; before the switch to the candidate's user)."""
    if _libc().unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = _IFF_UP | _IFF_LOOPBACK | _IFF_RUNNING
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags, b"\0" * 14))


def enter(path: str) -> None:
    """Move this thread into the network namespace at `path` (`/proc/PID/ns/net`)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc().setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def run_in(path: str | None, fn: Callable[[], T]) -> T:
    """`fn()` in the network namespace at `path` (a thread of its own enters it: a
    namespace belongs to a thread), or here when `path` is None."""
    if path is None:
        return fn()
    box: dict[str, object] = {}

    def body() -> None:
        try:
            enter(path)
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    t = threading.Thread(target=body, name="rsi-netns", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


_WHY: list[str | None] = []


def unavailable() -> str | None:
    """Why this machine cannot give a server a namespace of its own (None: it can),
    tried once in a child process."""
    if _WHY:
        return _WHY[0]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            own_loopback()
            os.write(w, b"ok")
        except OSError as exc:
            os.write(w, str(exc).encode()[:500])
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        said = f.read().decode(errors="replace")
    os.waitpid(pid, 0)
    _WHY.append(None if said == "ok" else said or "unknown")
    return _WHY[0]
