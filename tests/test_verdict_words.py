"""No change (equivalent within ± the threshold) and inconclusive (the interval too wide
to say) are distinct everywhere a verdict is said: the check run's title and conclusion
(both neutral), the claim status, the ledger, the `/rsi status` reply and the report."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot import messages
from bot.models import RunnerJob, Verification
from bot.verification.machine import CONCLUSION, JobState, State
from evidence.build import Inputs, build
from evidence.render import render_check, render_comment, render_report
from evidence.synth import BASE_SHA, HEAD_SHA
from tests.bundles import clean_bundle

REASONS = {
    "inconclusive": "H200 streaming c=16: throughput -3.5% [-21.4%, +18.4%] is too wide to "
    "tell a change of ±3.0% from none; the run could have detected about ±25.4%",
    "no-change": "every primary figure is within ±3.0% (equivalent), its 95% interval "
    "inside the threshold",
}
CLAIMS = {"inconclusive": "inconclusive", "no-change": "not-reproduced"}


def published(verdict: str) -> Verification:
    v = Verification(
        id=f"v-{verdict[:4]}01",
        created_at=datetime(2026, 1, 5, 9, 30, tzinfo=UTC),
        repo="sgl-project/sglang-omni",
        task="cosyvoice3",
        base_sha=BASE_SHA,
        head_sha=HEAD_SHA,
        head_repo="openrsi-bot/sglang-omni",
        head_ref="rsi/x",
        gpus=["H200"],
        rounds=5,
        modes=["streaming"],
        candidate={},
        trigger="push by @mia",
        state=State.PUBLISHED.value,
        verdict=verdict,
        reason=REASONS[verdict],
        claim_status=CLAIMS[verdict],
        headline={
            "H200": {
                "metric": "throughput_qps",
                "mode": "streaming",
                "concurrency": 16,
                "delta_pct": -3.5,
                "ci_low_pct": -21.4,
                "ci_high_pct": 18.4,
                "verdict": verdict,
                "claim_status": CLAIMS[verdict],
            }
        },
    )
    v.jobs = [RunnerJob(gpu="H200", state=JobState.KEPT.value)]
    return v


@pytest.mark.parametrize("verdict", ["inconclusive", "no-change"])
def test_check_run_title_and_conclusion(verdict: str) -> None:
    assert CONCLUSION[verdict] == "neutral"
    title, _ = messages.check_published(published(verdict), "summary")
    assert title.startswith(f"{verdict} (head ")


def test_ledger_and_status_reply_tell_the_two_apart() -> None:
    wide, same = published("inconclusive"), published("no-change")
    rows = messages.ledger_rows([wide], wide.id)
    assert messages.ledger_cell(rows[0].cells["H200"]) == "-3.5% [-21.4%, +18.4%] inconclusive"
    assert rows[0].claim == "claim undecided"
    assert messages.ledger_rows([same], same.id)[0].claim == "claim gone"
    reply = messages.status_reply(wide, "mia", 120.0, False)
    assert "**published** — inconclusive: H200 streaming c=16" in reply
    assert "claim undecided" in reply
    reply = messages.status_reply(same, "mia", 120.0, False)
    assert "no-change: every primary figure is within ±3.0% (equivalent)" in reply
    assert "claim gone" in reply


def test_an_inconclusive_study_says_so_in_every_text(tmp_path: Path) -> None:
    ev, _sources = build(Inputs(bundles=[clean_bundle(tmp_path / "b", round_cv=0.15)]))
    assert ev.verdict == "inconclusive"
    first = render_check(ev, None).split("\n", 1)[0]
    assert first.startswith("## `INCONCLUSIVE` for head ")
    assert "): H200 " in first
    assert "## Performance evidence: `INCONCLUSIVE`" in render_comment(ev, None)
    (tmp_path / "plots").mkdir()
    report = render_report(ev, tmp_path)
    assert '<span class="v v-inconclusive">INCONCLUSIVE</span>' in report
    assert ".v-no-change, .v-inconclusive" in report
