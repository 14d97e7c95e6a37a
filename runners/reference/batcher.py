"""HTTP server with batching of its own, for `runners/tasks/gpu-batching.toml`.

    python -m runners.reference.batcher --port 8000 --variant-file variant.txt
    python -m runners.reference.batcher --time-variants base base+10

Request-level dynamic batching: a scheduler gathers the waiting requests for up to
`--window-ms` or `--max-batch`, pads them to the longest (tokens in proportion to the
text), runs one forward of a random-weight transformer encoder, then batched decode steps
(in proportion to the longest text; each request is answered after its own): a batch's
time depends on how requests met. `base+PCT` plants an effect of known size (each layer
multiplies one more matrix of PCT% of its weights); `--time-variants` times a batch of
each on the GPU. The protocol of `server.py`; with no CUDA a tiny model runs on the CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from runners.reference.client import TEXTS

if TYPE_CHECKING:
    import torch

FRAME_S, CHUNK, VOCAB, MAX_BODY = 0.08, 8, 4096, 1 << 20  # a decode step is CHUNK frames


@dataclass(frozen=True)
class Config:
    layers: int = 6
    d_model: int = 2048
    heads: int = 16
    tokens_per_char: int = 8
    max_tokens: int = 2048  # a request's tokens at most


TINY = Config(layers=2, d_model=64, heads=4, tokens_per_char=1)  # the CPU smoke test


def parse_variant(variant: str) -> int:
    """`base` or `base+PCT` (1–100): the planted extra work, in percent."""
    kind, _, pct = variant.partition("+")
    if kind != "base" or (pct and not (pct.isdigit() and 1 <= int(pct) <= 100)):
        raise ValueError(f"variant {variant!r}: expected base or base+1..base+100")
    return int(pct) if pct else 0


class Model:
    """Random weights on `device`; `run` is one batch: a forward, then decode steps."""

    def __init__(self, cfg: Config, device: str, extra_pct: int = 0, seed: int = 0) -> None:
        import torch

        self.torch, self.cfg, self.device = torch, cfg, device
        self.dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        g = torch.Generator(device=device).manual_seed(seed)
        d = cfg.d_model

        def w(*shape: int) -> torch.Tensor:
            t = torch.randn(*shape, generator=g, device=device) / math.sqrt(shape[-1])
            return t.to(self.dtype)

        self.embed = w(VOCAB, d)
        self.layers = [
            {"qkv": w(3 * d, d), "o": w(d, d), "up": w(4 * d, d), "down": w(d, 4 * d)}
            for _ in range(cfg.layers)
        ]
        rows = round(extra_pct / 100 * 12 * d)  # a layer's matrices hold 12·d² elements
        for layer in self.layers:  # after the others: base and base+PCT share their weights
            layer["extra"] = w(rows, d) if rows else None

    def _layer(self, x: torch.Tensor, L: dict[str, Any], attend: bool) -> torch.Tensor:
        F = self.torch.nn.functional
        b, s, d = x.shape
        h = F.layer_norm(x, (d,))
        qkv = h @ L["qkv"].T
        if attend:  # every position attends to every other, padding included
            heads = qkv.view(b, s, 3, self.cfg.heads, d // self.cfg.heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(*heads.unbind(0)).transpose(1, 2).reshape(b, s, d)
        else:  # a decode step's single position attends to itself: its value
            a = qkv[..., 2 * d :]
        x = x + a @ L["o"].T
        h = F.layer_norm(x, (d,))
        if L["extra"] is not None:  # the planted work, run eagerly; its result is not used
            _ = h @ L["extra"].T
        return x + F.gelu(h @ L["up"].T) @ L["down"].T

    def encode(self, texts: list[str]) -> torch.Tensor:
        """The texts' tokens (`tokens_per_char` a character), padded to the longest."""
        k, most = self.cfg.tokens_per_char, self.cfg.max_tokens
        rows = [[ord(c) % VOCAB for c in t for _ in range(k)][:most] or [0] for t in texts]
        width = max(map(len, rows))
        padded = [r + [0] * (width - len(r)) for r in rows]
        return self.torch.tensor(padded, dtype=self.torch.long).to(self.device)

    def run(self, texts: list[str], steps: int, jobs: Sequence[Job] = ()) -> None:
        """One batch: the padded forward, then `steps` decode steps of the whole batch,
        each waited for and reported to the batch's `jobs`."""
        with self.torch.inference_mode():
            x = self.embed[self.encode(texts)]
            for L in self.layers:
                x = self._layer(x, L, attend=True)
            x = x[:, -1:, :]
            for step in range(1, steps + 1):
                for L in self.layers:
                    x = self._layer(x, L, attend=False)
                if self.device.startswith("cuda"):
                    self.torch.cuda.synchronize()  # the step's frames are out
                for job in jobs:
                    job.report(step)


