"""The dry task's benchmark client (standard library only).

Sends N requests at concurrency C to the dry server over a fixed set of sample ids and
writes SGLang-Omni's `speed_results.json` (`summary`, `config`, `per_request`) as its
`benchmarks/metrics/performance.py` does: per-request times rounded to 4 decimals, zero
and empty values as null, a summary whose throughput is completed requests over the
measured wall clock (3 decimals) and whose percentiles interpolate linearly as
`numpy.percentile` does. The summary also says its `wall_clock_s`.

With `--accuracy` it writes SGLang-Omni's `wer_results.json` instead: each sample is
synthesised, "transcribed" by the server and scored by word error rate.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import math
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_WORDS = (
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "bright",
    "stars",
    "watch",
    "quietly",
    "from",
    "far",
    "above",
    "the",
    "sleeping",
    "harbour",
    "town",
    "where",
    "bakers",
    "rise",
    "early",
    "to",
    "knead",
    "warm",
    "bread",
    "and",
    "fishermen",
    "mend",
    "their",
    "nets",
    "beside",
    "blue",
    "painted",
    "boats",
    "that",
    "rock",
    "gently",
    "on",
    "the",
    "tide",
)


def dataset(n: int) -> list[tuple[str, str]]:
    """`n` fixed (id, text) samples: the same ids and texts on every run and side."""
    out = []
    state = 12345
    for i in range(n):
        state = (state * 1103515245 + 12345) % 2**31
        k = 4 + state % 17  # 4..20 words
        words = [_WORDS[(state // 7 + j * 13) % len(_WORDS)] for j in range(k)]
        text = " ".join(words).capitalize() + "."
        out.append((f"dry-en-{i:05d}", text))
    return out


def percentile(values: list[float], q: float) -> float:
    """`numpy.percentile(values, q)` with its default (linear) method."""
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    t = pos - lo
    a, b = s[lo], s[hi]
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def r4(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _post(host: str, port: int, path: str, doc: dict[str, Any], timeout: float) -> Any:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn.request("POST", path, body=json.dumps(doc), headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


def one_request(
    host: str, port: int, sid: str, text: str, stream: bool, timeout: float
) -> dict[str, Any]:
    """Send one request; the result in SGLang-Omni's per-request shape (unrounded)."""
    row: dict[str, Any] = {
        "id": sid,
        "text": text,
        "is_success": False,
        "latency_s": 0.0,
        "engine_latency_s": None,
        "prompt_build_s": None,
        "audio_duration_s": 0.0,
        "rtf": math.inf,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "output_token_rate": 0.0,
        "audio_ttfp_s": None,
        "text_ttft_s": None,
        "engine_audio_ttfp_s": None,
        "engine_text_ttft_s": None,
        "inter_chunk_s": [],
        "audio_chunk_count": 0,
        "first_audio_payload_bytes": 0,
        "wav_path": None,
        "error": None,
    }
    t0 = time.perf_counter()
    try:
        conn, resp = _post(
            host, port, "/v1/audio/speech", {"input": text, "stream": stream}, timeout
        )
        try:
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
            final = _read_stream(resp, row, t0) if stream else json.loads(resp.read())
        finally:
            conn.close()
        latency = time.perf_counter() - t0
        audio = float(final.get("audio_duration_s") or 0.0)
        row.update(
            is_success=True,
            latency_s=latency,
            engine_latency_s=final.get("engine_latency_s"),
            audio_duration_s=audio,
            rtf=latency / audio if audio > 0 else math.inf,
            prompt_tokens=int(final.get("prompt_tokens") or 0),
            completion_tokens=int(final.get("completion_tokens") or 0),
        )
        if row["completion_tokens"] and latency > 0:
            row["output_token_rate"] = row["completion_tokens"] / latency
    except Exception as exc:  # a failed request is a row, not a crash of the client
        row["latency_s"] = time.perf_counter() - t0
        row["error"] = f"{type(exc).__name__}: {exc}"[:300] or type(exc).__name__
    return row


def _read_stream(resp: http.client.HTTPResponse, row: dict[str, Any], t0: float) -> dict[str, Any]:
    arrivals: list[float] = []
    final: dict[str, Any] = {}
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        ev = json.loads(payload)
        if "chunk" in ev:
            now = time.perf_counter()
            if not arrivals:
                row["audio_ttfp_s"] = now - t0
                row["first_audio_payload_bytes"] = int(ev.get("bytes") or 0)
            arrivals.append(now)
        if ev.get("done"):
            final = ev
    if not final:
        raise RuntimeError("the stream ended without its final event")
    row["inter_chunk_s"] = [b - a for a, b in itertools.pairwise(arrivals)]
    row["audio_chunk_count"] = len(arrivals)
    return final


