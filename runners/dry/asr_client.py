"""The dry task's ASR benchmark client (standard library only).

Transcribes N fixed samples on the dry server's `/v1/audio/transcriptions` (the text
stands for the clip) and writes the files SGLang-Omni's ASR scripts write, in their
shapes (sgl-project/sglang-omni):

- `--shape seedtts`: `benchmarks/eval/benchmark_asr_seedtts.py` @ 070fc3b5 — the sweep
  JSON (`--output`: `schema_version` 2, `config`, `results[]` with `per_repeat[]`) and
  `--save-raw-dir` rows `conc<C>_rep1.jsonl` (`benchmarks/tasks/asr.py` @ 0c594cf8,
  `build_asr_eval_results`' `per_sample`).
- `--shape td`: `benchmarks/eval/benchmark_asr_transcribe_diarize.py` @ e1fefa76 —
  `transcribe_diarize_asr_results.json` (`outputs`: `asdict(RequestResult)`),
  `transcribe_diarize_speed_results.json` and `transcribe_diarize_results.json`
  (per-sample `cer_no_spk`); it exits 1 when a request failed, as that script does.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import the runner's package by path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runners.dry import client as dry

AUDIO_S_PER_CHAR = 0.065  # the dry server's speech rate: the "clip" of a text


@dataclass
class Result:
    """`benchmarks/benchmarker/data.py`'s RequestResult (the fields an ASR run sets)."""

    request_id: str = ""
    text: str = ""
    is_success: bool = False
    latency_s: float = 0.0
    audio_duration_s: float = 0.0
    rtf: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    engine_time_s: float = 0.0
    tok_per_s: float = 0.0
    wav_path: str = ""
    error: str = ""
    audio_ttfp_s: float | None = None
    inter_chunk_s: list[float] = field(default_factory=list)
    text_ttft_s: float | None = None
    audio_chunk_count: int = 0
    first_audio_payload_bytes: int = 0


def transcribe(host: str, port: int, sid: str, text: str, stream: bool, timeout: float) -> Result:
    r = Result(request_id=sid, audio_duration_s=round(len(text) * AUDIO_S_PER_CHAR, 4))
    t0 = time.perf_counter()
    try:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        body = json.dumps({"input": text, "stream": stream})
        conn.request("POST", "/v1/audio/transcriptions", body=body)
        resp = conn.getresponse()
        try:
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
            r.text = _stream(resp, r, t0) if stream else str(json.loads(resp.read())["text"])
        finally:
            conn.close()
        r.is_success = True
    except Exception as exc:  # a failed request is a row, not a crash of the client
        r.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        r.latency_s = time.perf_counter() - t0
    if r.is_success and r.audio_duration_s > 0:
        r.rtf = r.latency_s / r.audio_duration_s
    return r


def _stream(resp: http.client.HTTPResponse, r: Result, t0: float) -> str:
    """`_consume_transcription_stream`: TTFT at the first delta, gaps between deltas."""
    final: str | None = None
    last: float | None = None
    done = False
    while line := resp.readline():
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        payload = line[6:]
        if payload == b"[DONE]":
            done = True
            continue
        ev = json.loads(payload)
        if ev.get("type") == "transcript.text.delta":
            now = time.perf_counter()
            if r.text_ttft_s is None:
                r.text_ttft_s = now - t0
            elif last is not None:
                r.inter_chunk_s.append(now - last)
            last = now
        elif ev.get("type") == "transcript.text.done":
            final = ev.get("text")
    if not isinstance(final, str) or not done:
        raise ValueError("Stream ended without transcript.text.done and [DONE]")
    return final.strip()


def run_pass(
    args: argparse.Namespace, samples: list[tuple[str, str]]
) -> tuple[list[Result], float]:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        results = list(
            pool.map(
                lambda s: transcribe(args.host, args.port, s[0], s[1], args.stream, args.timeout),
                samples,
            )
        )
    return results, time.perf_counter() - t0


def _pct_stats(values: list[float], prefix: str) -> dict[str, float]:
    if not values:
        return {}
    return {
        f"{prefix}_mean_s": round(dry.mean(values), 4),
        f"{prefix}_median_s": round(dry.median(values), 4),
        f"{prefix}_p95_s": round(dry.percentile(values, 95), 4),
        f"{prefix}_p99_s": round(dry.percentile(values, 99), 4),
    }


