"""Verdicts, guards, multiplicity and the claim status on whole synthetic studies."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from evidence.build import Inputs, build
from evidence.errors import NotOneVerification
from evidence.metrics import BY_NAME
from evidence.model import Candidate, ClaimSpec, Evidence, Finding, StudyRow
from evidence.policy import Lead, Policy
from evidence.stats import Comparison
from evidence.study import _verdict
from evidence.synth import BASE_SHA, HEAD_SHA
from evidence.verdict import decide, headline, judge_claim
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


def test_a_wide_interval_is_inconclusive_and_says_what_it_could_detect(
    tmp_path: Path,
) -> None:
    """Noisy rounds, no change: the interval is too wide to say, which is not no-change."""
    ev = evidence(tmp_path, speedup=0.0, round_cv=0.15)
    assert ev.verdict == "inconclusive"
    assert ev.gpus["H200"].verdict == "inconclusive"
    assert "is too wide to tell a change of ±3.0% from none" in ev.reason
    assert "could have detected about ±" in ev.reason
    prim = [r for r in ev.study if r.primary]
    assert all(r.verdict == "inconclusive" and r.mde_pct is not None for r in prim)


def test_an_interval_inside_the_threshold_is_no_change(tmp_path: Path) -> None:
    """Quiet rounds, no change: every primary interval inside ±3%, equivalent."""
    ev = evidence(tmp_path, speedup=0.0, round_cv=0.003, request_cv=0.02)
    assert ev.verdict == "no-change"
    assert ev.reason.startswith("every primary figure is within ±3.0% (equivalent)")
    for r in ev.study:
        if r.primary:
            assert r.verdict == "no-change"
            assert r.ci_low_pct is not None
            assert r.ci_high_pct is not None
            assert r.ci_low_pct > -3.0
            assert r.ci_high_pct < 3.0


def test_the_a_a_run_on_the_h200_is_inconclusive_with_its_detectable_effect() -> None:
    """-3.5% [-21.4%, +18.4%] at a 3% threshold could be a real ±18%: inconclusive."""
    c = Comparison(
        delta=-0.035,
        lo=-0.214,
        hi=0.184,
        p=0.7,
        mde=0.254,
        delta_abs=-0.1,
        lo_abs=None,
        hi_abs=None,
    )
    assert _verdict(BY_NAME["throughput_qps"], c, c.p, Policy()) == "inconclusive"
    row = _row(
        verdict="inconclusive", delta_pct=-3.5, ci_low_pct=-21.4, ci_high_pct=18.4, mde_pct=25.4
    )
    verdict, reason = decide([row], [])
    assert verdict == "inconclusive"
    assert reason == (
        "H200 streaming c=16: throughput -3.5% [-21.4%, +18.4%] is too wide to tell a "
        "change of ±3.0% from none; the run could have detected about ±25.4%"
    )
    narrow = Comparison(
        delta=-0.005,
        lo=-0.02,
        hi=0.01,
        p=0.5,
        mde=0.02,
        delta_abs=0.0,
        lo_abs=None,
        hi_abs=None,
    )
    assert _verdict(BY_NAME["throughput_qps"], narrow, narrow.p, Policy()) == "no-change"


def test_wer_is_judged_by_its_absolute_threshold() -> None:
    """+11.5% relative but +0.002 [+0.0001, +0.004] absolute: inside ±0.01, no change."""
    c = Comparison(
        delta=0.115,
        lo=0.003,
        hi=0.227,
        p=0.04,
        mde=0.1,
        delta_abs=0.002,
        lo_abs=0.0001,
        hi_abs=0.004,
    )
    assert _verdict(BY_NAME["wer_mean"], c, c.p, Policy()) == "no-change"
    wide = Comparison(
        delta=0.1, lo=-0.5, hi=0.7, p=0.6, mde=0.9, delta_abs=0.002, lo_abs=-0.02, hi_abs=0.03
    )
    assert _verdict(BY_NAME["wer_mean"], wide, wide.p, Policy()) == "inconclusive"


def test_mixed_primary_rows_are_inconclusive_until_every_one_is_decided() -> None:
    rows = [
        _row(verdict="no-change", delta_pct=0.5, ci_low_pct=-1.0, ci_high_pct=2.0),
        _row(
            concurrency=64, verdict="inconclusive", delta_pct=1.0, ci_low_pct=-9.0, ci_high_pct=11.0
        ),
    ]
    assert decide(rows, [])[0] == "inconclusive"
    assert decide(rows[:1], [])[0] == "no-change"
    assert decide([], [])[0] == "inconclusive"


def test_the_headline_is_the_row_with_the_most_evidence() -> None:
    """Not the largest point estimate, which came from the noisiest setting."""
    rows = [
        _row(verdict="inconclusive", delta_pct=1.0, ci_low_pct=-4.0, ci_high_pct=6.0),
        _row(
            concurrency=128,
            verdict="inconclusive",
            delta_pct=5.5,
            ci_low_pct=-9.1,
            ci_high_pct=22.4,
        ),
    ]
    h = headline(rows, "H200")
    assert h is not None
    assert h.concurrency == 16
    assert h.threshold_pct == 3.0
    # Among rows of the same width, the one with more rounds.
    more = [
        rows[0],
        _row(
            concurrency=32,
            verdict="inconclusive",
            delta_pct=2.0,
            ci_low_pct=-3.0,
            ci_high_pct=7.0,
            n_base=12,
            n_head=12,
        ),
    ]
    h2 = headline(more, "H200")
    assert h2 is not None
    assert h2.concurrency == 32
    # The verdict the rows add up to comes first: a regressed row is the headline.
    worse = [
        *rows,
        _row(
            concurrency=4, verdict="regressed", delta_pct=-9.0, ci_low_pct=-30.0, ci_high_pct=-5.0
        ),
    ]
    h3 = headline(worse, "H200")
    assert h3 is not None
    assert h3.concurrency == 4


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
        "threshold_pct": 3.0,
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


def test_a_guard_that_decided_the_verdict_is_the_headline() -> None:
    """An improved primary row beside a guard failed in the other mode: the GPU reads
    REGRESSED, so its headline is the guard's row, never the +10% that contradicts it."""
    rows = [
        _row(),
        _row(
            mode="non-streaming",
            metric="throughput_qps",
            primary=False,
            guard=True,
            guard_failed=True,
            delta_pct=-14.0,
            ci_low_pct=-20.0,
            ci_high_pct=-8.0,
            verdict="regressed",
        ),
    ]
    assert decide(rows, [])[0] == "regressed"
    h = headline(rows, "H200")
    assert h is not None
    assert (h.mode, h.delta_pct, h.verdict, h.guard) == ("non-streaming", -14.0, "regressed", True)
    # A regressed primary row decides before any guard, as in `decide`.
    worse = [*rows, _row(concurrency=4, verdict="regressed", delta_pct=-9.0)]
    h2 = headline(worse, "H200")
    assert h2 is not None
    assert (h2.concurrency, h2.guard) == (4, False)


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
        (
            10.0,
            {"verdict": "inconclusive", "ci_low_pct": -20.0, "ci_high_pct": 18.0},
            "inconclusive",
        ),
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


