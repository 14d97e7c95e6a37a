"""Building blocks for App tests: an App key, settings pointed at the GitHub stand-in,
signed requests, and real bundles for a verification."""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.config import Settings
from bot.signatures import sign
from evidence.synth import BASE_SHA, HEAD_SHA, SynthSpec, write_bundle
from tests.standin import GitHubStandIn

APP_ID = 424242
WEBHOOK_SECRET = "webhook-secret-for-tests"
INTAKE_SECRET = "intake-secret-for-tests"
UPSTREAM = "sgl-project/sglang-omni"
FORK = "openrsi-bot/sglang-omni"
RUNNER = "openrsi-bot/rsi-runners"
HEAD_REF = "rsi/cosyvoice3-idle-threads"
RUNNER_WORKFLOW = Path(__file__).resolve().parents[1] / "runners" / "workflows" / "rsi-verify.yml"


@cache
def private_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def settings(tmp: Path, api_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "APP_ID": APP_ID,
        "PRIVATE_KEY": private_key_pem(),
        "WEBHOOK_SECRET": WEBHOOK_SECRET,
        "RSI_INTAKE_SECRET": INTAKE_SECRET,
        "GITHUB_API_URL": api_url,
        "GITHUB_WEB_URL": "https://github.com",
        "PUBLIC_URL": "https://rsi.example.com",
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite'}",
        "QUEUE_PATH": tmp / "queue.db",
        "ARTIFACT_STORE": str(tmp / "artifacts"),
        "RSI_RUNNER_REPO": RUNNER,
        "RSI_EFFECT_BACKOFF_S": 0,
        "GITHUB_RETRY_BACKOFF_S": 0,  # a 5xx is retried at once: no test waits on the backoff
        "GITHUB_READ_INTERVAL_S": 0,
        "GITHUB_WRITE_INTERVAL_S": 0,
        "RSI_TRUSTED_PUSHERS": "openrsi-bot",
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def candidate(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "candidate_id": "cosyvoice3-idle-threads-r14",
        "task": "cosyvoice3",
        "repo": UPSTREAM,
        "base_sha": BASE_SHA,
        "head": {"repo": FORK, "ref": HEAD_REF, "sha": HEAD_SHA},
        "title": "CosyVoice3: idle encoder threads sleep instead of spinning",
        "summary": "Idle encoder threads wait on a condition variable.",
        "claim": {
            "metric": "throughput_qps",
            "mode": "streaming",
            "gpu": "H200",
            "delta_pct": 12.0,
        },
        "gpus": ["H200"],
        "default_behavior_changes": ["none: code only"],
        "caveats": ["Measured with 8 CPU cores per GPU."],
        "pull_request": None,
    }
    doc.update(changes)
    return doc


def intake_headers(body: bytes, delivery: str, secret: str = INTAKE_SECRET) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-RSI-Delivery": delivery,
        "X-RSI-Signature-256": sign(body, secret),
    }


def webhook_headers(
    body: bytes, event: str, delivery: str, secret: str = WEBHOOK_SECRET
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(body, secret),
    }


def bundle_zip(tmp: Path, vid: str, gpu: str = "H200", **spec: Any) -> bytes:
    """A real bundle of this verification, zipped as the runner's artifact is."""
    folder = write_bundle(
        tmp / f"bundle-{vid}-{gpu}",
        SynthSpec(
            gpu=gpu,
            verification_id=vid,
            rounds=3,
            requests=40,
            concurrencies=(4,),
            speedup=spec.pop("speedup", 0.12),
            **spec,
        ),
    )
    archive = shutil.make_archive(str(tmp / f"bundle-{vid}-{gpu}"), "zip", folder)
    return Path(archive).read_bytes()


def dumps(doc: Any) -> bytes:
    return orjson.dumps(doc)


def populate(gh: GitHubStandIn) -> None:
    """The repositories of the core loop: upstream, the candidate's fork, the runner repo
    with `rsi-verify.yml` taking the inputs the real workflow declares."""
    gh.add_repo(UPSTREAM, default_sha=BASE_SHA)
    gh.add_repo(FORK, fork=True)
    gh.add_branch(FORK, HEAD_REF, HEAD_SHA)
    gh.add_repo(RUNNER)
    workflow = yaml.safe_load(RUNNER_WORKFLOW.read_text())
    inputs = workflow[True]["workflow_dispatch"]["inputs"]  # YAML 1.1 reads `on:` as True
    required = [name for name, spec in inputs.items() if spec.get("required")]
    gh.add_workflow(RUNNER, RUNNER_WORKFLOW.name, inputs=list(inputs), required=required)
