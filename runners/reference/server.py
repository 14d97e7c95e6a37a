"""HTTP server for the GPU reference task (`runners/tasks/gpu-reference.toml`).

    python -m runners.reference.server --port 8000 --variant eager|graph

`POST /v1/audio/speech` `{"input": text, "stream": bool}` synthesises "audio" by decoding
tokens with the random-weight decoder (12.5 codec frames a second, as speech codecs do):
a JSON answer, or with `stream` one JSON line per 8 frames. Requests are batched up to the
model's batch size by one GPU thread. `GET /health` answers once the model is ready.
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
        threading.Thread(target=self._loop, name="gpu", daemon=True).start()

    def _loop(self) -> None:
        while True:
            jobs = [self.pending.get()]
            deadline = time.monotonic() + 0.002
            while len(jobs) < self.batch:
                try:
                    jobs.append(self.pending.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            steps = max(j.frames for j in jobs)

            def on_chunk(step: int, jobs: list[Job] = jobs) -> None:
                for j in jobs:
                    if j.stream and step <= j.frames:
                        j.chunks.put({"frames": CHUNK, "audio_s": CHUNK * FRAME_S})

            self.model.generate([j.first for j in jobs], steps, on_chunk, CHUNK)
            for j in jobs:
                j.chunks.put(
                    {
                        "done": True,
                        "frames": j.frames,
                        "audio_duration_s": round(j.frames * FRAME_S, 4),
                    }
                )
                j.chunks.put(None)


ENGINE: Engine | None = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        ok = self.path == "/health" and ENGINE is not None
        body = b'{"ok": true}' if ok else b'{"ok": false}'
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
