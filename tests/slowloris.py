"""Slow clients against a local server, for the serving tests: `python -m tests.slowloris
PORT N SECONDS` keeps N connections open to 127.0.0.1:PORT for SECONDS — a third send
nothing, a third send an endless request header one byte a second, a third send a whole
webhook's headers and then its body one byte a second — and opens a new one whenever the
server closes one, so N stay open all along. It prints `ready` once the first N are
connected, then, at the end, one JSON line: how many connections it opened, how many the
server closed, and how long each kind had lived when it was closed.

A child process of its own, so that its thousands of sends do not share the test's
interpreter lock with the request being timed. Only loopback; bounded in time.
"""

from __future__ import annotations

import errno
import json
import resource
import selectors
import socket
import sys
import time
from dataclasses import dataclass, field

HEADER = b"POST /webhooks/github HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
FILLER = b"X-Slow: " + b"a" * 32 + b"\r\n"  # repeated for ever: the headers never end
WEBHOOK = HEADER + (
    b"Content-Length: 1000000\r\nX-GitHub-Event: ping\r\nX-GitHub-Delivery: slow\r\n"
    b"X-Hub-Signature-256: sha256=" + b"0" * 64 + b"\r\n\r\n"
)
KINDS = ("silent", "trickle", "body")
TRICKLE_S = 1.0


@dataclass(eq=False)  # kept in a set, by identity
class Conn:
    sock: socket.socket
    kind: str  # one of KINDS
    opened: float
    sent: int = 0


@dataclass
class Stats:
    opened: int = 0
    connect_failed: int = 0
    closed: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})


def raise_nofile(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))


def _open(port: int, kind: str, sel: selectors.BaseSelector, stats: Stats) -> Conn | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    err = s.connect_ex(("127.0.0.1", port))
    if err not in (0, errno.EINPROGRESS):
        s.close()
        stats.connect_failed += 1
        return None
    c = Conn(s, kind, time.monotonic())
    sel.register(s, selectors.EVENT_READ, c)
    stats.opened += 1
    return c


def _next_bytes(c: Conn) -> bytes:
    if c.kind == "body":
        return WEBHOOK if c.sent == 0 else b"{"  # headers at once, then the body slowly
    stream = HEADER if c.sent < len(HEADER) else FILLER
    i = c.sent if c.sent < len(HEADER) else (c.sent - len(HEADER)) % len(FILLER)
    return stream[i : i + 1]


def run(port: int, n: int, seconds: float) -> Stats:
    raise_nofile(2 * n)
    sel = selectors.DefaultSelector()
    stats = Stats()
    conns: set[Conn] = set()
    for i in range(n):
        c = _open(port, KINDS[i % len(KINDS)], sel, stats)
        if c is not None:
            conns.add(c)
    print("ready", flush=True)
    end = time.monotonic() + seconds
    next_trickle = time.monotonic()
    while (now := time.monotonic()) < end:
        for key, _ in sel.select(timeout=max(0.0, min(next_trickle, end) - now)):
            c = key.data
            try:
                data = c.sock.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if data:
                continue  # an error page; the server closes next
            _closed(c, sel, conns, stats, port)
        if time.monotonic() >= next_trickle:
            next_trickle += TRICKLE_S
            for c in [c for c in conns if c.kind != "silent"]:
                try:
                    data = _next_bytes(c)
                    if c.sock.send(data) != len(data):
                        raise OSError("short send")
                    c.sent += len(data)
                except (BlockingIOError, InterruptedError):
                    pass  # not connected yet, or the server's buffer is full
                except OSError:
                    _closed(c, sel, conns, stats, port)
    for c in conns:
        sel.unregister(c.sock)
        c.sock.close()
    return stats


def _closed(
    c: Conn, sel: selectors.BaseSelector, conns: set[Conn], stats: Stats, port: int
) -> None:
    if c not in conns:
        return
    conns.discard(c)
    sel.unregister(c.sock)
    c.sock.close()
    stats.closed[c.kind].append(round(time.monotonic() - c.opened, 3))
    fresh = _open(port, c.kind, sel, stats)  # keep N open: the attacker comes back
    if fresh is not None:
        conns.add(fresh)


def main() -> None:
    port, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    stats = run(port, n, seconds)
    print(
        json.dumps(
            {"opened": stats.opened, "connect_failed": stats.connect_failed, "closed": stats.closed}
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
