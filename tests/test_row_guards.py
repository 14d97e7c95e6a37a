"""Guards beyond the primary rows: a regression of the primary metric or of request
throughput in another mode or at another concurrency lowers the verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.repo_config import RepoConfig, parse
from evidence.build import Inputs, build
from evidence.model import Candidate, Evidence
from evidence.policy import Policy
from evidence.synth import BASE_SHA, HEAD_SHA
from tests.bundles import clean_bundle, edit_run, run_ids


def _candidate(**claim: Any) -> Candidate:
    return Candidate.model_validate(
        {
            "candidate_id": "c1",
            "task": "cosyvoice3",
            "repo": "sgl-project/sglang-omni",
            "base_sha": BASE_SHA,
            "title": "A change",
            "head": {"repo": "openrsi-bot/sglang-omni", "ref": "rsi/x", "sha": HEAD_SHA},
            "claim": claim or None,
            "gpus": ["H200"],
        }
    )


def _slower_head(bundle: Path, mode: str, factor: float) -> None:
    """The head's runs of `mode` took `factor` × as long: their throughput falls."""

    def longer(rows: list[dict[str, Any]], run: dict[str, Any]) -> None:
        run["wall_clock_s"] = round(run["wall_clock_s"] * factor, 3)

    for rid in run_ids(bundle, side="head", mode=mode):
        edit_run(bundle, rid, longer)


def _evidence(bundle: Path, policy: Policy) -> Evidence:
    claim = {"metric": "throughput_qps", "delta_pct": 15.0, "mode": "streaming"}
    ev, _ = build(Inputs(bundles=[bundle], candidate=_candidate(**claim), policy=policy))
    return ev


def _bundle(tmp_path: Path) -> Path:
    b = clean_bundle(tmp_path / "b", speedup=0.15)
    _slower_head(b, "non-streaming", 1.15 * 1.27)  # about −21% against base
    return b


def test_a_regression_in_the_other_mode_lowers_the_verdict(tmp_path: Path) -> None:
    ev = _evidence(_bundle(tmp_path), Policy())
    other = next(
        r
        for r in ev.study
        if r.metric == "throughput_qps" and r.mode == "non-streaming" and not r.primary
    )
    assert other.verdict == "regressed"
    assert other.delta_pct is not None
    assert other.delta_pct < -15
    assert other.guard
    assert other.guard_failed
    prim = [r for r in ev.study if r.primary]
    assert prim
    assert all(r.verdict == "improved" for r in prim)
    assert ev.verdict == "regressed"
    assert "non-streaming" in ev.reason
    assert "throughput fell" in ev.reason
    assert ev.gpus["H200"].verdict == "regressed"


def test_the_guard_threshold_comes_from_rsi_yml(tmp_path: Path) -> None:
    b = _bundle(tmp_path)
    loose = parse("guards:\n  other_rows_pct: 40\n").config
    assert loose.guards.other_rows_pct == 40.0
    assert loose.policy().guard_other_rows_pct == 40.0
    ev = _evidence(b, loose.policy())
    assert ev.verdict == "improved"  # −21% is within a 40% guard: a caveat only
    other = next(r for r in ev.study if r.metric == "throughput_qps" and not r.primary)
    assert other.guard
    assert not other.guard_failed
    assert _evidence(b, RepoConfig().policy()).verdict == "regressed"


def test_a_small_loss_elsewhere_stays_a_caveat(tmp_path: Path) -> None:
    b = clean_bundle(tmp_path / "b", speedup=0.15)
    _slower_head(b, "non-streaming", 1.15 * 1.05)  # about −5%: inside the 10% guard
    ev = _evidence(b, Policy())
    assert ev.verdict == "improved"


def test_an_unknown_guard_key_is_an_error() -> None:
    result = parse("guards:\n  other_rows: 5\n")
    assert not result.ok
    assert "guards" in (result.error or "")