def to_record(row: dict[str, Any]) -> dict[str, Any]:
    """SGLang-Omni's `_request_result_to_dict`: 4 decimals; zero and empty as null."""
    rtf = row["rtf"]
    return {
        "id": row["id"],
        "text": row["text"],
        "is_success": row["is_success"],
        "latency_s": round(row["latency_s"], 4),
        "engine_latency_s": r4(row["engine_latency_s"]),
        "prompt_build_s": r4(row["prompt_build_s"]),
        "audio_duration_s": round(row["audio_duration_s"], 4),
        "rtf": round(rtf, 4) if rtf < math.inf else None,
        "prompt_tokens": row["prompt_tokens"] or None,
        "completion_tokens": row["completion_tokens"] or None,
        "output_token_rate": round(row["output_token_rate"], 1)
        if row["output_token_rate"] > 0
        else None,
        "audio_ttfp_s": r4(row["audio_ttfp_s"]),
        "text_ttft_s": r4(row["text_ttft_s"]),
        "engine_audio_ttfp_s": r4(row["engine_audio_ttfp_s"]),
        "engine_text_ttft_s": r4(row["engine_text_ttft_s"]),
        "inter_chunk_s": [round(g, 4) for g in row["inter_chunk_s"]] or None,
        "audio_chunk_count": row["audio_chunk_count"] or None,
        "first_audio_payload_bytes": row["first_audio_payload_bytes"] or None,
        "wav_path": row["wav_path"] or None,
        "error": row["error"] or None,
    }


def summarize(rows: list[dict[str, Any]], wall_clock_s: float) -> dict[str, Any]:
    """The summary SGLang-Omni computes (`compute_speed_metrics`), plus the streaming
    aggregates and the wall clock it was computed with."""
    ok = [r for r in rows if r["is_success"]]
    out: dict[str, Any] = {
        "total_requests": len(rows),
        "completed_requests": len(ok),
        "failed_requests": len(rows) - len(ok),
    }
    if not ok:
        out["wall_clock_s"] = round(wall_clock_s, 4)
        return out
    lat = [r["latency_s"] for r in ok]
    rtfs = [r["rtf"] for r in ok if 0 < r["rtf"] < math.inf]
    audio = [r["audio_duration_s"] for r in ok if r["audio_duration_s"] > 0]
    if wall_clock_s > 0:
        throughput = round(len(ok) / wall_clock_s, 3)
    else:
        total = math.fsum(lat)
        throughput = round(len(ok) / total, 3) if total > 0 else 0
    out.update(
        {
            "latency_mean_s": round(mean(lat), 3),
            "latency_median_s": round(median(lat), 3),
            "latency_p95_s": round(percentile(lat, 95), 3),
            "latency_p99_s": round(percentile(lat, 99), 3),
            "audio_duration_mean_s": round(mean(audio), 3) if audio else 0,
            "rtf_mean": round(mean(rtfs), 4) if rtfs else None,
            "rtf_median": round(median(rtfs), 4) if rtfs else None,
            "throughput_qps": throughput,
        }
    )
    if audio and wall_clock_s > 0:
        out["audio_throughput_s_per_s"] = round(math.fsum(audio) / wall_clock_s, 3)
    toks = [r["completion_tokens"] for r in ok if r["completion_tokens"] > 0]
    if toks:
        out["gen_tokens_mean"] = round(mean([float(t) for t in toks]), 0)
        out["gen_tokens_total"] = sum(toks)
    ttfp = [r["audio_ttfp_s"] for r in ok if r["audio_ttfp_s"] is not None]
    if ttfp:
        out["audio_ttfp_mean_s"] = round(mean(ttfp), 4)
        out["audio_ttfp_median_s"] = round(median(ttfp), 4)
        out["audio_ttfp_p95_s"] = round(percentile(ttfp, 95), 4)
        out["audio_ttfp_p99_s"] = round(percentile(ttfp, 99), 4)
    gaps = [g for r in ok for g in r["inter_chunk_s"]]
    if gaps:
        out["inter_chunk_mean_s"] = round(mean(gaps), 4)
        out["inter_chunk_p95_s"] = round(percentile(gaps, 95), 4)
        out["inter_chunk_p99_s"] = round(percentile(gaps, 99), 4)
    out["wall_clock_s"] = round(wall_clock_s, 4)
    return out


def run_speed(args: argparse.Namespace) -> dict[str, Any]:
    samples = dataset(args.requests)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        futures = [
            pool.submit(one_request, args.host, args.port, sid, text, args.stream, args.timeout)
            for sid, text in samples
        ]
        rows = [f.result() for f in futures]
    wall = time.perf_counter() - t0
    return {
        "summary": summarize(rows, wall),
        "config": {
            "model": args.model,
            "base_url": f"http://{args.host}:{args.port}",
            "testset": "dry (built in)",
            "stream": args.stream,
            "max_samples": args.requests,
            "max_concurrency": args.concurrency,
            "warmup": 0,
            "request_rate": None,
        },
        "per_request": [to_record(r) for r in rows],
    }