class Job:
    def __init__(self, text: str, stream: bool) -> None:
        self.text, self.stream = text, stream
        self.steps = max(2, min(24, len(text) // 12))  # decode steps, CHUNK frames each
        self.out: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def report(self, step: int) -> None:
        """After the batch's decode step `step`: this request's chunk, and its answer."""
        frames = self.steps * CHUNK
        if self.stream and step <= self.steps:
            self.out.put({"frames": CHUNK, "audio_s": round(CHUNK * FRAME_S, 4)})
        if step == self.steps:
            self.out.put(
                {"done": True, "frames": frames, "audio_duration_s": round(frames * FRAME_S, 4)}
            )
            self.out.put(None)


INBOX: queue.Queue[Job] = queue.Queue()
READY = threading.Event()
STATS: dict[str, Any] = {"batches": 0, "sizes": {}}  # GET /stats: how requests met
LOCK = threading.Lock()


def gather(window_s: float, most: int) -> list[Job]:
    """The next batch: the first waiting request and those that come within the window."""
    jobs = [INBOX.get()]
    deadline = time.monotonic() + window_s
    while len(jobs) < most:
        left = deadline - time.monotonic()
        try:
            jobs.append(INBOX.get(timeout=left) if left > 0 else INBOX.get_nowait())
        except queue.Empty:
            break
    return jobs


def serve_batches(model: Model, window_s: float, most: int) -> None:
    """The scheduler: batch after batch, forever (an error ends the server)."""
    while True:
        jobs = gather(window_s, most)
        try:
            model.run([j.text for j in jobs], max(j.steps for j in jobs), jobs)
        except Exception as exc:
            for job in jobs:
                job.out.put({"error": f"{type(exc).__name__}: {exc}"})
                job.out.put(None)
            raise
        with LOCK:
            STATS["batches"] += 1
            STATS["sizes"][len(jobs)] = STATS["sizes"].get(len(jobs), 0) + 1


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 120

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

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
        ok = READY.is_set()
        if ok and self.path == "/stats":
            with LOCK:
                self._json(200, dict(STATS, sizes=dict(STATS["sizes"])))
        elif self.path in ("/health", "/stats"):
            self._json(200 if ok else 503, {"ok": ok})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        raw = self.headers.get("Content-Length", "0")
        if not raw.isdigit() or int(raw) > MAX_BODY or "Transfer-Encoding" in self.headers:
            self.close_connection = True  # what is left of the body must not become a request
            self._json(400, {"error": f"bad request: a Content-Length up to {MAX_BODY}"})
            return
        try:
            req = json.loads(self.rfile.read(int(raw)) or b"{}")
        except (ValueError, RecursionError):
            req = None
        text, stream = (
            (req.get("input"), req.get("stream", False)) if isinstance(req, dict) else (0, 0)
        )
        if self.path != "/v1/audio/speech" or not READY.is_set():
            self._json(404 if READY.is_set() else 503, {"error": "not found or not ready"})
        elif not isinstance(text, str) or not isinstance(stream, bool):
            self._json(400, {"error": 'bad request: expected {"input": text, "stream": bool}'})
        elif not stream:
            INBOX.put(job := Job(text, stream))
            final: dict[str, Any] = {}
            while (item := job.out.get()) is not None:
                final = item
            self._json(500 if "error" in final else 200, final)
        else:
            INBOX.put(job := Job(text, stream))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while (item := job.out.get()) is not None:
                line = json.dumps(item).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")


class Server(ThreadingHTTPServer):
    request_queue_size, daemon_threads = 1024, True  # a burst's connections at once (server.py)


def time_variants(variants: list[str], cfg: Config, device: str, reps: int) -> None:
    """Ground truth of a planted effect: one full batch (the client's first 16 texts) of
    each variant, timed alternately on the device; the median, and its ratio to the first."""
    texts, steps = TEXTS[:16], max(Job(t, False).steps for t in TEXTS[:16])
    models = {v: Model(cfg, device, parse_variant(v)) for v in variants}
    times: dict[str, list[float]] = {v: [] for v in variants}
    for i in range(reps + 3):  # the first three are the warm-up
        for v in variants if i % 2 else variants[::-1]:
            t0 = time.perf_counter()
            models[v].run(texts, steps)
            times[v] += [time.perf_counter() - t0] if i >= 3 else []
    first = statistics.median(times[variants[0]])
    for v, med in ((v, statistics.median(times[v])) for v in variants):
        print(f"{v}: {1000 * med:.2f} ms a batch of 16, {steps} decode steps: {med / first:.4f}×")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--variant", help="base or base+PCT")
    ap.add_argument("--variant-file", help="read the variant from a file of the checkout")
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--window-ms", type=float, default=10.0)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--time-variants", nargs="+", metavar="VARIANT")
    ap.add_argument("--reps", type=int, default=30, help="with --time-variants")
    args = ap.parse_args()
    variant = args.variant
    if variant is None and args.variant_file:
        with open(args.variant_file) as fh:
            variant = fh.read().strip()
    try:
        extra = [parse_variant(v) for v in (args.time_variants or [variant or "base"])]
    except ValueError as exc:
        ap.error(str(exc))
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    device = device if args.device == "auto" else args.device
    cfg = Config() if device == "cuda" else TINY
    if args.time_variants:
        time_variants(args.time_variants, cfg, device, args.reps)
        return
    server = Server(("127.0.0.1", args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()  # 503 until ready
    model = Model(cfg, device, extra[0])
    for i in range(4):  # warm the kernels: batches of the client's texts, full and alone
        model.run(TEXTS[16 * i : 16 * i + 16] if i < 3 else TEXTS[4:5], 2)
    READY.set()
    serve_batches(model, args.window_ms / 1000, args.max_batch)


if __name__ == "__main__":
    main()
