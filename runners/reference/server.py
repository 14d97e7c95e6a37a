"""HTTP server for the GPU reference task (`runners/tasks/gpu-reference.toml`).

    python -m runners.reference.server --port 8000 --variant eager|graph[+PCT]

A `+PCT` suffix (`graph+5`) plants an effect of known size: every decode step does PCT%
more GPU work (`Decoder(extra_pct=…)`), so a design can be shown to find a 5% change on
the real GPU.

`POST /v1/audio/speech` `{"input": text, "stream": bool}` synthesises "audio" by decoding
tokens with the random-weight decoder (12.5 codec frames a second, as speech codecs do):
a JSON answer, or with `stream` one JSON line per chunk of 8 frames.

Two processes, as SGLang splits its HTTP front end from its scheduler. The engine process
batches continuously: a request takes a free slot of the model's batch between chunks and
leaves as soon as its own frames are out. The front end (this process) answers HTTP. With
both in one process, eager decode (a thousand kernel launches a chunk, each giving up the
GIL) and sixteen streaming handlers fought for the GIL: the decode loop was busy 16–26%
of the time. In its own process it is busy 93–96% and eager throughput rose about 20% on
the H200; the round-to-round spread that remains is the host CPU's (runners/README.md,
"Noise on the H200").

`GET /health` answers once the model is ready; `GET /stats` says how requests were batched
(the noise study reads it).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import multiprocessing as mp
import os
import queue
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from typing import Any, Protocol

FRAME_S = 0.08  # seconds of audio per decoded frame (12.5 Hz)
MAX_BODY = 1 << 20  # a request is a line of text
CHUNK = 8

# One message per decoded chunk, engine → front end: (requests admitted, busy slots,
# seconds in decode, [(request id, frames of this chunk, finished)]).
Event = tuple[int, int, float, list[tuple[int, int, bool]]]


class Model(Protocol):
    def admit(self, slot: int, first_token: int) -> None: ...
    def decode(self, steps: int) -> None: ...


class Job:
    """One request as the front end sees it; `chunks` ends with None."""

    def __init__(self, text: str, stream: bool) -> None:
        self.frames = max(CHUNK, min(88, 16 + len(text) // 2))
        self.first = sum(map(ord, text)) % 4000 + 1
        self.stream = stream
        self.chunks: queue.Queue[dict[str, Any] | None] = queue.Queue()


class Engine:
    """The GPU loop: continuous batching over requests read from `inbox`."""

    def __init__(self, model: Model, batch: int, inbox: Connection, outbox: Connection) -> None:
        self.model, self.batch, self.inbox, self.outbox = model, batch, inbox, outbox
        self.pending: deque[tuple[int, int, int]] = deque()  # (id, first token, frames)

    def _take(self, block: bool) -> bool:
        """Queue the requests that arrived (waiting for one when idle); False at the end."""
        try:
            if block:
                self.pending.append(self.inbox.recv())
            while self.inbox.poll():
                self.pending.append(self.inbox.recv())
        except EOFError:  # the front end has gone
            return False
        return True

    def run(self) -> None:
        slots: list[list[int] | None] = [None] * self.batch  # [id, frames, frames done]
        while True:
            idle = not self.pending and all(s is None for s in slots)
            if not self._take(block=idle):
                return
            admitted = 0
            for i in range(self.batch):
                if slots[i] is None and self.pending:
                    rid, first, frames = self.pending.popleft()
                    slots[i] = [rid, frames, 0]
                    self.model.admit(i, first)
                    admitted += 1
            active = sum(s is not None for s in slots)
            t0 = time.perf_counter()
            self.model.decode(CHUNK)
            busy = time.perf_counter() - t0
            events: list[tuple[int, int, bool]] = []
            for i, s in enumerate(slots):
                if s is None:
                    continue
                rid, frames, done = s
                s[2] = min(frames, done + CHUNK)
                events.append((rid, s[2] - done, s[2] >= frames))
                if s[2] >= frames:
                    slots[i] = None
            try:
                self.outbox.send((admitted, active, busy, events))
            except (BrokenPipeError, EOFError):
                return


def engine_main(
    variant: str,
    device: str,
    batch: int,
    inbox: Connection,
    outbox: Connection,
    cpus: list[int] | None,
) -> None:
    """The engine process: build the model, say ready, serve until the front end goes."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    import torch

    from runners.reference.model import Config, Decoder

    torch.backends.cuda.matmul.allow_tf32 = True
    kind, extra_pct = parse_variant(variant)
    model = Decoder(Config(max_batch=batch), device, extra_pct=extra_pct)
    if kind == "graph":
        model.capture()
    model.generate([1] * batch, CHUNK)  # warm the kernels
    gc.collect()
    gc.freeze()  # the weights and caches are never garbage: keep collections short
    outbox.send("ready")
    Engine(model, batch, inbox, outbox).run()


