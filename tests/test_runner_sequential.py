"""The sequential design with a server every row can share: one start a side and round.

Real processes and the dry task (its server command has `{round}` and `{side}`, nothing
of the row's): four rows cost four server starts in two rounds, not sixteen; a server
that dies fails the rest of its block, naming why; `--rounds auto` looks at every row
after each round and drops the decided ones from the next.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evidence.build import Inputs
from runners import schedule
from runners.adaptive import Rounds
from runners.sequential import shares_rows
from tests.test_runner_verify import build, by_id, verify

ROWS = ("--modes", "streaming,non-streaming", "--concurrencies", "1,4", "--design", "sequential")


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    """Each side runs as its own user, which must reach its worktree (conftest)."""
    return reachable_tmp


def servers(out: Path, m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {x["id"]: json.loads((out / x["files"]["server"]).read_text()) for x in m["runs"]}


def test_four_rows_share_one_server_start_a_side_and_round(tmp_path: Path) -> None:
    r, out, m = verify(tmp_path, {}, {"speed": 1.3}, *ROWS)
    assert r.returncode == 0, r.stderr
    assert m["complete"] is True
    ids = [x["id"] for x in m["runs"]]
    assert len(ids) == 16
    # round-major: each block is one side's four rows, in the balanced order
    assert [i.split("-")[:2] for i in ids[::4]] == [
        ["r1", "base"],
        ["r1", "head"],
        ["r2", "head"],
        ["r2", "base"],
    ]
    info = servers(out, m)
    started = [i for i in ids if info[i]["startup_s"] is not None]
    assert started == ids[::4]  # four starts, each the first run of its block
    for k in range(0, 16, 4):
        block = ids[k : k + 4]
        assert {info[i]["port"] for i in block} == {info[block[0]]["port"]}
        assert all(info[i]["server_started_in"] == block[0] for i in block[1:])
        # the block's runs point at the one server log, which holds one start
        logs = {by_id(m)[i]["logs"]["server"] for i in block}
        assert len(logs) == 1
        assert (out / logs.pop()).read_text().count("$ ") == 1
    assert all(x["status"] == "ok" for x in m["runs"])
    # start-ups are counted once each in the GPU minutes
    held = sum((x["run_s"] - (x.get("gpu_wait_s") or 0.0)) / 60 for x in m["runs"])
    assert m["gpu_minutes"]["total"] == pytest.approx(held, abs=1e-3)
    ev, _ = build(Inputs(bundles=[out]))
    rows = {(x.mode, x.concurrency) for x in ev.study if x.metric == "throughput_qps"}
    assert all(x.n_base == x.n_head == 2 for x in ev.study if x.metric == "throughput_qps")
    assert rows == {("streaming", 1), ("streaming", 4), ("non-streaming", 1), ("non-streaming", 4)}
    assert ev.gpus["CPU"].startup_s["base"] is not None


def test_a_server_that_dies_fails_the_rest_of_its_block(tmp_path: Path) -> None:
    # The head's server of round 2 dies in its first row; the rows after it are not run
    # on a dead server and say so. Round 2's base server is a new start and runs them all.
    r, out, m = verify(tmp_path, {}, {"crash_after": 9, "fail_rounds": [2]}, *ROWS)
    assert r.returncode == 0, r.stderr
    runs = m["runs"]
    block = [x for x in runs if x["round"] == 2 and x["side"] == "head"]
    assert [x["status"] for x in block] == ["failed"] * 4
    assert block[0]["failure"] == "crashed"
    for x in block[1:]:
        assert x["failure"] == "crashed"
        assert x["error"].startswith("not run: the server it shared ended before it (")
    assert all(x["status"] == "ok" for x in runs if not (x["round"] == 2 and x["side"] == "head"))
    ev, _ = build(Inputs(bundles=[out]))
    assert any(f.code == "run-failed" for f in ev.audit)


def test_rounds_auto_drops_decided_rows_from_the_next_round(tmp_path: Path) -> None:
    r, _, m = verify(tmp_path, {}, {"speed": 2.0}, *ROWS, "--rounds", "auto", "--max-rounds", "8")
    assert r.returncode == 0, r.stderr
    a = m["adaptive"]
    assert set(a["decisions"].values()) == {"improved"}, a["looks"]
    assert a["stopped"] == "decided"
    n = max(row["rounds"] for row in a["rows"].values())
    assert n < 8
    # every row was looked at after each round it ran, and ran no round after its decision
    for name, row in a["rows"].items():
        looks = [x["round"] for x in a["looks"] if x["row"] == name]
        assert looks[-1] == row["rounds"]
        mode, conc = name.rsplit(" c", 1)
        ran = [x for x in m["runs"] if x["mode"] == mode and x["concurrency"] == int(conc)]
        assert len(ran) == 2 * row["rounds"]
    # one start a side and round, whatever number of rows were still running in it
    assert len([x for x in m["runs"] if x.get("startup_s") is not None]) == 2 * n


# --- which tasks share, and the walk itself (no processes) ------------------------------


def study(command: str, env: dict[str, str] | None = None, after_stop: bool = False) -> Any:
    server = SimpleNamespace(command=command, health="http://127.0.0.1:{port}/h", env=env or {})
    acc = SimpleNamespace(after_server_stop=after_stop)
    return SimpleNamespace(task=SimpleNamespace(server=server, accuracy=acc))


def test_a_server_whose_command_changes_with_the_row_is_started_per_run() -> None:
    assert shares_rows(study("serve --port {port} --round {round} --side {side}"))
    assert not shares_rows(study("serve --port {port} --max-batch {concurrency}"))
    assert not shares_rows(study("serve --port {port}", env={"MODE": "{mode}"}))
    assert not shares_rows(study("serve --requests {requests}"))
    # an accuracy step that needs the server stopped needs a server per run
    assert not shares_rows(study("serve --port {port}", after_stop=True))


def test_the_walk_hands_out_rounds_and_keeps_the_unrun_pending(tmp_path: Path) -> None:
    plan = schedule.plan(["streaming", "non-streaming"], [1, 4], 3, 8, 0)
    walk = Rounds(plan, adaptive=False, max_rounds=3, root=tmp_path)
    done: list[dict[str, Any]] = []
    blocks = walk.blocks(lambda: done)
    first = next(blocks)
    assert [p.id for p in first] == [
        "r1-base-stream-c1",
        "r1-base-stream-c4",
        "r1-base-nonstream-c1",
        "r1-base-nonstream-c4",
    ]
    # handed out but not recorded: an interruption now skips them too
    assert {p.id for p in first} <= {p.id for p in walk.pending()}
    assert len(walk.pending()) == 24
    done.extend({"id": p.id, "side": p.side, "status": "ok", "files": {}} for p in first)
    second = next(blocks)
    assert {p.side for p in second} == {"head"}
    assert len(walk.pending()) == 20
    rest = list(blocks)
    assert [{p.side for p in b} for b in rest] == [{"head"}, {"base"}, {"base"}, {"head"}]
    assert walk.pending() == []
    assert walk.rows["streaming c1"]["rounds"] == 3