def test_the_claim_reads_as_a_sentence() -> None:
    claim = ClaimSpec(metric="throughput_qps", mode="streaming", gpu="H200", delta_pct=10.0)
    one = judge_claim([_row()], claim, measured=True)
    assert one.message == (
        "The claim of throughput +10.0% (streaming) holds on H200: measured "
        "+10.0% [+5.0%, +15.0%] at c=16."
    )
    rows = [
        _row(),
        _row(
            concurrency=64, verdict="inconclusive", delta_pct=2.0, ci_low_pct=-8.0, ci_high_pct=12.0
        ),
    ]
    two = judge_claim(rows, claim, measured=True)
    assert two.message == (
        "The claim of throughput +10.0% (streaming) is weakened on H200: measured "
        "+10.0% [+5.0%, +15.0%] at c=16, which confirms it and +2.0% [-8.0%, +12.0%] at "
        "c=64, which is too wide to tell."
    )
    nogpu = ClaimSpec(metric="throughput_qps", mode="streaming", delta_pct=10.0)
    both = judge_claim([_row(), _row(gpu="H100")], nogpu, measured=True)
    assert both.message == (
        "The claim of throughput +10.0% (streaming) holds: measured +10.0% [+5.0%, +15.0%] "
        "at c=16 on H200 and +10.0% [+5.0%, +15.0%] at c=16 on H100."
    )


