"""Network namespaces, with the standard library (ctypes on libc): every isolated candidate
command (prepare step, probe, server) runs in a namespace of its own with only a loopback
device, so it reaches neither the internet, the LAN, the host's loopback, nor the other
side's server.

With both servers resident (runners/resident.py), a head that could connect to the base's
port queued heavy requests in its listen queue while the base was frozen, and the base
worked them off during its own burst: an A/A read +80% (an outside try). And a head's
prepare step with the host's network could reach a cloud metadata service or the LAN.
The runner makes the namespace (`Namespace`) before the command starts, holds
it by a file descriptor, and the starter joins it (`runners/_enter.py --net`); the
runner's health checks and the trusted client enter it (`run_in`, `runners/_netns.py`);
nothing else does. A task that needs hosts names them (`[candidate] hosts`): a `Proxy` on
the namespace's loopback reaches exactly those, nothing else. (`runners/_enter.py` and
`runners/_netns.py` carry their own copies of the calls: they run with `python -I`.)
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import socket
import struct
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

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


class Namespace:
    """A new network namespace with its loopback up, held open by this process (a
    file descriptor) until `close`; `path` names it for setns, as root."""

    def __init__(self) -> None:
        box: dict[str, Any] = {}

        def body() -> None:  # a thread of its own: unshare moves only the calling thread
            try:
                own_loopback()
                box["fd"] = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                box["error"] = exc

        t = threading.Thread(target=body, name="rsi-netns-new", daemon=True)
        t.start()
        t.join()
        if "error" in box:
            raise box["error"]
        self.fd: int | None = box["fd"]
        self.path = f"/proc/{os.getpid()}/fd/{self.fd}"
        self.proxy: Proxy | None = None

    def env(self) -> dict[str, str]:
        """What a command in it is told: the proxy to its named hosts, if any."""
        return self.proxy.env() if self.proxy else {}

    def close(self) -> None:
        """Stop the proxy and let the namespace go (it ends with its last process)."""
        if self.proxy is not None:
            self.proxy.close()
        if self.fd is not None:
            with suppress(OSError):
                os.close(self.fd)
            self.fd = None


_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]):\d{1,5}$")


def valid_host(entry: str) -> bool:
    """`host:port` (a name, an IPv4 address or a bracketed IPv6 one; port 1–65535)."""
    return bool(_HOST.match(entry)) and 0 < int(entry.rsplit(":", 1)[1]) < 65536


class Proxy:
    """An HTTP CONNECT proxy on a namespace's loopback that connects to exactly the named
    `host:port` entries (resolved and reached from the runner's network) and refuses
    anything else. Each request is logged (`log`: target and whether it was allowed)."""

    MAX_LOG = 50
    HEAD_MAX = 8192

    def __init__(self, ns: Namespace, hosts: tuple[str, ...], label: str) -> None:
        self.allowed = {h.lower() for h in hosts}
        self.label = label
        self.log: list[dict[str, Any]] = []
        self.refused = 0
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.listener = run_in(ns.path, self._listen)
        self.port = int(self.listener.getsockname()[1])
        # started from this (the runner's) thread: its connections go out on the host's net
        threading.Thread(target=self._accept, name="rsi-proxy", daemon=True).start()

    @staticmethod
    def _listen() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        s.settimeout(0.2)
        return s

    def env(self) -> dict[str, str]:
        url = f"http://127.0.0.1:{self.port}"
        local = "localhost,127.0.0.1,::1"
        return {
            "HTTPS_PROXY": url,
            "HTTP_PROXY": url,
            "https_proxy": url,
            "http_proxy": url,
            "NO_PROXY": local,
            "no_proxy": local,
            "RSI_CANDIDATE_PROXY": url,
            "RSI_CANDIDATE_HOSTS": ",".join(sorted(self.allowed)),
        }

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._track(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _track(self, s: socket.socket) -> None:
        with self._lock:
            self._conns.append(s)

    def _note(self, target: str, allowed: bool) -> None:
        with self._lock:
            if not allowed:
                self.refused += 1
            if len(self.log) < self.MAX_LOG:
                shown = "".join(ch if 32 < ord(ch) < 127 else "?" for ch in target[:200])
                self.log.append({"command": self.label, "target": shown, "allowed": allowed})

    def _head(self, c: socket.socket) -> bytes:
        c.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data and len(data) < self.HEAD_MAX:
            chunk = c.recv(1024)
            if not chunk:
                break
            data += chunk
        return data

    def _serve(self, c: socket.socket) -> None:
        """One client: `CONNECT host:port` to an allowed target, then bytes both ways."""
        with suppress(OSError), c:
            words = self._head(c).split(b"\r\n", 1)[0].decode("latin-1").split()
            target = words[1].lower() if len(words) == 3 else ""
            ok = len(words) == 3 and words[0] == "CONNECT" and target in self.allowed
            self._note(target or " ".join(words)[:200], ok)
            if not ok:
                c.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            host, port = target.rsplit(":", 1)
            up = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
            self._track(up)
            with up:
                c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                c.settimeout(None)
                up.settimeout(None)
                back = threading.Thread(target=_pump, args=(up, c), daemon=True)
                back.start()
                _pump(c, up)
                back.join()

    def describe(self) -> dict[str, Any]:
        return {"hosts": sorted(self.allowed), "requests": list(self.log), "refused": self.refused}

    def close(self) -> None:
        self._stop.set()
        with suppress(OSError):
            self.listener.close()
        with self._lock:
            for s in self._conns:
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy `src` to `dst` until `src` ends, then end `dst`'s writing half."""
    with suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
