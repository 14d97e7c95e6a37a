"""Bursts sized to the server (runners/bursts.py): the rule, and the alternate design
choosing a length after its first pairs with the dry task (real processes)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evidence.build import Inputs
from runners import bursts
from tests.test_runner_verify import build, verify


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    """Each side runs as its own user, which must reach its worktree (conftest)."""
    return reachable_tmp


def test_the_requests_own_spread_and_a_burst_s_overhead_ask_for_longer_bursts() -> None:
    # pairs that vary only as much as 64 requests of CV 0.4 explain: longest bursts
    spread = math.sqrt(2 * 0.16 / 64)
    z = bursts.size(64, 4, [spread, -spread, 0.0], [0.4] * 6, [6.4] * 6, [14.4] * 6)
    assert z is not None
    assert z.chosen == 256  # four times the task's
    assert z.between_sd_pct == 0.0
    assert "longest bursts" in z.reason


def test_level_moves_between_bursts_ask_for_shorter_ones() -> None:
    # pairs spread ±10% with a tiny request spread and little overhead: more, short pairs
    z = bursts.size(64, 4, [0.1, -0.1, 0.12, -0.08], [0.05] * 8, [6.4] * 8, [6.5] * 8)
    assert z is not None
    assert z.chosen == 16  # a quarter of the task's, a whole number of the concurrency
    assert z.between_sd_pct > 5


def test_the_length_is_where_the_cost_of_an_interval_is_least() -> None:
    c, o, t, n0 = 0.3, 8.0, 0.1, 64
    between = 0.0004  # σ_b = 2%
    total = between + 2 * c * c / n0
    ratios = [math.sqrt(total), -math.sqrt(total)]  # variance 2·total/1 … set below
    ratios = [x * math.sqrt(0.5) for x in ratios]  # sample variance = total
    z = bursts.size(n0, 1, ratios, [c] * 4, [t * n0] * 4, [t * n0 + o] * 4)
    assert z is not None
    want = math.sqrt(2 * c * c * o / (between * t))  # ≈ 190
    assert abs(z.chosen - want) <= 1
    cost = [(between + 2 * c * c / n) * (n * t + o) for n in (want / 2, want, want * 2)]
    assert cost[1] < cost[0]
    assert cost[1] < cost[2]


def test_a_small_promised_gain_keeps_the_task_s_length() -> None:
    # the best length would cut the cost by ~2%: three pairs cannot tell that apart
    c, o, t, n0 = 0.3, 2.0, 0.1, 64
    total = 0.0004 + 2 * c * c / n0
    ratios = [math.sqrt(total / 2), -math.sqrt(total / 2)]
    z = bursts.size(n0, 1, ratios, [c] * 4, [t * n0] * 4, [t * n0 + o] * 4)
    assert z is not None
    assert z.chosen == n0
    assert "under 20%" in z.reason


def test_too_little_measured_sizes_nothing() -> None:
    assert bursts.size(64, 4, [0.1], [0.2], [6.0], [7.0]) is None
    assert bursts.size(64, 4, [0.1, 0.0], [], [6.0], [7.0]) is None


def _proposal(initial: int, chosen: int, t: float = 0.01, o: float = 0.3) -> bursts.Sizing:
    return bursts.Sizing(initial, chosen, 3, 0.2, 10.0, t, o, "proposed")


def _spread(sd: float) -> list[float]:
    """Three log ratios whose sample SD is `sd`."""
    return [-sd, 0.0, sd]


def test_a_shorter_length_that_measures_worse_is_not_kept() -> None:
    """A server that batches: bursts of 32 swing far more than bursts of 128 (few batches
    a burst), which the one-length rule cannot see. Tried, then left."""
    first = bursts.Measured(128, _spread(0.15), [1.2] * 3)
    probe = bursts.Measured(32, _spread(0.50), [0.6] * 3)
    z = bursts.after_probe(_proposal(128, 32), first, probe, 16)
    assert (z.probed, z.probe_pairs) == (32, 3)
    assert z.chosen == 128
    assert z.initial_sd_pct == pytest.approx(15.0)
    assert z.probe_sd_pct == pytest.approx(50.0)
    assert "32 measured no better" in z.reason


def test_a_probe_that_measures_cheaper_is_kept() -> None:
    # the level moves between bursts (same spread at both lengths): shorter is cheaper
    first = bursts.Measured(64, _spread(0.10), [1.0] * 3)
    probe = bursts.Measured(16, _spread(0.10), [0.4] * 3)
    z = bursts.after_probe(_proposal(64, 16), first, probe, 4)
    assert z.chosen == 16
    assert (z.initial_pair_s, z.probe_pair_s) == (1.0, 0.4)


def test_where_the_spread_falls_as_one_over_n_the_fit_goes_longer() -> None:
    """Spread entirely the bursts' own (var = b/N) and overhead dear: both measured lengths
    cost more than the fit's longest, which is run though neither measured it."""
    b, t, o = 2.0, 0.01, 1.0

    def at(n: int) -> bursts.Measured:
        return bursts.Measured(n, _spread(math.sqrt(b / n)), [2 * (n * t + o)] * 3)

    z = bursts.after_probe(_proposal(64, 32, t, o), at(64), at(32), 4)
    assert z.chosen == 256  # four times the task's: the longest allowed
    assert "fit" in z.reason


