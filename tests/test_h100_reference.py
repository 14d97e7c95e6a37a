"""Bundles recorded on a real H100 by the runner (tests/fixtures/h100-reference): the
engine, judging each on its own, reaches the runner's verdict, and reads how the burst
length was chosen."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence.build import Inputs, build

FIXTURES = Path(__file__).parent / "fixtures" / "h100-reference"


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        ("bat-aa-off", "inconclusive"),
        ("bat-aa-auto", "inconclusive"),
        ("bat-plant-off", "improved"),
        ("bat-plant-auto", "improved"),
        ("alt-aag", "no-change"),
        ("alt-aag-swap", "no-change"),
        ("alt-plant", "improved"),
        ("alt-plant-swap", "regressed"),
        ("alt-graph", "improved"),
        ("seq-plant", "improved"),
    ],
)
def test_the_engine_agrees_with_the_runner_on_a_real_h100(name: str, verdict: str) -> None:
    ev, sources = build(Inputs(bundles=[FIXTURES / f"rsi-bundle-v-{name}-h100.zip"]))
    assert sources[0].manifest.complete
    assert sources[0].manifest.gpu == "H100"
    assert not [f for f in ev.audit if f.severity == "error"]
    assert ev.verdict == verdict


def test_the_burst_length_chosen_after_measuring_both_lengths_is_in_the_evidence() -> None:
    ev, sources = build(Inputs(bundles=[FIXTURES / "rsi-bundle-v-bat-aa-auto-h100.zip"]))
    design = ev.gpus["H100"].design
    assert design is not None
    sizing = design.burst_sizing
    assert sizing is not None
    # 3 pairs of 128, 3 pairs at the proposed 32, whose pairs varied less: 32 kept
    assert (sizing.initial, sizing.probed, sizing.probe_pairs, sizing.chosen) == (128, 32, 3, 32)
    assert sizing.initial_sd_pct is not None
    assert sizing.probe_sd_pct is not None
    assert sizing.probe_sd_pct < sizing.initial_sd_pct
    lengths = [r.requests for r in sources[0].manifest.runs if r.status == "ok"]
    assert lengths == [128] * 6 + [32] * 26
