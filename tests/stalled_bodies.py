"""Clients that send a large request body all but its last byte and then stall, for the
serving tests and `bench/body_memory.py`: `python -m tests.stalled_bodies PORT N MIB`
opens N connections to 127.0.0.1:PORT at once, each declaring a body of MIB MiB to
`POST /webhooks/github` with a signature that does not hold, and sends all of it but one
byte. It prints `ready` once every body is sent (or the server stopped taking it), then
holds the connections until its standard input closes, and prints one JSON line: how
many bodies were sent whole but one byte, and the first bytes of each answer received.

A child process of its own, so that its sends do not share the test's interpreter lock.
Only loopback.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading

HEADER = (
    "POST /webhooks/github HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    "X-GitHub-Event: ping\r\nX-GitHub-Delivery: stalled\r\n"
    "X-Hub-Signature-256: sha256=" + "0" * 64 + "\r\nContent-Length: {n}\r\n\r\n"
)
PIECE = b"x" * (1 << 20)


def stall(
    port: int, size: int, sent: list[bool], answers: list[str], socks: list[socket.socket]
) -> None:
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    socks.append(s)
    try:
        s.sendall(HEADER.format(n=size).encode())
        left = size - 1
        while left:
            n = min(left, len(PIECE))
            s.sendall(PIECE[:n])
            left -= n
        sent.append(True)
    except OSError:
        pass
    s.settimeout(0.5)
    with contextlib.suppress(OSError):
        answers.append(s.recv(64).decode(errors="replace").split("\r\n", 1)[0])


def main() -> None:
    port, count, mib = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    sent: list[bool] = []
    answers: list[str] = []
    socks: list[socket.socket] = []
    threads = [
        threading.Thread(target=stall, args=(port, mib << 20, sent, answers, socks))
        for _ in range(count)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("ready", flush=True)
    sys.stdin.read()
    for s in socks:
        s.close()
    print(json.dumps({"sent": len(sent), "answers": sorted(a for a in answers if a)}), flush=True)


if __name__ == "__main__":
    main()
