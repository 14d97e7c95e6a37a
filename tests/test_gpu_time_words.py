"""GPU time is a figure: the minutes each side held the GPU (start-ups included) and why
adaptive rounds stopped reach the stored headline, the ledger and the `/rsi status`
reply; rounds until decided are said as such."""

from __future__ import annotations

from bot import messages
from bot.models import Verification
from tests.test_verdict_words import published


def adaptive_published() -> Verification:
    v = published("inconclusive")
    v.rounds, v.adaptive, v.gpu_budget_minutes = 10, True, 90.0
    assert v.headline is not None
    v.headline = {
        "H200": {
            **v.headline["H200"],
            "gpu_minutes": {"base": 21.5, "head": 22.25, "total": 43.75},
            "stopped": "max-rounds",
        }
    }
    return v


def test_ledger_cell_carries_gpu_minutes_and_the_stop() -> None:
    v = adaptive_published()
    [row] = messages.ledger_rows([v], v.id)
    assert messages.ledger_cell(row.cells["H200"]) == (
        "-3.5% [-21.4%, +18.4%] inconclusive · 43.8 GPU min (max-rounds)"
    )


def test_status_reply_says_gpu_time_per_kind_and_side_and_the_rounds() -> None:
    reply = messages.status_reply(adaptive_published(), "mia", 120.0, False)
    assert "rounds: rounds until decided (at most 10 a side, 90 GPU minutes per GPU kind)" in (
        reply
    )
    assert (
        "GPU time used, start-ups included: H200 43.8 min (base 21.5, head 22.2), "
        "rounds stopped: max-rounds"
    ) in reply
    assert "expected GPU time" not in reply


def test_without_recorded_minutes_the_old_words_stay() -> None:
    v = published("no-change")
    [row] = messages.ledger_rows([v], v.id)
    assert "GPU min" not in messages.ledger_cell(row.cells["H200"])
    reply = messages.status_reply(v, "mia", 120.0, False)
    assert "rounds: 5 rounds a side" in reply
    assert "GPU time not estimated yet: no earlier run of" in reply