def test_claim_not_reproduced(tmp_path: Path) -> None:
    cand = candidate(metric="throughput_qps", mode="streaming", gpu="H200", delta_pct=32.5)
    ev = evidence(tmp_path, cand, speedup=0.0, round_cv=0.003, request_cv=0.02)
    assert ev.claim.status == "not-reproduced"
    assert ev.verdict == "no-change"


def test_claim_inconclusive_when_the_interval_is_too_wide(tmp_path: Path) -> None:
    cand = candidate(metric="throughput_qps", mode="streaming", gpu="H200", delta_pct=10.0)
    ev = evidence(tmp_path, cand, speedup=0.0, round_cv=0.15)
    assert ev.verdict == "inconclusive"
    assert ev.claim.status == "inconclusive"
    assert ev.gpus["H200"].claim_status == "inconclusive"
    assert "can be neither confirmed nor ruled out on H200" in ev.claim.message


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
    b = clean_bundle(
        tmp_path / "b", gpu="H200", speedup=0.0, seed=4, round_cv=0.003, request_cv=0.02
    )
    ev, _ = build(Inputs(bundles=[a, b]))
    assert ev.gpus["H100"].verdict == "improved"
    assert ev.gpus["H200"].verdict == "no-change"
    assert ev.verdict == "improved"
    assert ev.gpus["H100"].headline is not None
    assert ev.gpus["H100"].startup_s["base"] is not None
    assert ev.gpus["H100"].peak_vram_mib["head"] is not None
    assert ev.gpus["H100"].fingerprint["base"]["driver"] == "580.159.04"


def test_bundles_of_different_verifications_are_refused(tmp_path: Path) -> None:
    a = clean_bundle(tmp_path / "a", gpu="H100")
    b = clean_bundle(tmp_path / "b", gpu="H200", verification_id="v-other")
    with pytest.raises(NotOneVerification, match="bundles of different verifications"):
        build(Inputs(bundles=[a, b]))


def test_two_bundles_for_one_gpu_are_refused(tmp_path: Path) -> None:
    a = clean_bundle(tmp_path / "a", gpu="H200")
    b = clean_bundle(tmp_path / "b", gpu="H200", seed=3)
    with pytest.raises(NotOneVerification, match="a second bundle for GPU H200"):
        build(Inputs(bundles=[a, b]))


def test_evidence_written_before_inconclusive_is_read_with_it(tmp_path: Path) -> None:
    """An evidence.json of the old words: a wide no-change row is read as inconclusive,
    an equivalent one stays no-change, and so do the verdicts that rested on them."""
    ev = evidence(tmp_path, speedup=0.0, round_cv=0.15)
    doc = ev.model_dump(mode="json", by_alias=True)
    doc["verdict"] = "no-change"
    doc["gpus"]["H200"]["verdict"] = "no-change"
    doc["gpus"]["H200"]["headline"]["verdict"] = "no-change"
    for key in ("threshold_pct", "threshold_abs"):
        doc["gpus"]["H200"]["headline"].pop(key)
    for r in doc["study"]:
        for key in ("threshold_pct", "threshold_abs", "guard_pct"):
            r.pop(key)
        if r["verdict"] == "inconclusive":
            r["verdict"] = "no-change"
    old = Evidence.model_validate(doc)
    assert old.verdict == "inconclusive"
    assert old.gpus["H200"].verdict == "inconclusive"
    headline_row = old.gpus["H200"].headline
    assert headline_row is not None
    assert headline_row.verdict == "inconclusive"
    assert all(r.verdict == "inconclusive" for r in old.study if r.primary)
    quiet = evidence(tmp_path / "q", speedup=0.0, round_cv=0.003, request_cv=0.02).model_dump(
        mode="json", by_alias=True
    )
    for r in quiet["study"]:
        r.pop("threshold_pct")
    assert Evidence.model_validate(quiet).verdict == "no-change"


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
        "python3 -m runners verify --repo https://ghe.example.com/sgl-project/sglang-omni"
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