class Front:
    """The HTTP side of the engine: hands requests over and routes each chunk back."""

    def __init__(self, to_engine: Connection, from_engine: Connection) -> None:
        self.to_engine, self.from_engine = to_engine, from_engine
        self.jobs: dict[int, Job] = {}
        self.ids = itertools.count()
        self.lock = threading.Lock()  # jobs, stats, failed
        self.send_lock = threading.Lock()  # one writer at a time on the pipe
        self.ready = threading.Event()
        self.failed: str | None = None
        # What the noise study reads (`GET /stats`): chunks decoded ("batches"), requests
        # admitted, busy slots per chunk ("sizes") and the engine's seconds in decode.
        self.stats: dict[str, Any] = {"batches": 0, "jobs": 0, "sizes": {}, "busy_s": 0.0}
        threading.Thread(target=self._route, name="events", daemon=True).start()

    def submit(self, job: Job) -> None:
        with self.lock:
            if self.failed:
                raise RuntimeError(self.failed)
            rid = next(self.ids)
            self.jobs[rid] = job
        try:
            with self.send_lock:
                self.to_engine.send((rid, job.first, job.frames))
        except OSError as exc:  # the engine has gone; the router may not know yet
            with self.lock:
                self.jobs.pop(rid, None)
            raise RuntimeError("the engine process exited") from exc

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return dict(self.stats, sizes=dict(self.stats["sizes"]))

    def _route(self) -> None:
        try:
            if self.from_engine.recv() != "ready":
                raise EOFError
            self.ready.set()
            while True:
                self._deliver(self.from_engine.recv())
        except Exception as exc:  # EOF from a dead engine, or a bug here: fail, never hang
            why = "exited" if isinstance(exc, EOFError | OSError) else f"failed ({exc!r})"
            with self.lock:
                self.failed = f"the engine process {why}"
                self.ready.clear()
                jobs, self.jobs = list(self.jobs.values()), {}
            for job in jobs:
                job.chunks.put({"error": self.failed})
                job.chunks.put(None)

    def _deliver(self, event: Event) -> None:
        admitted, active, busy, chunks = event
        with self.lock:
            st = self.stats
            st["batches"] += 1
            st["jobs"] += admitted
            st["busy_s"] += busy
            st["sizes"][active] = st["sizes"].get(active, 0) + 1
            jobs = [self.jobs.pop(rid) if end else self.jobs[rid] for rid, _, end in chunks]
        for job, (_, frames, finished) in zip(jobs, chunks, strict=True):
            if job.stream and frames:
                job.chunks.put({"frames": frames, "audio_s": round(frames * FRAME_S, 4)})
            if finished:
                job.chunks.put(
                    {
                        "done": True,
                        "frames": job.frames,
                        "audio_duration_s": round(job.frames * FRAME_S, 4),
                    }
                )
                job.chunks.put(None)


