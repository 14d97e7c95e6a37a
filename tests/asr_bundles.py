"""Bundles whose runs hold SGLang-Omni's ASR benchmark outputs, written in the exact
shapes the upstream scripts write (sgl-project/sglang-omni):

- `benchmarks/eval/benchmark_asr_seedtts.py` @ 070fc3b5bda3f134bc8ab08373722e3e7131b681
  (`_run_repeat`, `_aggregate`, `main`'s payload, `_save_raw_per_sample`) with the rows of
  `benchmarks/tasks/asr.py` @ 0c594cf88be05037f0994c093aa0623a087d943c
  (`build_asr_eval_results`: `per_sample` keys and `speed` keys) and the corpus WER of
  `benchmarks/metrics/wer.py` @ 01782f8f471cc9c63b030b6743a800ca546a609c
  (`calculate_wer_metrics`, `calculate_asr_speed_metrics`, `SampleOutput` defaults).
- `benchmarks/eval/benchmark_asr_transcribe_diarize.py` @
  e1fefa7688f640253b25422a32d3e9f1af3eec03 (`_save_asr_results`, `_build_speed_payload`),
  `benchmarks/tasks/transcribe_diarize.py` @ 0e15ffdd4f64b74ec62bc997d17e62e5266c5498
  (`build_evaluation_payload`, `PerSampleRecord`), `asdict(RequestResult)` of
  `benchmarks/benchmarker/data.py` (the streaming-era fields) and the rounding of
  `compute_speed_metrics` in `benchmarks/metrics/performance.py`.

Figures are synthetic (no published raw rows exist); everything derived from them is
computed the way those files compute it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evidence.synth import BASE_SHA, HEAD_SHA, default_environment

WORDS = [
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
]


@dataclass
class AsrSpec:
    kind: str = "seedtts"  # or "td" (MOSS-Transcribe-Diarize)
    modes: tuple[str, ...] = ("non-streaming", "streaming")
    concurrency: int = 8
    rounds: int = 3
    requests: int = 120
    head_speedup: float = 0.25  # head latency = base / (1 + speedup)
    head_wer_add: float = 0.0  # extra words dropped by head, as a probability
    failed: int = 0  # requests that fail on every run (HTTP 500)
    seed: int = 1


def _sample_texts(n: int, rng: np.random.Generator) -> list[tuple[str, str]]:
    out = []
    for i in range(n):
        k = int(rng.integers(5, 14))
        words = [WORDS[int(j)] for j in rng.integers(0, len(WORDS), k)]
        out.append((f"seedtts-en-{i:05d}", " ".join(words).capitalize() + "."))
    return out


def _edits(ref: list[str], hyp: list[str]) -> int:
    prev = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        cur = [i]
        for j in range(1, len(hyp) + 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ref[i - 1] != hyp[j - 1])))
        prev = cur
    return prev[-1]


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(float(x), nd)


@dataclass
class _Req:
    """One request as `RequestResult` holds it, plus the scoring of `apply_wer`."""

    sid: str
    ref_text: str
    hyp_text: str
    ok: bool
    latency_s: float
    audio_s: float
    ttft_s: float | None
    gaps: list[float]
    error: str


def _requests(spec: AsrSpec, side: str, mode: str, rng: np.random.Generator) -> list[_Req]:
    samples = _sample_texts(spec.requests, np.random.default_rng(spec.seed))
    scale = 1.0 / (1.0 + spec.head_speedup) if side == "head" else 1.0
    drop = 0.01 + (spec.head_wer_add if side == "head" else 0.0)
    out = []
    for i, (sid, text) in enumerate(samples):
        audio = 0.35 * len(text.split()) + 0.4
        if i < spec.failed:
            out.append(_Req(sid, text, "", False, 0.002, audio, None, [], "HTTP 500: busy"))
            continue
        lat = float(0.05 * audio * scale * rng.lognormal(0.0, 0.12))
        words = [w for w in text.rstrip(".").lower().split() if rng.random() >= drop]
        ttft, gaps = None, []
        if mode == "streaming":
            ttft = lat * 0.3
            n = max(1, len(words) - 1)
            gaps = [(lat - ttft) / (n + 1)] * n
        out.append(_Req(sid, text, " ".join(words), True, lat, audio, ttft, gaps, ""))
    return out


def _wall(reqs: list[_Req], concurrency: int) -> float:
    lat = [r.latency_s for r in reqs]
    return max(sum(lat) / concurrency * 1.08, max(lat) * 1.02)


# ---------------------------------------------------------------- benchmark_asr_seedtts


def seedtts_rows(reqs: list[_Req]) -> list[dict[str, Any]]:
    """`build_asr_eval_results`' per_sample rows (failed: `SampleOutput` defaults)."""
    rows = []
    for r in reqs:
        ref_norm = r.ref_text.rstrip(".").lower() if r.ok else ""
        words = ref_norm.split()
        rows.append(
            {
                "id": r.sid,
                "is_success": r.ok,
                "wer": _edits(words, r.hyp_text.split()) / len(words) if r.ok else None,
                "ref_text": r.ref_text,
                "hyp_text": r.hyp_text,
                "ref_norm": ref_norm,
                "hyp_norm": r.hyp_text if r.ok else "",
                "audio_duration_s": r.audio_s if r.ok else 0.0,
                "latency_s": r.latency_s if r.ok else 0.0,
                "text_ttft_s": r.ttft_s,
                "inter_chunk_s": r.gaps,
                "error": r.error,
            }
        )
    return rows