def test_the_verdict_names_the_improved_row_with_the_most_evidence() -> None:
    """Not the largest point estimate: that is usually the noisiest setting's."""
    noisy = _row(mode="non-streaming", delta_pct=21.4, ci_low_pct=3.5, ci_high_pct=39.3)
    steady = _row(delta_pct=9.5, ci_low_pct=6.0, ci_high_pct=13.0)
    verdict, reason = decide([noisy, steady], [])
    assert (verdict, reason) == ("improved", "H200 streaming c=16: throughput +9.5%")
    worse = [
        _row(verdict="regressed", delta_pct=-30.0, ci_low_pct=-55.0, ci_high_pct=-5.0),
        _row(
            mode="non-streaming",
            verdict="regressed",
            delta_pct=-8.0,
            ci_low_pct=-10.0,
            ci_high_pct=-6.0,
        ),
    ]
    assert decide(worse, [])[1] == "H200 non-streaming c=16: throughput regressed -8.0%"


def test_an_inconclusive_verdict_gives_its_own_rows_detectable_change() -> None:
    """The run could detect what the named row could, not what the most sensitive row
    could: that would overstate it."""
    wide = _row(
        verdict="inconclusive",
        delta_pct=1.0,
        ci_low_pct=-11.0,
        ci_high_pct=13.0,
        mde_pct=11.5,
        n_base=9,
        n_head=9,
    )
    wider = _row(
        concurrency=64,
        verdict="inconclusive",
        delta_pct=2.0,
        ci_low_pct=-30.0,
        ci_high_pct=34.0,
        mde_pct=4.0,
    )
    reason = decide([wide, wider], [])[1]
    assert reason.startswith("H200 streaming c=16: throughput +1.0% [-11.0%, +13.0%]")
    assert reason.endswith("the run could have detected about ±11.5%")


@pytest.mark.parametrize("spelt", ["h200", "NVIDIA H200", "H200"])
def test_a_claim_names_its_gpu_any_common_way(spelt: str) -> None:
    claim = ClaimSpec(metric="throughput_qps", mode="streaming", gpu=spelt, delta_pct=10.0)
    assert claim.gpu == "H200"
    assert judge_claim([_row()], claim, measured=True).status == "confirmed"