def test_too_little_probed_keeps_the_proposal() -> None:
    first = bursts.Measured(64, _spread(0.1), [1.0] * 3)
    probe = bursts.Measured(16, [0.1], [0.4])
    proposal = _proposal(64, 16)
    assert bursts.after_probe(proposal, first, probe, 4) == proposal


@pytest.mark.parametrize(
    ("first", "probe", "concurrency"),
    [
        # var(N) = 1e-6 + 1/N, dear overhead: the fit asks for the longest, 4× 256
        (
            bursts.Measured(256, _spread(math.sqrt(1e-6 + 1 / 256)), [2 * (25.6 + 50)] * 3),
            bursts.Measured(128, _spread(math.sqrt(1e-6 + 1 / 128)), [2 * (12.8 + 50)] * 3),
            5,
        ),
        (
            bursts.Measured(64, [0.1, math.nan, 0.2], [1.0] * 3),
            bursts.Measured(16, _spread(0.1), [0.4] * 3),
            4,
        ),
        (
            bursts.Measured(64, _spread(0.1), [1e308] * 3),
            bursts.Measured(16, _spread(0.1), [1e308] * 3),
            4,
        ),
        (
            bursts.Measured(64, _spread(0.0), [1.0] * 3),
            bursts.Measured(16, _spread(0.0), [1.0] * 3),
            4,
        ),
    ],
)
def test_the_probed_length_stays_a_whole_number_of_slots_within_bounds(
    first: bursts.Measured, probe: bursts.Measured, concurrency: int
) -> None:
    """Rounding to the concurrency never steps past ¼×–4× the task's length, and what
    was measured cannot make the rule raise (a NaN, an overflow, no spread at all)."""
    proposal = bursts.Sizing(first.requests, probe.requests, 3, 0.2, 10.0, 0.0, 0.3, "proposed")
    z = bursts.after_probe(proposal, first, probe, concurrency)
    assert z.chosen % concurrency == 0
    assert first.requests / 4 <= z.chosen <= 4 * first.requests


def test_a_proposal_is_a_whole_number_of_slots_within_bounds() -> None:
    z = bursts.size(48, 5, [0.0, 0.5, 1.0], [0.01], [4.8] * 6, [4.85] * 6)
    assert z is not None
    assert z.chosen % 5 == 0
    assert 12 <= z.chosen <= 192


def test_latency_spread_is_read_from_the_speed_file(tmp_path: Path) -> None:
    f = tmp_path / "speed_results.json"
    rows = [{"latency_s": x, "is_success": True} for x in (1.0, 2.0, 3.0)]
    rows.append({"latency_s": 100.0, "is_success": False})  # a failed request: not counted
    f.write_text(json.dumps({"per_request": rows}))
    assert bursts.latency_cv(f) == pytest.approx(0.5)
    f.write_text(json.dumps({"summary": {}}))
    assert bursts.latency_cv(f) is None
    f.write_text("not json")
    assert bursts.latency_cv(f) is None


