"""Verdicts, guards, multiplicity and the claim status on whole synthetic studies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evidence.build import Inputs, build
from evidence.model import Candidate, ClaimSpec, Evidence, Finding, StudyRow
from evidence.synth import BASE_SHA, HEAD_SHA
from evidence.verdict import decide, judge_claim
from tests.bundles import clean_bundle


def candidate(**claim: Any) -> Candidate:
    return Candidate.model_validate(
        {
            "candidate_id": "c1",
            "task": "cosyvoice3",
            "repo": "sgl-project/sglang-omni",
            "base_sha": BASE_SHA,
            "title": "A change",
            "head": {"repo": "openrsi-bot/sglang-omni", "ref": "rsi/x", "sha": HEAD_SHA},
            "claim": claim or None,
            "gpus": ["H100", "H200"],
            "caveats": ["Measured with 8 CPU cores per GPU."],
            "default_behavior_changes": ["none: code only", "streaming chunk size 4096 → 8192"],
        }
    )


def evidence(tmp_path: Path, cand: Candidate | None = None, **spec: Any) -> Evidence:
    ev, _ = build(Inputs(bundles=[clean_bundle(tmp_path / "b", **spec)], candidate=cand))
    return ev


def test_a_real_gain_is_improved_with_an_interval(tmp_path: Path) -> None:
    ev = evidence(tmp_path, speedup=0.15)
    assert ev.verdict == "improved"
    prim = [r for r in ev.study if r.primary]
    assert {r.metric for r in prim} == {"throughput_qps"}
    assert {r.mode for r in prim} == {"streaming", "non-streaming"}
    for r in prim:
        assert r.ci_low_pct is not None
        assert r.ci_high_pct is not None
        assert r.ci_low_pct < 15 < r.ci_high_pct
        assert r.p_adjusted is not None
        assert r.p_adjusted >= (r.p_value or 0)


def test_a_real_loss_is_regressed(tmp_path: Path) -> None:
    ev = evidence(tmp_path, speedup=-0.15)
    assert ev.verdict == "regressed"
    assert ev.gpus["H200"].verdict == "regressed"


def test_no_change_says_what_could_have_been_detected(tmp_path: Path) -> None:
    ev = evidence(tmp_path, speedup=0.0)
    assert ev.verdict == "no-change"
    assert "could have detected about ±" in ev.reason
    assert all(r.mde_pct is not None for r in ev.study if r.primary)


def test_small_significant_change_is_not_a_verdict(tmp_path: Path) -> None:
    """Significant but under the practical threshold: no change."""
    ev = evidence(tmp_path, speedup=0.015, round_cv=0.002, request_cv=0.01, seed=8)
    prim = [r for r in ev.study if r.primary]
    assert any(r.p_value is not None and r.p_value < 0.05 for r in prim)
    assert all(r.verdict == "no-change" for r in prim)


def _row(**kw: Any) -> StudyRow:
    base: dict[str, Any] = {
        "gpu": "H200",
        "mode": "streaming",
        "concurrency": 16,
        "metric": "throughput_qps",
        "label": "throughput",
        "unit": "req/s",
        "better": "higher",
        "base": 10.0,
        "head": 11.0,
        "n_base": 5,
        "n_head": 5,
        "delta_pct": 10.0,
        "ci_low_pct": 5.0,
        "ci_high_pct": 15.0,
        "verdict": "improved",
        "primary": True,
    }
    return StudyRow(**{**base, **kw})


def test_guard_lowers_an_improvement_to_regressed() -> None:
    rows = [
        _row(),
        _row(
            metric="latency_p95_s",
            label="latency p95",
            better="lower",
            primary=False,
            guard=True,
            guard_failed=True,
            delta_pct=14.0,
            verdict="regressed",
        ),
    ]
    verdict, reason = decide(rows, [])
    assert verdict == "regressed"
    assert "guard latency p95" in reason


def test_guard_regression_under_threshold_is_only_a_caveat(tmp_path: Path) -> None:
    rows = [
        _row(),
        _row(
            metric="latency_p95_s",
            label="latency p95",
            better="lower",
            primary=False,
            guard=True,
            guard_failed=False,
            delta_pct=6.0,
            verdict="regressed",
        ),
    ]
    assert decide(rows, [])[0] == "improved"


def test_any_audit_error_is_invalid() -> None:
    f = Finding(code="sample-set-mismatch", severity="error", message="x", gpu="H200")
    assert decide([_row()], [f])[0] == "invalid"
    w = Finding(code="noisy-rounds", severity="warning", message="x", gpu="H200")
    assert decide([_row()], [w])[0] == "improved"


def test_a_regressed_primary_wins_over_an_improved_one() -> None:
    rows = [
        _row(),
        _row(gpu="H100", delta_pct=-8.0, ci_low_pct=-12.0, ci_high_pct=-4.0, verdict="regressed"),
    ]
    assert decide(rows, [])[0] == "regressed"


@pytest.mark.parametrize(
    ("claimed", "row", "status"),
    [
        (10.0, {}, "confirmed"),
        (25.0, {}, "weakened"),  # interval [5, 15] wholly below the claim, still improved
        (2.0, {}, "confirmed"),  # better than claimed
        (10.0, {"verdict": "no-change", "ci_low_pct": -1.0}, "not-reproduced"),
    ],
)
def test_claim_status(claimed: float, row: dict[str, Any], status: str) -> None:
    claim = ClaimSpec(metric="throughput_qps", mode="streaming", gpu="H200", delta_pct=claimed)
    result = judge_claim([_row(**row)], claim, measured=True)
    assert result.status == status
    assert f"{claimed:+.1f}%" in result.message


def test_latency_claim_direction() -> None:
    claim = ClaimSpec(metric="latency_p95_s", mode="streaming", delta_pct=-30.0)
    row = _row(
        metric="latency_p95_s",
        label="latency p95",
        better="lower",
        delta_pct=-12.0,
        ci_low_pct=-16.0,
        ci_high_pct=-8.0,
    )
    assert judge_claim([row], claim, measured=True).status == "weakened"


def test_claim_end_to_end_and_per_gpu(tmp_path: Path) -> None:
    cand = candidate(metric="throughput_qps", mode="streaming", gpu="H200", delta_pct=15.0)
    ev = evidence(tmp_path, cand, speedup=0.15)
    assert ev.claim.status == "confirmed"
    assert ev.gpus["H200"].claim_status == "confirmed"
    prim = [r for r in ev.study if r.primary]
    assert {r.mode for r in prim} == {"streaming"}
    assert ev.claim.message.startswith("The claim of throughput +15.0% (streaming) holds on H200")


def test_claim_not_reproduced(tmp_path: Path) -> None:
    cand = candidate(metric="throughput_qps", mode="streaming", gpu="H200", delta_pct=32.5)
    ev = evidence(tmp_path, cand, speedup=0.0)
    assert ev.claim.status == "not-reproduced"
    assert ev.verdict == "no-change"


def test_claim_on_an_unmeasured_metric(tmp_path: Path) -> None:
    cand = candidate(metric="audio_ttfp_p95_s", mode="streaming", delta_pct=-20.0)
    ev = evidence(tmp_path, cand, speedup=0.1, modes=("non-streaming",))
    assert ev.claim.status == "not-reproduced"
    assert "claim-not-measured" in {f.code for f in ev.audit}
    assert {r.metric for r in ev.study if r.primary} == {"throughput_qps"}


def test_candidate_for_other_commits_is_rejected(tmp_path: Path) -> None:
    cand = candidate(metric="throughput_qps", mode="streaming", delta_pct=10.0)
    cand.base_sha = "0" * 40
    ev = evidence(tmp_path, cand, speedup=0.1)
    assert ev.verdict == "invalid"
    assert any("different change than the candidate" in f.message for f in ev.audit)


def test_caveats_carry_declared_items_and_attribution(tmp_path: Path) -> None:
    from evidence.model import AttributionEntry

    cand = candidate(metric="throughput_qps", mode="streaming", delta_pct=10.0)
    ev, _ = build(
        Inputs(
            bundles=[clean_bundle(tmp_path / "b", speedup=0.1)],
            candidate=cand,
            attribution=[AttributionEntry(number=1502, title="Bump torch")],
        )
    )
    text = "\n".join(ev.caveats)
    assert "Declared by the candidate: Measured with 8 CPU cores per GPU." in text
    assert "Default behaviour changes: streaming chunk size 4096 → 8192" in text
    assert "none: code only" not in text
    assert "it also includes #1502 (Bump torch)" in text


def test_per_configuration_regression_is_a_caveat(tmp_path: Path) -> None:
    ev = evidence(tmp_path, speedup=0.1)
    ev2 = evidence(tmp_path / "x", speedup=-0.1)
    assert not any("rose" in c for c in ev.caveats if "latency" in c)
    assert any("latency" in c and "rose" in c for c in ev2.caveats)


def test_two_gpus_side_by_side(tmp_path: Path) -> None:
    a = clean_bundle(tmp_path / "a", gpu="H100", speedup=0.15)
    b = clean_bundle(tmp_path / "b", gpu="H200", speedup=0.0, seed=4)
    ev, _ = build(Inputs(bundles=[a, b]))
    assert ev.gpus["H100"].verdict == "improved"
    assert ev.gpus["H200"].verdict == "no-change"
    assert ev.verdict == "improved"
    assert ev.gpus["H100"].headline is not None
    assert ev.gpus["H100"].startup_s["base"] is not None
    assert ev.gpus["H100"].peak_vram_mib["head"] is not None
    assert ev.gpus["H100"].fingerprint["base"]["driver"] == "580.159.04"


def test_bundles_of_different_verifications_are_invalid(tmp_path: Path) -> None:
    a = clean_bundle(tmp_path / "a", gpu="H100")
    b = clean_bundle(tmp_path / "b", gpu="H200", verification_id="v-other")
    ev, _ = build(Inputs(bundles=[a, b]))
    assert ev.verdict == "invalid"


def test_compare_links_for_a_fork_and_enterprise(tmp_path: Path) -> None:
    ev, _ = build(
        Inputs(bundles=[clean_bundle(tmp_path / "b")], github_url="https://ghe.example.com/")
    )
    assert ev.links[0].url == (
        f"https://ghe.example.com/sgl-project/sglang-omni/compare/"
        f"{BASE_SHA}...openrsi-bot:{HEAD_SHA}"
    )
    assert ev.reproduce is not None
    assert ev.reproduce.command.startswith(
        "rsi-runner verify --repo https://ghe.example.com/sgl-project/sglang-omni"
    )
    assert ev.reproduce.image_digest is not None
    assert ev.reproduce.image_digest.startswith("sha256:")


def test_an_invalid_study_reproduces_no_claim(tmp_path: Path) -> None:
    cand = candidate(metric="throughput_qps", mode="streaming", gpu="H200", delta_pct=20.0)
    ev = evidence(tmp_path, cand, speedup=0.2, head_audio_scale=0.7)
    assert ev.verdict == "invalid"
    assert ev.claim.status == "not-reproduced"
    assert ev.gpus["H200"].claim_status == "not-reproduced"
    assert "For reference only: The claim of throughput +20.0%" in ev.claim.message
