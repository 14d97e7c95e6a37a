"""Unsigned clients that open RATE connections a second, each sending FIELDS header
lines of SIZE bytes and never ending the headers. Prints one JSON line of what it sent.

    python -m tests.header_flood PORT RATE FIELDS SIZE SECONDS
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time


def main() -> None:
    port, rate, fields, size, seconds = (
        int(sys.argv[1]),
        float(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
        float(sys.argv[5]),
    )
    line = b"X-Filler: " + b"a" * max(0, size - 12) + b"\r\n"
    data = b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\n" + line * fields
    sent = [0]
    lock = threading.Lock()

    def one() -> None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(data)
                with lock:
                    sent[0] += 1
                time.sleep(2)
        except OSError:
            pass  # cut off by the server: what it should do

    print("ready", flush=True)
    t0, i = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        threading.Thread(target=one, daemon=True).start()
        i += 1
        time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
    time.sleep(2.5)
    print(json.dumps({"connections": sent[0], "bytes": sent[0] * len(data)}), flush=True)


if __name__ == "__main__":
    main()