FRONT: Front | None = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 120  # a client that stops sending mid-request frees its thread

    def log_message(self, fmt: str, *args: Any) -> None:
        return

    def _json(self, status: int, doc: Any) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if "Content-Length" in self.headers or "Transfer-Encoding" in self.headers:
            self.close_connection = True  # a body we do not read must not become a request
        ok = FRONT is not None and FRONT.ready.is_set()
        if ok and FRONT is not None and self.path == "/stats":
            self._json(200, FRONT.snapshot())
        elif self.path in ("/health", "/stats"):
            self._json(200 if ok else 503, {"ok": ok})
        else:
            self._json(404, {"error": "not found"})

    def _refuse(self, status: int, why: str) -> None:
        self.close_connection = True  # what is left of the body must not be read as a request
        self._json(status, {"error": why})

    def do_POST(self) -> None:
        lengths = self.headers.get_all("Content-Length") or ["0"]
        raw = lengths[0]
        if "Transfer-Encoding" in self.headers or len(lengths) > 1:
            self._refuse(400, "bad request: one Content-Length, no Transfer-Encoding")
            return
        if not (raw.isascii() and raw.isdigit()):
            self._refuse(400, "bad request: Content-Length is not a number")
            return
        if int(raw) > MAX_BODY:
            self._refuse(413, f"bad request: a body is at most {MAX_BODY} bytes")
            return
        try:
            req = json.loads(self.rfile.read(int(raw)) or b"{}")
        except (ValueError, RecursionError) as exc:
            self._refuse(400, f"bad request: not JSON ({type(exc).__name__})")
            return
        text, stream = (
            (req.get("input", ""), req.get("stream", False))
            if isinstance(req, dict)
            else (None, None)
        )
        if not isinstance(text, str) or not isinstance(stream, bool):
            self._refuse(400, 'bad request: expected {"input": text, "stream": true|false}')
            return
        job = Job(text, stream)
        if FRONT is None or not FRONT.ready.is_set():
            self._json(503, {"error": "the model is not ready"})
            return
        try:
            FRONT.submit(job)
        except RuntimeError as exc:
            self._json(503, {"error": str(exc)})
            return
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
        self._json(500 if "error" in final else 200, final)


class Server(ThreadingHTTPServer):
    """A listen backlog that holds every connection of a burst. The standard library's 5
    drops SYNs when sixteen clients connect at once to a server just thawed, and each
    dropped one costs the client a 1 s retransmission: on the H200 one request in a
    burst of 128 then took 1.06 s and the burst's throughput halved."""

    request_queue_size = 1024


def parse_variant(variant: str) -> tuple[str, int]:
    """`eager`, `graph`, or either with `+PCT` (1–100): the decode kind and the planted
    extra work in percent."""
    kind, _, pct = variant.partition("+")
    if kind not in ("eager", "graph") or (pct and not (pct.isdigit() and 1 <= int(pct) <= 100)):
        raise ValueError(f"variant {variant!r}: expected eager or graph, optionally +1..+100")
    return kind, int(pct) if pct else 0


def split_cpus(spec: str) -> tuple[list[int] | None, list[int] | None]:
    """`--engine-cpus`: `first` gives the engine the first allowed core and the front end
    the rest (kept apart, so neither waits for the other's core); `shared` leaves both
    on every allowed core."""
    cpus = sorted(os.sched_getaffinity(0))
    if spec == "shared" or len(cpus) < 2:
        return None, None
    return cpus[:1], cpus[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--variant", default=None, help="eager, graph, or either with +PCT")
    ap.add_argument(
        "--variant-file",
        help="read the variant from a file of the checkout "
        "(how a commit chooses base or head behaviour)",
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--engine-cpus", choices=("first", "shared"), default="first")
    args = ap.parse_args()
    variant = args.variant
    if variant is None and args.variant_file:
        with open(args.variant_file) as fh:
            variant = fh.read().strip()
    variant = variant or "eager"
    try:
        parse_variant(variant)
    except ValueError as exc:
        ap.error(str(exc))
    engine_cpus, front_cpus = split_cpus(args.engine_cpus)
    ctx = mp.get_context("spawn")  # CUDA lives only in the engine
    to_engine_r, to_engine_w = ctx.Pipe(duplex=False)
    from_engine_r, from_engine_w = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=engine_main,
        args=(variant, args.device, args.batch, to_engine_r, from_engine_w, engine_cpus),
        name="engine",
        daemon=True,
    )
    proc.start()
    to_engine_r.close()
    from_engine_w.close()
    if front_cpus:
        os.sched_setaffinity(0, front_cpus)
    global FRONT
    FRONT = Front(to_engine_w, from_engine_r)  # /health turns 200 once the engine is ready
    server = Server(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with contextlib.suppress(KeyboardInterrupt):
        proc.join()  # the engine only ends if it fails: so does the server
    server.shutdown()
    raise SystemExit(proc.exitcode or 1)


if __name__ == "__main__":
    main()