def seedtts_repeat(
    rows: list[dict[str, Any]], reqs: list[_Req], wall: float, c: int
) -> dict[str, Any]:
    """`_run_repeat`'s result for one repeat (`summary` and `speed` of the rows)."""
    ok = [r for r in rows if r["is_success"]]
    lat = np.array([r["latency_s"] for r in ok])
    rtf = np.array([r["latency_s"] / r["audio_duration_s"] for r in ok])
    errs = sum(round(r["wer"] * len(r["ref_norm"].split())) for r in ok)
    words = sum(len(r["ref_norm"].split()) for r in ok)
    audio = sum(q.audio_s for q in reqs if q.ok)
    out: dict[str, Any] = {
        "concurrency": c,
        "repeat": 1,
        "evaluated": len(ok),
        "total": len(rows),
        "skipped": len(rows) - len(ok),
        "corpus_wer": errs / words,
        "per_sample_wer_max": max(r["wer"] for r in ok),
        "wall_clock_s": wall,
        "throughput_samples_per_s": len(ok) / wall,
        "rtfx": round(audio / wall, 3),
        "latency_mean_s": float(np.mean(lat)),
        "latency_median_s": float(np.median(lat)),
        "latency_p95_s": float(np.percentile(lat, 95)),
        "latency_p99_s": float(np.percentile(lat, 99)),
        "rtf_mean": float(np.mean(rtf)),
        "rtf_p95": round(float(np.percentile(rtf, 95)), 4),
        "worker": {},
        "resources": {"available": False, "error": "resource monitoring disabled"},
    }
    ttft = [q.ttft_s for q in reqs if q.ok and q.ttft_s is not None]
    gaps = [g for q in reqs if q.ok for g in q.gaps]
    if ttft:
        out["text_ttft_mean_s"] = round(float(np.mean(ttft)), 4)
        out["text_ttft_median_s"] = round(float(np.median(ttft)), 4)
        out["text_ttft_p95_s"] = round(float(np.percentile(ttft, 95)), 4)
        out["text_ttft_p99_s"] = round(float(np.percentile(ttft, 99)), 4)
    if gaps:
        out["inter_chunk_mean_s"] = round(float(np.mean(gaps)), 4)
        out["inter_chunk_p95_s"] = round(float(np.percentile(gaps, 95)), 4)
        out["inter_chunk_p99_s"] = round(float(np.percentile(gaps, 99)), 4)
    return out


def seedtts_sweep(repeat: dict[str, Any], stream: bool) -> dict[str, Any]:
    """`main`'s payload for `--concurrencies C --repeats 1`."""

    def stat(key: str) -> dict[str, Any]:
        v = repeat.get(key)
        return {"mean": v, "min": v, "max": v, "n": 0 if v is None else 1}

    agg: dict[str, Any] = {
        "concurrency": repeat["concurrency"],
        "repeats": 1,
        "evaluated": repeat["evaluated"],
        "total": repeat["total"],
        "skipped": repeat["skipped"],
        **{
            k: stat(k)
            for k in (
                "corpus_wer",
                "per_sample_wer_max",
                "wall_clock_s",
                "throughput_samples_per_s",
                "rtfx",
                "latency_mean_s",
                "latency_median_s",
                "latency_p95_s",
                "latency_p99_s",
                "rtf_mean",
                "rtf_p95",
            )
        },
        "resources": {"monitor_errors": ["resource monitoring disabled"]},
        "per_repeat": [repeat],
    }
    return {
        "schema_version": 2,
        "provenance": {"model": {"id": "Qwen/Qwen3-ASR-1.7B"}},
        "config": {
            "host": "127.0.0.1",
            "port": 8000,
            "meta": "zhaochenyang20/seed-tts-eval-arrow",
            "lang": "en",
            "model_path": "Qwen/Qwen3-ASR-1.7B",
            "declared_model_revision": "7278e1e70fe206f11671096ffdd38061171dd6e5",
            "dataset_revision": "27f4c1adee83b5b29b7c4b375f6b976324bda308",
            "num_samples": repeat["total"],
            "concurrencies": [repeat["concurrency"]],
            "repeats": 1,
            "warmup": True,
            "stream": stream,
        },
        "results": [agg],
    }


