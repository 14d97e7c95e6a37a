"""The dry task's server: a tiny CPU "TTS" over HTTP (standard library only).

It stands in for the model only. The runner treats it like any server: starts it,
health-checks it, samples around it, benchmarks it with a client, stops it. A request
"synthesises" its text by sleeping in proportion to the text's length (with a little
jitter) and answers with the audio it would have made: its length depends only on the
text, so base and head make the same audio and only the speed may differ.

    GET  /health                 200 once listening
    POST /v1/audio/speech        {"input": text, "stream": bool}
         non-streaming: one JSON answer; streaming: `data: {...}` lines, one per chunk
    POST /v1/dry/transcribe      {"input": text} → {"text": ...} (the accuracy stand-in)
    POST /v1/audio/transcriptions {"input": text, "stream": bool}: a CPU "ASR" (the text
         stands for the clip): works like speech, answers {"text": ...}, or streams
         `transcript.text.delta` events, `transcript.text.done` and `[DONE]` as
         SGLang-Omni's SSE transcription does

Behaviour comes from a JSON file (`--config`, usually `rsi-dry.json` in the worktree, so
base and head can differ by commit), then `RSI_DRY_<KEY>` variables, then flags:

    speed         1.0    work per request is divided by this (head faster: > 1)
    char_ms       1.0    milliseconds of work per character at speed 1
    jitter        0.03   log-normal spread of the work per request
    startup_s     0.0    sleep before listening
    fail_start    false  exit with code 3 at start-up
    hang_start    false  never start listening
    crash_after   null   exit abruptly (code 70) when request number N arrives
    hang_after    null   requests from number N on never finish
    wer_noise     0.0    the transcriber drops a word with this probability
    fail_rounds   null   list of rounds the failure knobs apply to (all if null)
    cold_requests 0      the first N requests a server process serves are slow...
    cold_factor   1.0    ...by this factor (caches filling, kernels compiling)
    batch         0      batch non-streamed speech like a serving engine: up to this many
                         requests a step (0: each request on its own)
    batch_window_ms 5.0  a step waits this long for more requests to join
    batch_cost    0.15   each request past the first adds this share to a step's time
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {
    "speed": 1.0,
    "char_ms": 1.0,
    "jitter": 0.03,
    "startup_s": 0.0,
    "fail_start": False,
    "hang_start": False,
    "crash_after": None,
    "hang_after": None,
    "wer_noise": 0.0,
    "fail_rounds": None,
    "client_exit": None,
    "cold_requests": 0,
    "cold_factor": 1.0,
    "batch": 0,
    "batch_window_ms": 5.0,
    "batch_cost": 0.15,
}
AUDIO_S_PER_CHAR = 0.065  # about 15 characters of speech a second
CHUNK_AUDIO_S = 0.48  # audio seconds per streamed chunk
SAMPLE_RATE = 24000


def load_config(path: str | None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Defaults, then the JSON file (if it exists), then RSI_DRY_* variables, then flags."""
    cfg = dict(DEFAULTS)
    if path and os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if isinstance(doc, dict):
            cfg.update(doc)
    for key in DEFAULTS:
        raw = os.environ.get(f"RSI_DRY_{key.upper()}")
        if raw is not None:
            try:
                cfg[key] = json.loads(raw)
            except ValueError:
                cfg[key] = raw
    for k, v in (overrides or {}).items():
        if v is not None:
            cfg[k] = v
    return cfg


def knob(cfg: dict[str, Any], key: str, rnd: int | None) -> Any:
    """A failure knob's value, or None when `fail_rounds` excludes this round."""
    rounds = cfg.get("fail_rounds")
    if rounds is not None and rnd is not None and rnd not in rounds:
        return None
    v = cfg.get(key)
    return v if v not in (False, None) else None


