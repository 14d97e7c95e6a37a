"""`rsi-runner verify --rounds auto` with the dry task: real processes, a real bundle.

A head twice as fast is decided after a few pairs of rounds and the rest of the plan is
never run; an A/A pair ends `equivalent` or `inconclusive`, and the manifest says why.
Both record the GPU minutes each side held (here: the CPU stand-in's run time).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.test_runner_verify import LONG_BURSTS, ROOT, make_repo, runner_cmd, runner_env


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    """Each side runs as its own user, which must reach its worktree (conftest)."""
    return reachable_tmp


def verify_auto(
    tmp_path: Path, base_cfg: dict[str, Any], head_cfg: dict[str, Any], *extra: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    import json

    b, h = make_repo(tmp_path / "repo", base_cfg, head_cfg)
    out = tmp_path / "bundle"
    cmd = runner_cmd(tmp_path / "repo", b, h, out, "--rounds", "auto", *extra)
    r = subprocess.run(cmd, cwd=ROOT, env=runner_env(), capture_output=True, text=True, timeout=300)
    assert (out / "manifest.json").is_file(), r.stderr
    return r, json.loads((out / "manifest.json").read_text())


def _minutes_match(m: dict[str, Any]) -> None:
    g = m["gpu_minutes"]
    for side in ("base", "head"):
        held = sum(
            (x["run_s"] - (x.get("gpu_wait_s") or 0.0)) / 60 for x in m["runs"] if x["side"] == side
        )
        assert g[side] == pytest.approx(held, abs=1e-3)
        assert g[side] > 0
    assert g["total"] == pytest.approx(g["base"] + g["head"], abs=1e-3)


def test_a_head_twice_as_fast_is_decided_in_few_rounds(tmp_path: Path) -> None:
    slow = LONG_BURSTS
    r, m = verify_auto(
        tmp_path, {**slow, "speed": 1.0}, {**slow, "speed": 2.0}, "--max-rounds", "8"
    )
    assert r.returncode == 0, r.stderr
    assert m["complete"] is True
    assert m["benchmark"]["rounds"] == "auto"
    assert m["benchmark"]["max_rounds"] == 8
    a = m["adaptive"]
    assert a["stopped"] == "decided"
    assert a["decisions"] == {"non-streaming c4": "improved"}
    assert a["threshold_pct"] == 3.0
    assert a["alpha"] == 0.05
    assert "Lan-DeMets" in a["method"]
    row = a["rows"]["non-streaming c4"]
    assert row["rounds"] <= 3, a["looks"]
    assert "improved past ±3%" in row["reason"]
    # a look after each pair from the second on; the last one decided
    assert [x["round"] for x in a["looks"]] == list(range(2, row["rounds"] + 1))
    last = a["looks"][-1]
    assert last["verdict"] == "improved"
    assert last["ci_pct"][0] > 0
    assert 60 < last["delta_pct"] < 140
    # only the rounds it needed ran: balanced pairs, nothing skipped
    ids = [x["id"] for x in m["runs"]]
    assert ids[:4] == [
        "r1-base-nonstream-c4",
        "r1-head-nonstream-c4",
        "r2-head-nonstream-c4",
        "r2-base-nonstream-c4",
    ]
    assert len(ids) == 2 * row["rounds"]
    assert all(x["status"] == "ok" for x in m["runs"])
    _minutes_match(m)
    # The operator watched it happen: each run and each look as it ended, then why it stopped.
    said = r.stderr
    assert said.count(" left] run ") == len(ids)
    assert "left] run 1 of 16 ok: base non-streaming c4 round 1" in said  # 8 rounds planned
    assert "left] non-streaming c4 after round 2: head vs base +" in said
    assert "decided: improved" in said
    assert "rsi-runner: stopped: decided" in said
    assert "rsi-runner:   non-streaming c4: improved, improved past ±3% after" in said


def test_an_a_a_pair_ends_equivalent_or_inconclusive_and_says_why(tmp_path: Path) -> None:
    r, m = verify_auto(
        tmp_path, {"speed": 1.0}, {"speed": 1.0}, "--max-rounds", "4", "--threshold-pct", "5"
    )
    assert r.returncode == 0, r.stderr
    a = m["adaptive"]
    verdict = a["decisions"]["non-streaming c4"]
    row = a["rows"]["non-streaming c4"]
    assert verdict in ("equivalent", "inconclusive"), a
    assert a["threshold_pct"] == 5.0
    if verdict == "equivalent":
        assert a["stopped"] == "decided"
        assert "inside ±5%" in row["reason"]
    else:
        assert a["stopped"] == "max-rounds"
        assert row["rounds"] == 4
        assert row["reason"].startswith("the most rounds (4 a side) were run before a decision")
        assert "could have detected about ±" in row["reason"]
        assert row["detectable_pct"] > 0
    _minutes_match(m)


def test_fixed_rounds_record_gpu_minutes_and_no_adaptive_plan(tmp_path: Path) -> None:
    b, h = make_repo(tmp_path / "repo", {}, {})
    out = tmp_path / "bundle"
    import json

    r = subprocess.run(
        runner_cmd(tmp_path / "repo", b, h, out),  # --rounds 2
        cwd=ROOT,
        env=runner_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["adaptive"] is None
    assert m["benchmark"]["rounds"] == 2
    assert len(m["runs"]) == 4
    _minutes_match(m)


def test_a_budget_too_small_for_a_pair_stops_with_budget(tmp_path: Path) -> None:
    r, m = verify_auto(tmp_path, {}, {"speed": 1.02}, "--gpu-minutes", "0.001")
    assert r.returncode == 0, r.stderr
    a = m["adaptive"]
    assert a["stopped"] == "budget"
    assert a["decisions"] == {"non-streaming c4": "inconclusive"}
    assert a["gpu_minutes_budget"] == 0.001
    row = a["rows"]["non-streaming c4"]
    assert row["reason"].startswith("the GPU-minute budget (0.001) was spent before a decision")
    # the first pair always fits an empty record (nothing measured yet), then no more
    assert row["rounds"] == 1
    assert len(m["runs"]) == 2


@pytest.mark.long
def test_a_failed_round_adds_no_look_and_is_not_counted(tmp_path: Path) -> None:
    """A run that fails brings no new data: no repeated look, and `rounds` counts the
    rounds a side that were measured, not the pairs that were tried (the last pair fails
    too, so nothing after it can put the count right)."""
    r, m = verify_auto(
        tmp_path,
        {"hang_after": 3, "fail_rounds": [4]},
        {"hang_after": 3, "fail_rounds": [2, 4]},
        "--max-rounds",
        "4",
        "--threshold-pct",
        "0.1",
        "--run-timeout",
        "4",
    )
    assert r.returncode == 0, r.stderr
    a = m["adaptive"]
    ok = {
        s: sum(x["status"] == "ok" and x["side"] == s for x in m["runs"]) for s in ("base", "head")
    }
    assert ok == {"base": 3, "head": 2}
    seen = [(x["base_rounds"], x["head_rounds"]) for x in a["looks"]]
    assert len(seen) == len(set(seen))
    assert a["rows"]["non-streaming c4"]["rounds"] == 2
