"""Regenerate the example bundles and candidate that `make demo` runs on.

    .venv/bin/python examples/make_examples.py

The bundles are synthetic, in SGLang-Omni's own file format (see evidence/synth.py):
H100 with a real +12% throughput gain, H200 with +6%, both 5 rounds a side, order-balanced.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import orjson

from evidence.synth import BASE_SHA, HEAD_SHA, SynthSpec, write_bundle

HERE = Path(__file__).resolve().parent


def main() -> None:
    for gpu, speedup, seed in (("H100", 0.12, 11), ("H200", 0.06, 12)):
        with tempfile.TemporaryDirectory() as tmp:
            folder = write_bundle(
                Path(tmp) / "bundle",
                SynthSpec(
                    gpu=gpu,
                    speedup=speedup,
                    seed=seed,
                    rounds=5,
                    requests=128,
                    concurrencies=(16,),
                    verification_id="v-2c1f0e",
                ),
            )
            archive = HERE / f"rsi-bundle-v-2c1f0e-{gpu.lower()}"
            shutil.make_archive(str(archive), "zip", folder)
    candidate = {
        "candidate_id": "cosyvoice3-idle-threads-r14",
        "task": "cosyvoice3",
        "repo": "sgl-project/sglang-omni",
        "base_sha": BASE_SHA,
        "head": {
            "repo": "openrsi-bot/sglang-omni",
            "ref": "rsi/cosyvoice3-idle-threads",
            "sha": HEAD_SHA,
        },
        "title": "CosyVoice3: idle encoder threads sleep instead of spinning",
        "summary": "Idle encoder worker threads wait on a condition variable instead of "
        "spinning, freeing CPU for the scheduler under load.",
        "claim": {
            "metric": "throughput_qps",
            "mode": "streaming",
            "gpu": "H100",
            "delta_pct": 12.5,
        },
        "gpus": ["H100", "H200"],
        "default_behavior_changes": ["none: code only"],
        "caveats": ["Measured with 8 CPU cores per GPU."],
        "harness": {
            "run_id": "rsi-cosyvoice3-2026-11-28",
            "best_round": "agent-14",
            "reward": 1.5389,
            "trajectory": [
                {"hour": 0.4, "reward": 1.12, "passed": True, "failed_guards": []},
                {
                    "hour": 1.589,
                    "reward": 1.399,
                    "passed": False,
                    "failed_guards": ["CosyVoice3 WER"],
                },
                {"hour": 2.7, "reward": 1.31, "passed": True, "failed_guards": []},
                {"hour": 4.1, "reward": 1.47, "passed": True, "failed_guards": []},
                {"hour": 6.3, "reward": 1.61, "passed": False, "failed_guards": ["latency p95"]},
                {"hour": 7.9, "reward": 1.5389, "passed": True, "failed_guards": []},
            ],
        },
        "pull_request": None,
    }
    (HERE / "candidate.json").write_bytes(orjson.dumps(candidate, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
