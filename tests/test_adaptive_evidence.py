"""The evidence of a bundle whose rounds ran until decided (`--rounds auto`): why the
runner stopped, both intervals named, and the GPU minutes of each side — in evidence.json,
the comment and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evidence.build import Inputs, build, write
from evidence.model import Evidence, Manifest
from evidence.render import render_comment, render_report
from evidence.synth import SynthSpec, write_bundle

SPEC = SynthSpec(speedup=0.08, rounds=3, requests=40, concurrencies=(4,), seed=1)


def adaptive(stopped: str, budget: float | None = None) -> dict[str, Any]:
    """What runners/adaptive.py writes into the manifest."""
    verdict = "improved" if stopped == "decided" else "inconclusive"
    return {
        "method": "repeated confidence intervals, Lan-DeMets alpha spending",
        "threshold_pct": 3.0,
        "alpha": 0.05,
        "max_rounds": 10,
        "gpu_minutes_budget": budget,
        "looks": [{"row": "streaming c4", "rounds": 2}, {"row": "streaming c4", "rounds": 3}],
        "stopped": stopped,
        "decisions": {"streaming c4": verdict},
        "rows": {
            "streaming c4": {
                "verdict": verdict,
                "stopped": stopped,
                "rounds": 3,
                "detectable_pct": 4.2,
                "reason": f"{verdict} past ±3% after 3 round(s) a side"
                if stopped == "decided"
                else "the GPU-minute budget (30) was spent before a decision",
            }
        },
    }


def bundle(root: Path, **extra: Any) -> Path:
    b = write_bundle(root / "bundle", SPEC)
    path = b / "manifest.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc.update(extra)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return b


def evidence(root: Path, **extra: Any) -> Evidence:
    ev, _ = build(Inputs(bundles=[bundle(root, **extra)]))
    return ev


MINUTES = {"base": 6.25, "head": 5.5, "total": 11.75}


def test_manifest_reads_adaptive_and_gpu_minutes() -> None:
    m = Manifest.model_validate(
        {
            "schema": "rsi-bundle/1",
            "verification_id": "v-1",
            "repo": "o/r",
            "task": "t",
            "base": {"sha": "a"},
            "head": {"sha": "b"},
            "gpu": "H200",
            "runs": [],
            "adaptive": adaptive("budget", 30.0),
            "gpu_minutes": MINUTES,
        }
    )
    assert m.adaptive is not None
    assert m.gpu_minutes is not None
    assert (m.adaptive.stopped, m.adaptive.max_rounds, m.adaptive.gpu_minutes_budget) == (
        "budget",
        10,
        30.0,
    )
    assert m.adaptive.rows["streaming c4"].verdict == "inconclusive"
    assert (m.gpu_minutes.base, m.gpu_minutes.head, m.gpu_minutes.total) == (6.25, 5.5, 11.75)


@pytest.mark.parametrize(
    ("stopped", "words"),
    [
        ("decided", "every primary row was improved, regressed or equivalent"),
        ("max-rounds", "the most rounds a side were run"),
        ("budget", "the GPU-minute budget was spent"),
        ("cut-short", "cut short by a failed run or a time limit"),
    ],
)
def test_why_the_rounds_stopped_is_said_everywhere(
    tmp_path: Path, stopped: str, words: str
) -> None:
    ev = evidence(tmp_path, adaptive=adaptive(stopped, 30.0), gpu_minutes=MINUTES)
    g = ev.gpus["H200"]
    assert g.adaptive is not None
    assert g.adaptive.stopped == stopped
    assert g.gpu_minutes is not None
    assert g.gpu_minutes.total == 11.75
    ev2, sources = build(Inputs(bundles=[tmp_path / "bundle"]))
    write(ev2, sources, tmp_path / "out", None)
    doc = json.loads((tmp_path / "out" / "evidence.json").read_text(encoding="utf-8"))
    gj = doc["gpus"]["H200"]
    assert gj["adaptive"]["stopped"] == stopped
    assert gj["adaptive"]["rows"][0]["row"] == "streaming c4"
    assert gj["gpu_minutes"] == MINUTES

    comment = render_comment(ev, "https://rsi.example/r")
    report = render_report(ev, tmp_path / "out")
    for text in (comment, report):
        assert "rounds until decided (at most 10 a side, 30 GPU minutes)" in text
        assert f"stopped: <strong>{stopped}</strong>" in text or f"**{stopped}**" in text
        assert words in text
        # Both intervals are named: the runner's sequential one stopped it, the engine's
        # fixed-sample one is what the tables show.
        assert "sequential decision" in text
        assert "fixed-sample 95% intervals" in text
        assert "11.8 min of GPU time (base 6.2 min, head 5.5 min)" in text
        assert "start-ups included" in text


def test_fixed_rounds_with_gpu_minutes_say_the_minutes_only(tmp_path: Path) -> None:
    ev = evidence(tmp_path, gpu_minutes=MINUTES)
    assert ev.gpus["H200"].adaptive is None
    comment = render_comment(ev, None)
    assert "3 rounds a side" in comment
    assert "11.8 min of GPU time" in comment
    assert "sequential decision" not in comment
    assert "GPU time (start-ups included)" in render_report(ev, tmp_path)


def test_a_bundle_without_either_says_nothing_of_them(tmp_path: Path) -> None:
    ev = evidence(tmp_path)
    g = ev.gpus["H200"]
    assert (g.adaptive, g.gpu_minutes) == (None, None)
    comment = render_comment(ev, None)
    assert "Rounds and GPU time" not in comment
    assert "GPU time" not in render_report(ev, tmp_path)