# ----------------------------------------------------------------------- accuracy


def normalize(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s']", " ", text.lower()).split())


Cell = tuple[int, int, int, int]  # (cost, substitutions, deletions, insertions)


def edit_counts(ref: list[str], hyp: list[str]) -> tuple[int, int, int]:
    """(substitutions, deletions, insertions) of a minimal word alignment."""
    prev: list[Cell] = [(j, 0, 0, j) for j in range(len(hyp) + 1)]
    for i in range(1, len(ref) + 1):
        cur: list[Cell] = [(i, 0, i, 0)]
        for j in range(1, len(hyp) + 1):
            if ref[i - 1] == hyp[j - 1]:
                best = prev[j - 1]
            else:
                sub_, dele, ins = prev[j - 1], prev[j], cur[j - 1]
                best = min(
                    (sub_[0] + 1, sub_[1] + 1, sub_[2], sub_[3]),
                    (dele[0] + 1, dele[1], dele[2] + 1, dele[3]),
                    (ins[0] + 1, ins[1], ins[2], ins[3] + 1),
                )
            cur.append(best)
        prev = cur
    last = prev[-1]
    return last[1], last[2], last[3]


def score(host: str, port: int, sid: str, text: str, timeout: float) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": sid,
        "target_text": text,
        "whisper_text": None,
        "ref_norm": normalize(text),
        "hyp_norm": None,
        "wer": None,
        "substitutions": None,
        "deletions": None,
        "insertions": None,
        "audio_duration_s": None,
        "latency_s": None,
        "is_success": False,
        "error": None,
    }
    t0 = time.perf_counter()
    try:
        conn, resp = _post(host, port, "/v1/audio/speech", {"input": text}, timeout)
        speech = json.loads(resp.read())
        conn.close()
        row["latency_s"] = round(time.perf_counter() - t0, 4)
        row["audio_duration_s"] = round(float(speech.get("audio_duration_s") or 0.0), 4)
        conn, resp = _post(host, port, "/v1/dry/transcribe", {"input": text}, timeout)
        heard = str(json.loads(resp.read()).get("text") or "")
        conn.close()
        ref, hyp = row["ref_norm"].split(), normalize(heard).split()
        s, d, ins = edit_counts(ref, hyp)
        row.update(
            whisper_text=" " + heard,
            hyp_norm=" ".join(hyp),
            wer=round((s + d + ins) / max(1, len(ref)), 4),
            substitutions=s,
            deletions=d,
            insertions=ins,
            is_success=True,
        )
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return row


def run_accuracy(args: argparse.Namespace) -> dict[str, Any]:
    samples = dataset(args.requests)
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        rows = list(
            pool.map(lambda s: score(args.host, args.port, s[0], s[1], args.timeout), samples)
        )
    ok = [r for r in rows if r["is_success"]]
    wers = [float(r["wer"]) for r in ok]
    lat = [float(r["latency_s"]) for r in ok]
    summary: dict[str, Any] = {
        "language": "en",
        "total_samples": len(rows),
        "evaluated": len(ok),
        "skipped": len(rows) - len(ok),
    }
    if ok:
        summary.update(
            {
                "wer_mean": round(mean(wers), 4),
                "wer_median": round(median(wers), 4),
                "wer_p95": round(percentile(wers, 95), 4),
                "wer_mean_pct": round(100 * mean(wers), 2),
                "latency_mean_s": round(mean(lat), 3),
            }
        )
    return {
        "summary": summary,
        "config": {
            "model_path": args.model,
            "testset": "dry (built in)",
            "max_samples": args.requests,
        },
        "per_sample": rows,
    }


def _server_module() -> Any:
    """The sibling `server.py` (its settings), loaded by path: this file runs as a script."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")
    spec = importlib.util.spec_from_file_location("rsi_dry_server", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="rsi-runner's dry benchmark client")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--requests", type=int, required=True)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--accuracy", action="store_true", help="write wer_results.json instead")
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--model", default="dry-tts")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    ap.add_argument("--config", help="the server's JSON settings (for client_exit)")
    ap.add_argument("--round", type=int)
    args = ap.parse_args(argv)

    srv = _server_module()
    code = srv.knob(srv.load_config(args.config), "client_exit", args.round)
    if code is not None:
        print(f"dry client: exiting with code {code} on purpose", file=sys.stderr)
        return int(code)
    doc = run_accuracy(args) if args.accuracy else run_speed(args)
    os.makedirs(args.output_dir, exist_ok=True)
    name = "wer_results.json" if args.accuracy else "speed_results.json"
    path = os.path.join(args.output_dir, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    s = doc["summary"]
    print(f"dry client: wrote {path}: {json.dumps(s)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
