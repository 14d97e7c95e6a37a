"""HTTP server for the GPU reference task (`runners/tasks/gpu-reference.toml`).

    python -m runners.reference.server --port 8000 --variant eager|graph

`POST /v1/audio/speech` `{"input": text, "stream": bool}` synthesises "audio" by decoding
tokens with the random-weight decoder (12.5 codec frames a second, as speech codecs do):
a JSON answer, or with `stream` one JSON line per 8 frames. One GPU thread batches
continuously: a request takes a free slot of the model's batch between chunks and leaves
as soon as its own frames are out. `GET /health` answers once the model is ready;
`GET /stats` says how requests were batched (the noise study reads it).
"""

from __future__ import annotations

import argparse
import json
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FRAME_S = 0.08  # seconds of audio per decoded frame (12.5 Hz)
CHUNK = 8


class Job:
    def __init__(self, text: str, stream: bool) -> None:
        self.frames = max(CHUNK, min(88, 16 + len(text) // 2))
        self.first = sum(map(ord, text)) % 4000 + 1
        self.stream = stream
        self.done = 0  # frames decoded so far
        self.chunks: queue.Queue[dict[str, Any] | None] = queue.Queue()


class Engine:
    def __init__(self, variant: str, device: str, batch: int) -> None:
        import torch

        from runners.reference.model import Config, Decoder

        torch.backends.cuda.matmul.allow_tf32 = True
        self.model = Decoder(Config(max_batch=batch), device)
        if variant == "graph":
            self.model.capture()
        self.model.generate([1] * batch, CHUNK)  # warm the kernels
        self.pending: queue.Queue[Job] = queue.Queue()
        self.batch = batch
        # What the noise study reads (`GET /stats`): chunks decoded ("batches"), requests
        # admitted, busy slots per chunk ("sizes") and the GPU thread's busy seconds.
        self.stats: dict[str, Any] = {"batches": 0, "jobs": 0, "sizes": {}, "busy_s": 0.0}
        threading.Thread(target=self._loop, name="gpu", daemon=True).start()

    def _loop(self) -> None:
        """Continuous batching: new requests take free slots between chunks of decoding,
        and a request ends as soon as its own frames are out."""
        slots: list[Job | None] = [None] * self.batch
        st = self.stats
        while True:
            waiting = all(j is None for j in slots)
            for i, j in enumerate(slots):
                if j is not None:
                    continue
                try:
                    job = self.pending.get() if waiting else self.pending.get_nowait()
                except queue.Empty:
                    break
                waiting = False
                slots[i] = job
                self.model.admit(i, job.first)
                st["jobs"] += 1
            active = sum(j is not None for j in slots)
            t0 = time.perf_counter()
            self.model.decode(CHUNK)
            st["busy_s"] += time.perf_counter() - t0
            st["batches"] += 1
            st["sizes"][active] = st["sizes"].get(active, 0) + 1
            for i, j in enumerate(slots):
                if j is None:
                    continue
                j.done += CHUNK
                if j.stream and j.done <= j.frames:
                    j.chunks.put({"frames": CHUNK, "audio_s": CHUNK * FRAME_S})
                if j.done >= j.frames:
                    j.chunks.put(
                        {
                            "done": True,
                            "frames": j.frames,
                            "audio_duration_s": round(j.frames * FRAME_S, 4),
                        }
                    )
                    j.chunks.put(None)
                    slots[i] = None


ENGINE: Engine | None = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        ok = self.path in ("/health", "/stats") and ENGINE is not None
        body = b'{"ok": true}' if ok else b'{"ok": false}'
        if ok and ENGINE is not None and self.path == "/stats":
            body = json.dumps(ENGINE.stats).encode()
        self.send_response(200 if ok else 503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        assert ENGINE is not None
        length = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(length) or b"{}")
        job = Job(str(req.get("input", "")), bool(req.get("stream")))
        ENGINE.pending.put(job)
        if job.stream:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while (item := job.chunks.get()) is not None:
                line = json.dumps(item).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        final: dict[str, Any] = {}
        while (item := job.chunks.get()) is not None:
            final = item
        body = json.dumps(final).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--variant", choices=("eager", "graph"), default=None)
    ap.add_argument(
        "--variant-file",
        help="read the variant from a file of the checkout "
        "(how a commit chooses base or head behaviour)",
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    variant = args.variant
    if variant is None and args.variant_file:
        with open(args.variant_file) as fh:
            variant = fh.read().strip()
    variant = variant or "eager"
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    global ENGINE
    ENGINE = Engine(variant, args.device, args.batch)  # /health turns 200 now
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()


if __name__ == "__main__":
    main()
