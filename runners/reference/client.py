"""Benchmark client of the GPU reference task, writing SGLang-Omni's `speed_results.json`.

    python -m runners.reference.client --port 8000 --requests 128 --concurrency 16 \
        [--stream] --output-dir OUT

Standard library only. Measures each request as SGLang-Omni's client does (send → last
byte; first audio chunk for streaming; gaps between chunks) and writes the same summary
with the same rounding, plus the measured wall clock (`summary.wall_clock_s`).
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import threading
import time
from typing import Any

TEXTS = [
    f"Sample sentence number {i} for the reference benchmark, {'with a longer tail ' * (i % 5)}end."
    for i in range(4096)
]


def pct(values: list[float], q: float) -> float:
    """numpy.percentile's default (linear interpolation)."""
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def one(port: int, idx: int, stream: bool) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"input": TEXTS[idx], "stream": stream})
    row: dict[str, Any] = {
        "id": f"ref-{idx:05d}",
        "text": TEXTS[idx],
        "is_success": False,
        "error": None,
    }
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/v1/audio/speech", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}")
        first = None
        arrivals: list[float] = []
        final: dict[str, Any] = {}
        if stream:
            while line := resp.readline():
                item = json.loads(line)
                now = time.perf_counter() - t0
                if item.get("done"):
                    final = item
                else:
                    arrivals.append(now)
                    first = first if first is not None else now
        else:
            final = json.loads(resp.read())
        latency = time.perf_counter() - t0
        audio = float(final["audio_duration_s"])
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        row.update(
            is_success=True,
            latency_s=round(latency, 4),
            audio_duration_s=round(audio, 4),
            rtf=round(latency / audio, 4),
            completion_tokens=int(final["frames"]),
            audio_ttfp_s=round(first, 4) if first is not None else None,
            inter_chunk_s=[round(g, 4) for g in gaps] or None,
            audio_chunk_count=len(arrivals) or None,
        )
    except Exception as exc:  # a failed request is a row, as in SGLang-Omni
        row.update(
            latency_s=round(time.perf_counter() - t0, 4),
            audio_duration_s=0.0,
            rtf=None,
            error=f"{type(exc).__name__}: {exc}",
        )
    finally:
        conn.close()
    for key in (
        "engine_latency_s",
        "prompt_build_s",
        "prompt_tokens",
        "output_token_rate",
        "wav_path",
        "text_ttft_s",
        "engine_audio_ttfp_s",
        "engine_text_ttft_s",
        "first_audio_payload_bytes",
        "audio_ttfp_s",
        "inter_chunk_s",
        "audio_chunk_count",
        "completion_tokens",
    ):
        row.setdefault(key, None)
    return row


def summarize(rows: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    ok = [r for r in rows if r["is_success"]]
    out: dict[str, Any] = {
        "total_requests": len(rows),
        "completed_requests": len(ok),
        "failed_requests": len(rows) - len(ok),
        "wall_clock_s": round(wall, 4),
    }
    if not ok:
        return out
    lat = [r["latency_s"] for r in ok]
    rtf = [r["rtf"] for r in ok if r["rtf"]]
    audio = [r["audio_duration_s"] for r in ok if r["audio_duration_s"] > 0]
    out.update(
        {
            "latency_mean_s": round(sum(lat) / len(lat), 3),
            "latency_median_s": round(pct(lat, 50), 3),
            "latency_p95_s": round(pct(lat, 95), 3),
            "latency_p99_s": round(pct(lat, 99), 3),
            "audio_duration_mean_s": round(sum(audio) / len(audio), 3) if audio else 0,
            "rtf_mean": round(sum(rtf) / len(rtf), 4) if rtf else None,
            "throughput_qps": round(len(ok) / wall, 3),
            "audio_throughput_s_per_s": round(sum(audio) / wall, 3),
        }
    )
    ttfp = [r["audio_ttfp_s"] for r in ok if r["audio_ttfp_s"] is not None]
    if ttfp:
        out["audio_ttfp_median_s"] = round(pct(ttfp, 50), 4)
        out["audio_ttfp_p95_s"] = round(pct(ttfp, 95), 4)
    gaps = [g for r in ok for g in (r["inter_chunk_s"] or [])]
    if gaps:
        out["inter_chunk_p95_s"] = round(pct(gaps, 95), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--output-dir", required=True)
    args = ap.parse_args()
    rows: list[dict[str, Any] | None] = [None] * args.requests
    nxt = iter(range(args.requests))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next(nxt, None)
            if i is None:
                return
            rows[i] = one(args.port, i, args.stream)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = [r for r in rows if r is not None]
    os.makedirs(args.output_dir, exist_ok=True)
    doc = {
        "summary": summarize(done, wall),
        "config": {
            "concurrency": args.concurrency,
            "stream": args.stream,
            "max_samples": args.requests,
            "model": "reference-decoder",
        },
        "per_request": done,
    }
    with open(os.path.join(args.output_dir, "speed_results.json"), "w") as fh:
        json.dump(doc, fh)
    failed = sum(1 for r in done if not r["is_success"])
    raise SystemExit(1 if failed == len(done) else 0)


if __name__ == "__main__":
    main()