# ----------------------------------------------------- benchmark_asr_transcribe_diarize


def td_outputs(reqs: list[_Req]) -> list[dict[str, Any]]:
    """`asdict(RequestResult)` rows as `make_send_fn` leaves them."""
    return [
        {
            "request_id": r.sid,
            "text": r.hyp_text,
            "is_success": r.ok,
            "latency_s": r.latency_s,
            "audio_duration_s": r.audio_s,
            "rtf": r.latency_s / r.audio_s if r.ok else 0.0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "engine_time_s": 0.0,
            "tok_per_s": 0.0,
            "wav_path": "",
            "error": r.error,
            "audio_ttfp_s": None,
            "inter_chunk_s": r.gaps,
            "text_ttft_s": r.ttft_s,
            "audio_chunk_count": 0,
            "first_audio_payload_bytes": 0,
        }
        for r in reqs
    ]


def td_speed(reqs: list[_Req], wall: float) -> dict[str, Any]:
    """`compute_speed_metrics(outputs, wall_clock_s)` with its rounding."""
    ok = [r for r in reqs if r.ok]
    lat = np.array([r.latency_s for r in ok])
    rtf = np.array([r.latency_s / r.audio_s for r in ok])
    out: dict[str, Any] = {
        "total_requests": len(reqs),
        "completed_requests": len(ok),
        "failed_requests": len(reqs) - len(ok),
        "latency_mean_s": round(float(np.mean(lat)), 3),
        "latency_median_s": round(float(np.median(lat)), 3),
        "latency_p95_s": round(float(np.percentile(lat, 95)), 3),
        "latency_p99_s": round(float(np.percentile(lat, 99)), 3),
        "audio_duration_mean_s": round(float(np.mean([r.audio_s for r in ok])), 3),
        "rtf_mean": round(float(np.mean(rtf)), 4),
        "rtf_median": round(float(np.median(rtf)), 4),
        "rtf_p95": round(float(np.percentile(rtf, 95)), 4),
        "rtf_p99": round(float(np.percentile(rtf, 99)), 4),
        "throughput_qps": round(len(ok) / wall, 3),
        "audio_throughput_s_per_s": round(sum(r.audio_s for r in ok) / wall, 3),
    }
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    if ttft:
        out["text_ttft_mean_s"] = round(float(np.mean(ttft)), 4)
        out["text_ttft_median_s"] = round(float(np.median(ttft)), 4)
        out["text_ttft_p95_s"] = round(float(np.percentile(ttft, 95)), 4)
        out["text_ttft_p99_s"] = round(float(np.percentile(ttft, 99)), 4)
    return out


def td_config(spec: AsrSpec, wall: float) -> dict[str, Any]:
    """`_asr_results_config` (the speed payload adds the same two keys again)."""
    return {
        "dataset": "movies800times",
        "repo_id": "zhaochenyang20/movies800",
        "split": "validation",
        "audio_column": "audio",
        "expected_column": "transcription",
        "model_path": "OpenMOSS-Team/MOSS-Transcribe-Diarize",
        "base_url": "http://127.0.0.1:8000",
        "concurrency": spec.concurrency,
        "warmup": 16,
        "request_rate": "inf",
        "request_timeout_s": 1800,
        "max_new_tokens": 65536,
        "max_samples": spec.requests,
        "wall_clock_s": wall,
        "timing_scope": "asr_requests_only",
    }


def td_results(reqs: list[_Req], spec: AsrSpec, wall: float) -> dict[str, Any]:
    """`build_evaluation_payload`: per-sample `cer_no_spk` (character edits / chars)."""
    per = []
    for r in reqs:
        ref = r.ref_text.rstrip(".").lower().replace(" ", "")
        hyp = r.hyp_text.replace(" ", "")
        cer = _edits(list(ref), list(hyp)) / len(ref) if r.ok else None
        per.append(
            {
                "id": r.sid,
                "audio_path": f"/tmp/movies800_validation_x/{r.sid}.wav",
                "expected_text": "[S01]" + r.ref_text,
                "result_text": "[S01]" + r.hyp_text if r.ok else "",
                "expected_normalized": "[s01] " + r.ref_text.lower(),
                "result_normalized": "[s01] " + r.hyp_text if r.ok else "",
                "is_exact_match": False,
                "latency_s": r.latency_s,
                "audio_duration_s": r.audio_s,
                "error": r.error or None,
                "cer_no_spk": cer,
                "cp_cer": cer,
                "cer_valid": r.ok or None,
                "cp_cer_valid": r.ok or None,
                "cp_invalid_reason": "" if r.ok else None,
            }
        )
    ok = sum(r.ok for r in reqs)
    return {
        "config": {
            "repo_id": "zhaochenyang20/movies800",
            "split": "validation",
            "model_path": "OpenMOSS-Team/MOSS-Transcribe-Diarize",
            "concurrency": spec.concurrency,
            "wall_clock_s": wall,
        },
        "summary": {
            "total_samples": len(reqs),
            "evaluated": ok,
            "skipped": len(reqs) - ok,
            "exact_matches": 0,
            "mismatches": ok,
            "exact_match_rate": 0.0,
        },
        "speed": td_speed(reqs, wall),
        "diarization_metrics": {},
        "diarization_metrics_percent": {},
        "per_sample": per,
    }


