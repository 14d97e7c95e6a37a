"""Synthetic bundles in SGLang-Omni's own file format, for the demo, tests and benchmarks.

No published per-request `speed_results.json` exists (fixtures/real/SOURCES.md), so these
files are generated: the same fields, rounding and `null`s as SGLang-Omni's
`benchmarks/metrics/performance.py`, and a summary computed the way it computes one.
Nothing here is used to judge real evidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from evidence.records import FloatArray

BASE_SHA = "f29a1195d12826bcedfda78f4e58429745eda5b8"
HEAD_SHA = "fe4b23f06b27f7b2492703891c8036a919d2041e"


@dataclass
class SynthSpec:
    gpu: str = "H200"
    modes: tuple[str, ...] = ("non-streaming", "streaming")
    concurrencies: tuple[int, ...] = (16,)
    rounds: int = 5
    requests: int = 128
    speedup: float = 0.0  # head throughput = base × (1 + speedup)
    round_cv: float = 0.02
    request_cv: float = 0.15
    head_audio_scale: float = 1.0  # < 1: head makes shorter audio ("does less")
    head_wer_add: float = 0.0
    order: str = "balanced"  # balanced (ABBA…), blocked (AAA…BBB), alternating (ABAB…)
    seed: int = 0
    task: str = "cosyvoice3"
    repo: str = "sgl-project/sglang-omni"
    verification_id: str = "v-demo01"
    base_sha: str = BASE_SHA
    head_sha: str = HEAD_SHA
    with_wer: bool = True
    with_text: bool = True
    gpu_minutes: bool = False  # the runner's `gpu_minutes`, and `startup_s`/`run_s` per run
    environment: dict[str, dict[str, Any]] = field(default_factory=dict)


def default_environment(gpu: str) -> dict[str, Any]:
    return {
        "gpu_name": f"NVIDIA {gpu}",
        "gpu_count": 1,
        "driver": "580.159.04",
        "cuda": "13.0",
        "image": "lmsysorg/sglang-omni:dev",
        "image_digest": "sha256:832e31ce61309be004ec1b085cb92eab5da28f3687a96d854934753a13dff1e7",
        "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
        "cpu_count": 16,
        "python": "3.12.3",
        "packages": {"torch": "2.11.0", "sglang": "0.5.22"},
    }


def schedule(rounds: int, order: str) -> list[tuple[str, int]]:
    """Sides in execution order with their round numbers."""
    if order == "blocked":
        sides = ["base"] * rounds + ["head"] * rounds
    elif order == "alternating":
        sides = ["base", "head"] * rounds
    else:
        pair = [["base", "head"], ["head", "base"]]
        sides = [s for i in range(rounds) for s in pair[i % 2]]
    count = {"base": 0, "head": 0}
    out = []
    for s in sides:
        count[s] += 1
        out.append((s, count[s]))
    return out


def r4(x: float) -> float:
    return round(float(x), 4)


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def summarize(rows: list[dict[str, Any]], wall_clock_s: float) -> dict[str, Any]:
    """The summary SGLang-Omni writes, with its rounding (3 decimals for latency, 4 else)."""
    ok = [r for r in rows if r["is_success"]]
    out: dict[str, Any] = {
        "total_requests": len(rows),
        "completed_requests": len(ok),
        "failed_requests": len(rows) - len(ok),
    }
    if not ok:
        return out
    lat = [r["latency_s"] for r in ok]
    rtf = [r["rtf"] for r in ok if r["rtf"]]
    audio = [r["audio_duration_s"] for r in ok if r["audio_duration_s"] > 0]
    out.update(
        {
            "latency_mean_s": round(float(np.mean(lat)), 3),
            "latency_median_s": round(float(np.median(lat)), 3),
            "latency_p95_s": round(_percentile(lat, 95), 3),
            "latency_p99_s": round(_percentile(lat, 99), 3),
            "audio_duration_mean_s": round(float(np.mean(audio)), 3) if audio else 0,
            "rtf_mean": round(float(np.mean(rtf)), 4) if rtf else None,
            "rtf_median": round(float(np.median(rtf)), 4) if rtf else None,
            "throughput_qps": round(len(ok) / wall_clock_s, 3),
        }
    )
    if audio:
        out["audio_throughput_s_per_s"] = round(sum(audio) / wall_clock_s, 3)
    ttfp = [r["audio_ttfp_s"] for r in ok if r.get("audio_ttfp_s") is not None]
    if ttfp:
        out["audio_ttfp_mean_s"] = r4(np.mean(ttfp))
        out["audio_ttfp_median_s"] = r4(np.median(ttfp))
        out["audio_ttfp_p95_s"] = r4(_percentile(ttfp, 95))
        out["audio_ttfp_p99_s"] = r4(_percentile(ttfp, 99))
    gaps = [g for r in ok for g in (r.get("inter_chunk_s") or [])]
    if gaps:
        out["inter_chunk_mean_s"] = r4(np.mean(gaps))
        out["inter_chunk_p95_s"] = r4(_percentile(gaps, 95))
        out["inter_chunk_p99_s"] = r4(_percentile(gaps, 99))
    return out


def _sample_ids(n: int) -> list[str]:
    return [f"common_voice_en_{10119832 + i}-common_voice_en_{10119840 + i}" for i in range(n)]


def _rows(
    rng: np.random.Generator,
    ids: list[str],
    audio: FloatArray,
    speed: float,
    streaming: bool,
    spec: SynthSpec,
    with_text: bool,
) -> list[dict[str, Any]]:
    n = len(ids)
    rtf = 0.35 / speed * np.exp(rng.normal(0, spec.request_cv, n))
    lat = audio * rtf
    rows: list[dict[str, Any]] = []
    ttfp = (0.12 / speed) * np.exp(rng.normal(0, 0.1, n)) if streaming else None
    for i in range(n):
        row: dict[str, Any] = {
            "id": ids[i],
            "text": "Get the trust fund to the bank early." if with_text else None,
            "is_success": True,
            "latency_s": r4(lat[i]),
            "engine_latency_s": None,
            "prompt_build_s": None,
            "audio_duration_s": r4(audio[i]),
            "rtf": r4(rtf[i]),
            "prompt_tokens": 42,
            "completion_tokens": int(audio[i] * 25) or None,
            "output_token_rate": None,
            "wav_path": None,
            "error": None,
            "audio_ttfp_s": None,
            "text_ttft_s": None,
            "engine_audio_ttfp_s": None,
            "engine_text_ttft_s": None,
            "inter_chunk_s": None,
            "audio_chunk_count": None,
            "first_audio_payload_bytes": None,
        }
        if ttfp is not None:
            first = float(min(ttfp[i], lat[i] * 0.5))
            k = max(1, int(audio[i] / 0.48))
            gaps = np.full(k, (lat[i] - first) / k) * np.exp(rng.normal(0, 0.05, k))
            row["audio_ttfp_s"] = r4(first)
            row["inter_chunk_s"] = [r4(g) for g in gaps]
            row["audio_chunk_count"] = k + 1
            row["first_audio_payload_bytes"] = 4096
        rows.append(row)
    return rows


def write_bundle(out: Path, spec: SynthSpec) -> Path:
    """Write a complete, clean bundle folder to `out` and return it."""
    rng = np.random.default_rng(spec.seed)
    out.mkdir(parents=True, exist_ok=True)
    ids = _sample_ids(spec.requests)
    # Each sample has its own natural length; both sides synthesize the same text.
    base_audio = rng.uniform(2.0, 8.0, spec.requests)
    env = spec.environment or {
        "base": default_environment(spec.gpu),
        "head": default_environment(spec.gpu),
    }
    runs: list[dict[str, Any]] = []
    minutes = {"base": 0.0, "head": 0.0}
    clock = 1_795_000_000.0
    for mode in spec.modes:
        streaming = mode == "streaming"
        for conc in spec.concurrencies:
            for side, rnd in schedule(spec.rounds, spec.order):
                speed = (1 + spec.speedup if side == "head" else 1.0) * math.exp(
                    rng.normal(0, spec.round_cv)
                )
                audio = base_audio * (spec.head_audio_scale if side == "head" else 1.0)
                audio = audio * np.exp(rng.normal(0, 0.02, spec.requests))
                rows = _rows(rng, ids, audio, speed, streaming, spec, spec.with_text)
                lat = np.array([r["latency_s"] for r in rows])
                # Requests overlap `conc` at a time: wall ≈ Σ latency / conc, never < max.
                wall = round(
                    max(float(lat.sum()) / min(conc, len(rows)) * 1.05, float(lat.max()) * 1.01), 3
                )
                tag = "stream" if streaming else "nonstream"
                rid = f"r{rnd}-{side}-{tag}-c{conc}"
                d = out / "runs" / rid
                d.mkdir(parents=True, exist_ok=True)
                speed_doc = {
                    "summary": summarize(rows, wall),
                    "config": {
                        "concurrency": conc,
                        "stream": streaming,
                        "max_samples": spec.requests,
                        "model": spec.task,
                    },
                    "per_request": rows,
                }
                (d / "speed_results.json").write_bytes(orjson.dumps(speed_doc))
                files = {
                    "speed": f"runs/{rid}/speed_results.json",
                    "server": f"runs/{rid}/server.json",
                }
                if spec.with_wer:
                    add = spec.head_wer_add if side == "head" else 0.0
                    wer = np.clip(rng.exponential(0.012, spec.requests) + add, 0, 1)
                    per = [
                        {
                            "id": i,
                            "target_text": "t",
                            "whisper_text": "t",
                            "ref_norm": "a b c",
                            "hyp_norm": "a b c",
                            "wer": r4(float(w)),
                            "substitutions": 0,
                            "deletions": 0,
                            "insertions": 0,
                            "audio_duration_s": r4(a),
                            "latency_s": 1.0,
                            "is_success": True,
                            "error": None,
                        }
                        for i, w, a in zip(ids, wer, audio, strict=True)
                    ]
                    (d / "wer_results.json").write_bytes(
                        orjson.dumps(
                            {
                                "summary": {
                                    "total_samples": len(per),
                                    "evaluated": len(per),
                                    "skipped": 0,
                                    "wer_mean": r4(float(np.mean(wer))),
                                },
                                "config": {"lang": "en"},
                                "per_sample": per,
                            }
                        )
                    )
                    files["wer"] = f"runs/{rid}/wer_results.json"
                startup = round(40 + rng.normal(0, 1), 2)
                server = {
                    "startup_s": startup,
                    "peak_vram_mib": int(61000 + rng.normal(0, 50)),
                    "gpu_samples": [
                        {
                            "t": 0.0,
                            "sm_clock_mhz": 1980,
                            "util_pct": 97,
                            "mem_used_mib": 60100,
                            "power_w": 612,
                            "throttle_reasons": [],
                        }
                    ],
                    "cpuset_busy_prelaunch": 0.0,
                    "foreign_peak_cores": 0.05,
                    "host_cpu_ms": 8.0,
                }
                (d / "server.json").write_bytes(orjson.dumps(server))
                held = {"startup_s": startup, "run_s": startup + wall}
                minutes[side] += held["run_s"] / 60.0
                runs.append(
                    {
                        **(held if spec.gpu_minutes else {}),
                        "id": rid,
                        "side": side,
                        "round": rnd,
                        "mode": mode,
                        "concurrency": conc,
                        "requests": spec.requests,
                        "warmup_requests": 8,
                        "started_at": _iso(clock),
                        "ended_at": _iso(clock + wall),
                        "wall_clock_s": wall,
                        "status": "ok",
                        "files": files,
                    }
                )
                clock += wall + 60
    manifest = {
        "schema": "rsi-bundle/1",
        "verification_id": spec.verification_id,
        "repo": spec.repo,
        "task": spec.task,
        "base": {"sha": spec.base_sha, "ref": "main"},
        "head": {
            "sha": spec.head_sha,
            "ref": "rsi/cosyvoice3-idle-threads",
            "repo": "openrsi-bot/sglang-omni",
        },
        "gpu": spec.gpu,
        "runner": {
            "name": f"gpu-{spec.gpu.lower()}-07",
            "labels": ["self-hosted", "linux", spec.gpu.lower()],
        },
        "environment": env,
        "benchmark": {
            "command": "python benchmarks/eval/benchmark_tts_speed.py --model "
            f"{spec.task} --port 8000 --testset seedtts_testset/en/meta.lst "
            f"--max-samples {spec.requests}",
            "dataset": "seed-tts-eval en",
            "seed": 42,
        },
        "runs": runs,
        "complete": True,
    }
    if spec.gpu_minutes:
        minutes["total"] = minutes["base"] + minutes["head"]
        manifest["gpu_minutes"] = {k: round(v, 4) for k, v in minutes.items()}
    (out / "manifest.json").write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    return out


def _iso(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, tz=dt.UTC).isoformat().replace("+00:00", "Z")