def speed_metrics(results: list[Result], wall: float) -> dict[str, Any]:
    """`compute_speed_metrics(outputs, wall_clock_s)` (the keys an ASR run fills)."""
    ok = [r for r in results if r.is_success]
    out: dict[str, Any] = {
        "total_requests": len(results),
        "completed_requests": len(ok),
        "failed_requests": len(results) - len(ok),
    }
    if not ok:
        return out
    lat = [r.latency_s for r in ok]
    rtfs = [r.rtf for r in ok if 0 < r.rtf < math.inf]
    audio = [r.audio_duration_s for r in ok if r.audio_duration_s > 0]
    out.update(
        latency_mean_s=round(dry.mean(lat), 3),
        latency_median_s=round(dry.median(lat), 3),
        latency_p95_s=round(dry.percentile(lat, 95), 3),
        latency_p99_s=round(dry.percentile(lat, 99), 3),
        audio_duration_mean_s=round(dry.mean(audio), 3) if audio else 0,
        rtf_mean=round(dry.mean(rtfs), 4) if rtfs else None,
        rtf_median=round(dry.median(rtfs), 4) if rtfs else None,
        rtf_p95=round(dry.percentile(rtfs, 95), 4) if rtfs else None,
        rtf_p99=round(dry.percentile(rtfs, 99), 4) if rtfs else None,
        throughput_qps=round(len(ok) / wall, 3),
    )
    if audio:
        out["audio_throughput_s_per_s"] = round(math.fsum(audio) / wall, 3)
    out.update(_pct_stats([r.text_ttft_s for r in ok if r.text_ttft_s is not None], "text_ttft"))
    gaps = [g for r in ok for g in r.inter_chunk_s]
    if gaps:
        out.update(
            inter_chunk_mean_s=round(dry.mean(gaps), 4),
            inter_chunk_p95_s=round(dry.percentile(gaps, 95), 4),
            inter_chunk_p99_s=round(dry.percentile(gaps, 99), 4),
        )
    return out


# ------------------------------------------------------------------ --shape seedtts


def seedtts_rows(samples: list[tuple[str, str]], results: list[Result]) -> list[dict[str, Any]]:
    """`build_asr_eval_results`' per_sample rows, with jiwer's word counts."""
    rows = []
    for (sid, ref), r in zip(samples, results, strict=True):
        row: dict[str, Any] = {
            "id": sid,
            "is_success": False,
            "wer": None,
            "ref_text": ref,
            "hyp_text": "",
            "ref_norm": "",
            "hyp_norm": "",
            "audio_duration_s": 0.0,
            "latency_s": 0.0,
            "text_ttft_s": r.text_ttft_s,
            "inter_chunk_s": r.inter_chunk_s,
            "error": r.error or "No transcription",
            "_edits": 0,
        }
        if r.is_success:
            ref_norm, hyp_norm = dry.normalize(ref), dry.normalize(r.text)
            s, d, i = dry.edit_counts(ref_norm.split(), hyp_norm.split())
            row.update(
                is_success=True,
                wer=(s + d + i) / len(ref_norm.split()),
                hyp_text=r.text,
                ref_norm=ref_norm,
                hyp_norm=hyp_norm,
                audio_duration_s=r.audio_duration_s,
                latency_s=r.latency_s,
                error="",
                _edits=s + d + i,
            )
        rows.append(row)
    return rows


def write_seedtts(args: argparse.Namespace, samples: list[tuple[str, str]]) -> int:
    if args.warmup:
        run_pass(args, samples)  # one discarded pass, as --warmup does
    results, wall = run_pass(args, samples)
    rows = seedtts_rows(samples, results)
    ok = [r for r in rows if r["is_success"]]
    speed = speed_metrics(results, wall)
    rep: dict[str, Any] = {
        "concurrency": args.concurrency,
        "repeat": 1,
        "evaluated": len(ok),
        "total": len(rows),
        "skipped": len(rows) - len(ok),
        "corpus_wer": (
            sum(r["_edits"] for r in ok) / sum(len(r["ref_norm"].split()) for r in ok)
            if ok
            else None
        ),
        "per_sample_wer_max": max(r["wer"] for r in ok) if ok else None,
        "wall_clock_s": wall,
        "throughput_samples_per_s": len(ok) / wall,
        "rtfx": speed.get("audio_throughput_s_per_s", 0.0),
    }
    lat = [r["latency_s"] for r in ok]
    rtf = [r["latency_s"] / r["audio_duration_s"] for r in ok]
    rep.update(
        latency_mean_s=dry.mean(lat) if ok else None,
        latency_median_s=dry.median(lat) if ok else None,
        latency_p95_s=dry.percentile(lat, 95) if ok else None,
        latency_p99_s=dry.percentile(lat, 99) if ok else None,
        rtf_mean=dry.mean(rtf) if ok else None,
        rtf_p95=speed.get("rtf_p95"),
        worker={},
    )
    rep.update({k: v for k, v in speed.items() if k.startswith(("text_ttft_", "inter_chunk_"))})
    os.makedirs(args.save_raw_dir, exist_ok=True)
    raw = os.path.join(args.save_raw_dir, f"conc{args.concurrency}_rep1.jsonl")
    with open(raw, "w", encoding="utf-8") as f:
        for row in rows:
            row.pop("_edits")
            f.write(json.dumps(row) + "\n")
    doc = {
        "schema_version": 2,
        "provenance": {"model": {"id": args.model}},
        "config": {
            "model_path": args.model,
            "num_samples": len(samples),
            "concurrencies": [args.concurrency],
            "repeats": 1,
            "warmup": args.warmup,
            "stream": args.stream,
        },
        "results": [
            {"concurrency": args.concurrency, "repeats": 1, "per_repeat": [rep]},
        ],
    }
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    print(f"dry asr client: wrote {args.output} and {raw}")
    return 0