# ---------------------------------------------------------------------------- bundle


def _dump(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))  # Python's json, as the scripts write


def _run_files(
    spec: AsrSpec, rdir: Path, rel: str, reqs: list[_Req], wall: float, mode: str
) -> dict[str, Any]:
    if spec.kind == "seedtts":
        rows = seedtts_rows(reqs)
        raw = rdir / "raw" / f"conc{spec.concurrency}_rep1.jsonl"
        raw.parent.mkdir(parents=True)
        raw.write_text("".join(json.dumps(r) + "\n" for r in rows))
        rep = seedtts_repeat(rows, reqs, wall, spec.concurrency)
        _dump(rdir / "asr_seedtts_results.json", seedtts_sweep(rep, mode == "streaming"))
        return {
            "speed": f"{rel}/asr_seedtts_results.json",
            "records": f"{rel}/raw/{raw.name}",
            "kept": [f"{rel}/raw/{raw.name}"],
        }
    config = td_config(spec, wall)
    _dump(
        rdir / "transcribe_diarize_asr_results.json",
        {
            "schema_version": 1,
            "config": config,
            "samples": [
                {"sample_id": r.sid, "audio_path": f"/tmp/{r.sid}.wav", "expected_text": r.ref_text}
                for r in reqs
            ],
            "outputs": td_outputs(reqs),
        },
    )
    _dump(
        rdir / "transcribe_diarize_speed_results.json",
        {"schema_version": 1, "config": config, "speed": td_speed(reqs, wall)},
    )
    _dump(rdir / "transcribe_diarize_results.json", td_results(reqs, spec, wall))
    return {
        "speed": f"{rel}/transcribe_diarize_speed_results.json",
        "records": f"{rel}/transcribe_diarize_asr_results.json",
        "wer": f"{rel}/transcribe_diarize_results.json",
        "kept": [f"{rel}/transcribe_diarize_asr_results.json"],
    }


def write_asr_bundle(out: Path, spec: AsrSpec) -> Path:
    """A folder bundle: rounds in balanced order (base, head, head, base, …)."""
    rng = np.random.default_rng(spec.seed + 100)
    runs = []
    for mode in spec.modes:
        for rnd in range(1, spec.rounds + 1):
            sides = ("base", "head") if rnd % 2 else ("head", "base")
            for side in sides:
                tag = "stream" if mode == "streaming" else "nonstream"
                rid = f"r{rnd}-{side}-{tag}-c{spec.concurrency}"
                rel = f"runs/{rid}"
                reqs = _requests(spec, side, mode, rng)
                wall = _wall([r for r in reqs if r.ok], spec.concurrency)
                files = _run_files(spec, out / rel, rel, reqs, wall, mode)
                _dump(out / rel / "server.json", {"startup_s": 41.0, "peak_vram_mib": 20000})
                files["server"] = f"{rel}/server.json"
                runs.append(
                    {
                        "id": rid,
                        "side": side,
                        "round": rnd,
                        "mode": mode,
                        "concurrency": spec.concurrency,
                        "requests": spec.requests,
                        "warmup_requests": spec.requests,
                        "wall_clock_s": wall,
                        "wall_clock_source": "client-summary"
                        if spec.kind == "seedtts"
                        else "client-config",
                        "status": "ok",
                        "files": files,
                    }
                )
    env = default_environment("H200")
    task = "qwen3-asr" if spec.kind == "seedtts" else "moss-td"
    manifest = {
        "schema": "rsi-bundle/1",
        "verification_id": f"v-{task}",
        "repo": "sgl-project/sglang-omni",
        "task": task,
        "base": {"sha": BASE_SHA, "ref": "main"},
        "head": {"sha": HEAD_SHA, "ref": "rsi/asr"},
        "gpu": "H200",
        "environment": {"base": env, "head": dict(env)},
        "runs": runs,
        "complete": True,
    }
    _dump(out / "manifest.json", manifest)
    return out