@pytest.mark.parametrize(
    ("claim", "says"),
    [
        ({"metric": "bogus", "delta_pct": 5.0}, "unknown metric; one of throughput_qps"),
        ({"metric": "latency_p95_s", "delta_pct": 10.0}, "latency p95 improves when it falls"),
        ({"metric": "throughput_qps", "delta_pct": -5.0}, "throughput improves when it rises"),
        ({"metric": "wer", "delta_pct": 0.0}, "delta_pct +0 is not a gain"),
    ],
)
def test_a_claim_that_cannot_be_judged_is_refused_saying_why(
    claim: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        ClaimSpec.model_validate(claim)


def test_a_claim_on_a_gpu_the_candidate_does_not_list_is_refused() -> None:
    with pytest.raises(ValueError, match=r"claim.gpu B200 is not among gpus \(H100, H200\)"):
        candidate(metric="throughput_qps", mode="streaming", gpu="b200", delta_pct=10.0)


def test_a_claim_is_judged_on_the_gpu_it_names_only(tmp_path: Path) -> None:
    h100 = clean_bundle(tmp_path / "a", gpu="H100", speedup=0.15)
    h200 = clean_bundle(tmp_path / "b", gpu="H200", speedup=0.02, seed=4, round_cv=0.003)
    cand = candidate(metric="throughput_qps", mode="streaming", gpu="h100", delta_pct=15.0)
    ev, _ = build(Inputs(bundles=[h100, h200], candidate=cand))
    assert ev.claim.status == "confirmed"
    assert {c.gpu for c in ev.claim.rows} == {"H100"}
    assert ev.gpus["H100"].claim_status == "confirmed"
    assert ev.gpus["H200"].claim_status == "none"  # claimed elsewhere: no status here
    only_h200, _ = build(Inputs(bundles=[h200], candidate=cand))
    assert only_h200.claim.status == "not-reproduced"
    assert only_h200.claim.message == (
        "The claim of throughput +15.0% (streaming) on H100 is not reproduced: this "
        "verification did not measure it there."
    )


def test_a_candidate_taken_in_earlier_is_read_back_without_the_newer_rules() -> None:
    """Publishing a verification stored before these rules, or a reverify after the fork
    was deleted (head.repo ""), must not fail on them: they judge what comes in."""
    doc = candidate(metric="throughput_qps", mode="streaming", delta_pct=10.0).model_dump()
    doc["claim"] = {"metric": "throughput", "mode": "streaming", "delta_pct": -10.0}
    doc["head"] = {"repo": "", "ref": "", "sha": "abc1234"}
    with pytest.raises(ValueError, match="unknown metric"):
        Candidate.model_validate(doc)
    back = Candidate.model_validate(doc, context={"stored": True})
    assert back.claim is not None
    assert (back.claim.metric, back.head.repo) == ("throughput", "")


@pytest.mark.parametrize(
    ("gpu", "says"),
    [("H100 or H200", "names 2 GPUs; a claim names one"), ("", None), ("  ", None)],
)
def test_a_claim_names_one_gpu_or_none(gpu: str, says: str | None) -> None:
    spec = {"metric": "throughput_qps", "gpu": gpu, "delta_pct": 5.0}
    if says is None:
        assert ClaimSpec.model_validate(spec).gpu is None
    else:
        with pytest.raises(ValueError, match=says):
            ClaimSpec.model_validate(spec)


@pytest.mark.parametrize("delta", [-150.0, 1e300])
def test_a_claim_of_an_impossible_size_is_refused(delta: float) -> None:
    metric = "latency_p95_s" if delta < 0 else "throughput_qps"
    with pytest.raises(ValueError, match=r"is outside \(-100, \+10000\]"):
        ClaimSpec.model_validate({"metric": metric, "delta_pct": delta})


def test_the_words_lead_with_the_claim_s_row_on_every_commit(tmp_path: Path) -> None:
    """Both GPUs improved; H100's interval is narrower, so without a lead its row would
    head the verdict on one commit and H200's on the next. The claim is about H200: its
    row leads while it is among the improved ones; a regression elsewhere still decides."""
    rows = [
        _row(gpu="H100", verdict="improved", delta_pct=10.1, ci_low_pct=8.0, ci_high_pct=12.0),
        _row(gpu="H200", verdict="improved", delta_pct=13.1, ci_low_pct=9.0, ci_high_pct=17.0),
    ]
    assert decide(rows, [])[1].startswith("H100 streaming c=16")
    lead = Lead(gpu="H200", metric="throughput_qps", mode="streaming", concurrency=16)
    verdict, reason = decide(rows, [], lead)
    assert (verdict, reason.split(":")[0]) == ("improved", "H200 streaming c=16")
    flat = [rows[0], _row(gpu="H200", verdict="inconclusive", delta_pct=1.0)]
    assert decide(flat, [], lead)[1].startswith("H100")  # the verdict rests on H100
    lost = [rows[1], _row(gpu="H100", verdict="regressed", delta_pct=-6.0)]
    assert decide(lost, [], lead)[1].startswith("H100")  # what regressed is said
    other_c = [
        _row(verdict="improved", delta_pct=4.0, ci_low_pct=3.5, ci_high_pct=4.5),
        _row(concurrency=8, verdict="improved", delta_pct=6.0, ci_low_pct=2.0, ci_high_pct=10.0),
    ]
    h = headline(other_c, "H200", Lead(concurrency=8))
    assert h is not None
    assert h.concurrency == 8
    h = headline(other_c, "H200")
    assert h is not None
    assert h.concurrency == 16


def test_the_claim_or_the_config_names_the_lead(tmp_path: Path) -> None:
    ev = evidence(
        tmp_path,
        candidate(metric="throughput_qps", mode="non-streaming", gpu="H200", delta_pct=15.0),
        speedup=0.15,
    )
    assert ev.verdict == "improved"
    assert ev.reason.startswith("H200 non-streaming"), ev.reason
    policy = Policy(lead=Lead(mode="streaming"))
    ev2, _ = build(
        Inputs(
            bundles=[clean_bundle(tmp_path / "b2", speedup=0.15)],
            candidate=candidate(),  # no claim: both modes are primary; `headline:` picks
            policy=policy,
        )
    )
    assert ev2.reason.startswith("H200 streaming"), ev2.reason