# ----------------------------------------------------------------------- --shape td


def write_td(args: argparse.Namespace, samples: list[tuple[str, str]]) -> int:
    for sid, text in samples[: args.warmup]:
        transcribe(args.host, args.port, sid, text, args.stream, args.timeout)
    results, wall = run_pass(args, samples)
    config = {
        "dataset": "dry",
        "model_path": args.model,
        "concurrency": args.concurrency,
        "warmup": args.warmup,
        "max_samples": args.max_samples,
        "wall_clock_s": wall,
        "timing_scope": "asr_requests_only",
    }
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    asr = {
        "schema_version": 1,
        "config": config,
        "samples": [{"sample_id": s, "audio_path": "", "expected_text": t} for s, t in samples],
        "outputs": [asdict(r) for r in results],
    }
    speed = speed_metrics(results, wall)
    per = []
    for (sid, ref), r in zip(samples, results, strict=True):
        ref_c = list(dry.normalize(ref).replace(" ", ""))
        hyp_c = list(dry.normalize(r.text).replace(" ", ""))
        cer = sum(dry.edit_counts(ref_c, hyp_c)) / len(ref_c) if r.is_success else None
        per.append(
            {
                "id": sid,
                "result_text": r.text if r.is_success else "",
                "latency_s": r.latency_s,
                "audio_duration_s": r.audio_duration_s,
                "error": r.error or None,
                "cer_no_spk": cer,
                "cer_valid": True if r.is_success else None,
            }
        )
    n_ok = sum(r.is_success for r in results)
    summary = {"total_samples": len(samples), "evaluated": n_ok, "skipped": len(samples) - n_ok}
    for name, doc in (
        ("transcribe_diarize_asr_results.json", asr),
        (
            "transcribe_diarize_speed_results.json",
            {"schema_version": 1, "config": config, "speed": speed},
        ),
        (
            "transcribe_diarize_results.json",
            {"config": config, "summary": summary, "speed": speed, "per_sample": per},
        ),
    ):
        (out / name).write_text(json.dumps(doc, indent=2), encoding="utf-8")
    print(f"dry asr client: wrote {out}: {json.dumps(speed)}")
    failed = len(results) - n_ok
    if failed:
        print(f"Evaluation failed: {failed} request(s) failed.", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="rsi-runner's dry ASR benchmark client")
    ap.add_argument("--shape", choices=("seedtts", "td"), required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--max-samples", type=int, required=True)
    ap.add_argument("--concurrency", "--concurrencies", type=int, default=1)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument(
        "--warmup",
        nargs="?",
        type=int,
        const=1,
        default=0,
        help="seedtts: a flag (one discarded pass); td: a number of requests",
    )
    ap.add_argument("--output", help="seedtts: the sweep JSON")
    ap.add_argument("--save-raw-dir", help="seedtts: the per-request JSONL folder")
    ap.add_argument("--output-dir", help="td: the folder of its three files")
    ap.add_argument("--model", default="dry-asr")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    ap.add_argument("--config", help="the server's JSON settings (for client_exit)")
    ap.add_argument("--round", type=int)
    args = ap.parse_args(argv)
    srv = dry._server_module()
    code = srv.knob(srv.load_config(args.config), "client_exit", args.round)
    if code is not None:
        print(f"dry asr client: exiting with code {code} on purpose", file=sys.stderr)
        return int(code)
    samples = dry.dataset(args.max_samples)
    if args.shape == "seedtts":
        if not args.output or not args.save_raw_dir:
            ap.error("--shape seedtts needs --output and --save-raw-dir")
        return write_seedtts(args, samples)
    if not args.output_dir:
        ap.error("--shape td needs --output-dir")
    return write_td(args, samples)


if __name__ == "__main__":
    sys.exit(main())