class State:
    def __init__(self, cfg: dict[str, Any], rnd: int | None) -> None:
        self.cfg = cfg
        self.rnd = rnd
        self.count = 0
        self.lock = threading.Lock()
        self.rng = random.Random()
        self.crash_after = knob(cfg, "crash_after", rnd)
        self.hang_after = knob(cfg, "hang_after", rnd)
        self.queue: list[tuple[float, threading.Event, list[int]]] | None = None
        self.arrived = threading.Event()

    def batched(self, work: float) -> int:
        """Wait for this request's step: requests that arrive within the window (up to
        `batch`) run together, the step as long as its longest request's work plus
        `batch_cost` of it for each other one; so throughput depends on how requests
        happen to meet, as with a serving engine's own batching. Returns the step's size."""
        done = threading.Event()
        size = [0]
        with self.lock:
            if self.queue is None:
                self.queue = []
                threading.Thread(target=self._steps, daemon=True).start()
            self.queue.append((work, done, size))
            self.arrived.set()
        done.wait()
        return size[0]

    def _steps(self) -> None:
        most = int(self.cfg["batch"])
        window = float(self.cfg["batch_window_ms"]) / 1000.0
        cost = float(self.cfg["batch_cost"])
        while True:
            self.arrived.wait()
            time.sleep(window)
            with self.lock:
                assert self.queue is not None
                step, self.queue = self.queue[:most], self.queue[most:]
                if not self.queue:
                    self.arrived.clear()
            if step:
                time.sleep(max(w for w, _, _ in step) * (1.0 + cost * (len(step) - 1)))
                for _, ev, size in step:
                    size[0] = len(step)
                    ev.set()

    def admit(self) -> int:
        with self.lock:
            self.count += 1
            return self.count

    def jittered(self, seconds: float, spread: float = 0.2) -> float:
        """A streamed chunk's pacing varies more than a request's total work."""
        with self.lock:
            return seconds * math.exp(self.rng.gauss(0.0, spread))

    def work_s(self, text: str, number: int = 0) -> float:
        speed = float(self.cfg["speed"]) or 1.0
        with self.lock:
            noise = math.exp(self.rng.gauss(0.0, float(self.cfg["jitter"])))
        if 0 < number <= int(self.cfg["cold_requests"] or 0):
            noise *= float(self.cfg["cold_factor"])
        return len(text) * float(self.cfg["char_ms"]) / 1000.0 / speed * noise


def audio_seconds(text: str) -> float:
    return round(len(text) * AUDIO_S_PER_CHAR, 4)