def test_rounds_until_decided_size_the_bursts_after_three_pairs(tmp_path: Path) -> None:
    """A/A on the dry task, bursts of 20: after three pairs of the first row the rest run
    at the chosen length, and the evidence says how it was chosen."""
    noisy = {"jitter": 0.6, "char_ms": 1.0}
    r, out, m = verify(
        tmp_path,
        noisy,
        noisy,
        "--design",
        "alternate",
        "--rounds",
        "auto",
        "--max-rounds",
        "6",
        "--modes",
        "streaming,non-streaming",
    )
    assert r.returncode == 0, r.stderr
    z = m["design"]["burst_sizing"]
    assert (z["initial"], z["pairs"]) == (20, 3)
    assert z["within_cv"] > 0.2  # the jitter shows in the requests' latencies
    assert z["chosen"] % 4 == 0  # the dry task's concurrency
    assert 8 <= z["chosen"] <= 80
    first = [x for x in m["runs"] if x["status"] != "skipped"]
    row = (first[0]["mode"], first[0]["concurrency"])
    # a length other than the task's is tried for three pairs of the row before it is kept
    tried = z["probed"] or z["chosen"]
    probe_end = 3 + z["probe_pairs"] if z["probed"] else math.inf
    for x in first:
        ours = (x["mode"], x["concurrency"]) == row
        if ours and x["round"] <= 3:
            assert x["requests"] == 20, x["id"]
        elif ours and x["round"] <= probe_end:
            assert x["requests"] == tried, x["id"]
        else:
            assert x["requests"] in {tried, z["chosen"]}, x["id"]
    if z["probed"]:
        assert z["probe_pairs"] == 3
        assert z["initial_sd_pct"] is not None
        assert z["probe_sd_pct"] is not None
    ev, _ = build(Inputs(bundles=[out]))
    d = ev.gpus["CPU"].design
    assert d is not None
    assert d.burst_sizing is not None
    assert d.burst_sizing.chosen == z["chosen"]
    if z["probed"]:
        assert f"the task's 20 requests for 3 pairs and {z['probed']} for 3" in d.summary
    elif z["chosen"] == 20:
        assert "of 20 requests (kept after 3 pairs measured the server" in d.summary
    else:
        assert f"the task's 20 requests for 3 pairs, then {z['chosen']} (sized to" in d.summary
    assert "reason" not in d.burst_sizing.model_dump()  # the runner's words stay out


def test_fixed_rounds_keep_the_task_s_length(tmp_path: Path) -> None:
    r, _, m = verify(tmp_path, {}, {}, "--design", "alternate", "--rounds", "4")
    assert r.returncode == 0, r.stderr
    assert "burst_sizing" not in m["design"]
    assert {x["requests"] for x in m["runs"]} == {20}


def test_the_dry_server_batches_requests_that_meet(tmp_path: Path) -> None:
    """`batch`: eight requests sent at once run in steps of at most four, one after the
    other, each request as long as its step (work 0.2 s; a step of n takes
    0.2 × (1 + 0.15 (n − 1)) s). The window is wide so that requests meet on a slow host
    too; what is asserted holds however the requests happened to arrive."""
    import concurrent.futures
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from tests.test_runner_verify import ROOT

    cfg = tmp_path / "dry.json"
    cfg.write_text(
        json.dumps({"batch": 4, "batch_window_ms": 300.0, "char_ms": 20.0, "jitter": 0.0})
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ROOT / "runners" / "dry" / "server.py"
    proc = subprocess.Popen([sys.executable, str(server), "--port", str(port), "--config", cfg])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)

        def speak(_: int) -> tuple[int, float]:
            body = json.dumps({"input": "ten chars!"}).encode()  # 10 × 20 ms
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/audio/speech", body)
            with urllib.request.urlopen(req, timeout=30) as r:
                doc = json.loads(r.read())
                return int(doc["batch_step"]), float(doc["engine_latency_s"])

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(speak, range(8)))
        wall = time.monotonic() - t0
        sizes = [n for n, _ in got]
        assert max(sizes) <= 4  # never more than `batch` in a step
        assert max(sizes) > 1  # requests that met ran together
        for n, lat in got:  # each took its whole step's work (a late joiner waits less
            # of the window than the first: the window is not asserted per request)
            assert lat >= 0.2 * (1 + 0.15 * (n - 1)) - 0.01
        # Eight in steps of at most four: at least two steps, one after the other.
        assert wall >= 2 * (0.3 + 0.2) - 0.01
        assert max(lat for _, lat in got) >= 2 * 0.2 + 0.3 - 0.01
    finally:
        proc.kill()
        proc.wait()