class Handler(BaseHTTPRequestHandler):
    server_version = "rsi-dry/1"
    state: State  # set on the class by main()
    number = 0  # this request's number in the server's life

    def log_message(self, format: str, *args: Any) -> None:
        return  # one line per request would swamp the server log

    def _json(self, code: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/health":
            self._json(200, {"status": "ok"})
        else:
            self._json(404, {"error": "not found"})

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        doc = json.loads(self.rfile.read(n) or b"{}")
        return doc if isinstance(doc, dict) else {}

    def do_POST(self) -> None:
        st = self.state
        number = self.number = st.admit()
        if st.crash_after is not None and number >= int(st.crash_after):
            print(f"dry server: crashing on purpose at request {number}", file=sys.stderr)
            sys.stderr.flush()
            os._exit(70)
        if st.hang_after is not None and number >= int(st.hang_after):
            print(f"dry server: hanging on purpose at request {number}", file=sys.stderr)
            sys.stderr.flush()
            threading.Event().wait()
        try:
            doc = self._body()
        except ValueError:
            self._json(400, {"error": "body is not JSON"})
            return
        text = str(doc.get("input") or "")
        if self.path == "/v1/dry/transcribe":
            self._transcribe(text)
        elif self.path == "/v1/audio/transcriptions":
            self._asr(text, bool(doc.get("stream")))
        elif self.path == "/v1/audio/speech":
            if doc.get("stream"):
                self._stream(text)
            else:
                self._speech(text)
        else:
            self._json(404, {"error": "not found"})

    def _speech(self, text: str) -> None:
        t0 = time.perf_counter()
        work = self.state.work_s(text, self.number)
        step: dict[str, int] = {}
        if int(self.state.cfg["batch"] or 0) > 0:
            step["batch_step"] = self.state.batched(work)
        else:
            time.sleep(work)
        audio = audio_seconds(text)
        self._json(
            200,
            {
                **step,
                "audio_duration_s": audio,
                "audio_bytes": int(audio * SAMPLE_RATE * 2),
                "engine_latency_s": round(time.perf_counter() - t0, 6),
                "prompt_tokens": len(text.split()),
                "completion_tokens": int(audio * 25),
            },
        )

    def _stream(self, text: str) -> None:
        t0 = time.perf_counter()
        work = self.state.work_s(text, self.number)
        audio = audio_seconds(text)
        chunks = max(1, math.ceil(audio / CHUNK_AUDIO_S))
        # The first chunk needs a fifth of the work (the prompt); the rest is even.
        first = work * 0.2
        rest = (work - first) / chunks
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        time.sleep(first)
        left = audio
        for i in range(chunks):
            if i:
                time.sleep(self.state.jittered(rest))
            a = min(CHUNK_AUDIO_S, left)
            left -= a
            ev = {"chunk": i, "audio_s": round(a, 4), "bytes": int(a * SAMPLE_RATE * 2)}
            self.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
            self.wfile.flush()
        time.sleep(rest)
        done = {
            "done": True,
            "audio_duration_s": audio,
            "engine_latency_s": round(time.perf_counter() - t0, 6),
            "prompt_tokens": len(text.split()),
            "completion_tokens": int(audio * 25),
        }
        self.wfile.write(f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()

    def _heard(self, text: str) -> str:
        noise = float(self.state.cfg.get("wer_noise") or 0.0)
        words = text.split()
        rng = random.Random(text)  # the same text is misheard the same way
        return " ".join([w for w in words if rng.random() >= noise] if noise > 0 else words)

    def _transcribe(self, text: str) -> None:
        self._json(200, {"text": self._heard(text)})

    def _asr(self, text: str, stream: bool) -> None:
        work = self.state.work_s(text, self.number)
        heard = self._heard(text)
        if not stream:
            time.sleep(work)
            self._json(200, {"text": heard})
            return
        words = heard.split() or [""]
        first = work * 0.3  # the audio is encoded before the first token
        rest = (work - first) / len(words)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        time.sleep(first)
        for i, w in enumerate(words):
            if i:
                time.sleep(self.state.jittered(rest))
            ev = {"type": "transcript.text.delta", "delta": (" " if i else "") + w}
            self.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
            self.wfile.flush()
        done = {"type": "transcript.text.done", "text": heard}
        self.wfile.write(f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True


def _gpumem() -> Any:
    """runners/dry/gpumem.py, imported or (run as a script, the runner's way) loaded from
    beside this file: only a server given `--gpu-stage` needs it."""
    try:
        from runners.dry import gpumem
    except ImportError:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "gpumem", Path(__file__).with_name("gpumem.py")
        )
        assert spec is not None
        assert spec.loader is not None
        gpumem = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gpumem)
    return gpumem


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="rsi-runner's dry CPU stand-in for a TTS server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--config", help="JSON file of settings (missing: defaults)")
    ap.add_argument("--round", type=int, help="the runner's round (for fail_rounds)")
    ap.add_argument("--side", help="base or head (logged only)")
    ap.add_argument("--speed", type=float, help="override the speed (head faster: > 1)")
    ap.add_argument(
        "--gpu-stage",
        action="append",
        default=[],
        metavar="NAME=FRACTION:BASIS:MIB",
        help="take GPU memory on the simulated GPU as a serving stage does (gpumem.py)",
    )
    args = ap.parse_args(argv)
    cfg = load_config(args.config, {"speed": args.speed})
    rnd = args.round
    cuda = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    print(
        f"dry server: side={args.side} round={rnd} config={json.dumps(cfg, sort_keys=True)} "
        f"cuda={json.dumps(cuda, sort_keys=True)}",
        file=sys.stderr,
    )
    if knob(cfg, "fail_start", rnd):
        print("dry server: failing at start-up on purpose", file=sys.stderr)
        return 3
    if float(cfg.get("startup_s") or 0) > 0:
        time.sleep(float(cfg["startup_s"]))
    if knob(cfg, "hang_start", rnd):
        print("dry server: hanging at start-up on purpose", file=sys.stderr)
        sys.stderr.flush()
        threading.Event().wait()
    held = None
    if args.gpu_stage:
        gpumem = _gpumem()
        try:
            held = gpumem.take(args.gpu_stage, f"{os.getpid()}-{args.port}")
        except (gpumem.OutOfMemory, ValueError) as exc:
            print(
                f"dry server: cannot take its GPU memory (CUDA out of memory): {exc}",
                file=sys.stderr,
            )
            return 4
    for line in held[1] if held else []:
        print(f"dry server: {line}", file=sys.stderr)
    Handler.state = State(cfg, rnd)
    httpd = Server((args.host, args.port), Handler)
    print(f"dry server: listening on http://{args.host}:{args.port}", file=sys.stderr)
    sys.stderr.flush()
    try:
        httpd.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
