"""GPU minutes estimated before a verification runs, and the budgets checked against them.

The model (bot/estimate.py) scales what the repository's runners recorded for the task;
through the stand-in GitHub, a request whose estimate passes a budget is answered and
ended before anything is dispatched.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bot import estimate
from bot.estimate import Unit
from tests import appkit
from tests.standin import GitHubStandIn
from tests.test_life_words import WRITER, comments_posted, mentions, say
from tests.worlds import World, world


def unit(design: str = "alternate", **kw: float) -> Unit:
    base = {
        "startup_s": 60.0,
        "run_s": 30.0,
        "starts_fixed": 2.0,
        "starts_per_round": 1.0,
        "rows_per_mode": 1.0,
        "rounds": 4.0,
    }
    base.update(kw)
    return Unit(
        design=design,
        startup_s=base["startup_s"],
        run_s=base["run_s"],
        run_s_range=(base["run_s"] * 0.8, base["run_s"] * 1.2),
        startup_s_range=(base["startup_s"] * 0.9, base["startup_s"] * 1.1),
        starts_fixed=base["starts_fixed"],
        starts_per_round=base["starts_per_round"],
        rows_per_mode=base["rows_per_mode"],
        rounds=base["rounds"],
        samples=3,
        gpu="H100",
    )


def test_resident_designs_pay_their_starts_once_sequential_ones_every_round() -> None:
    # 2 modes, 1 row each, 5 rounds a side: 20 runs of 30 s; starts of 60 s each
    alt = estimate.minutes(unit("alternate"), 5, 2, 60.0, 30.0)
    seq = estimate.minutes(unit("sequential"), 5, 2, 60.0, 30.0)
    per_row = estimate.minutes(unit("sequential", starts_per_round=2.0), 5, 2, 60.0, 30.0)
    assert alt == pytest.approx((2 * 60 + 20 * 30) / 60)  # 12 min
    assert seq == pytest.approx((10 * 60 + 20 * 30) / 60)  # 20 min: a start a side and round
    assert per_row == pytest.approx((20 * 60 + 20 * 30) / 60)  # 30 min: a start a run


def test_fixed_rounds_range_over_the_recorded_spread_adaptive_ones_up_to_the_cap() -> None:
    rec = {"H100": unit("alternate")}
    fixed = estimate.estimate(rec, ["H100"], rounds=5, modes=2, adaptive=False, cap=None)
    assert fixed is not None
    g = fixed.gpus["H100"]
    assert g.typical == pytest.approx(12.0)
    assert g.low < g.typical < g.high
    auto = estimate.estimate(rec, ["H100"], rounds=10, modes=2, adaptive=True, cap=15.0)
    assert auto is not None
    a = auto.gpus["H100"]
    # from the first look (2 rounds a side) to the most rounds, at most the cap
    assert a.low == pytest.approx((2 * 54 + 8 * 24) / 60, abs=0.01)
    assert a.typical == pytest.approx((2 * 60 + 16 * 30) / 60, abs=0.01)  # 4 rounds, recorded
    assert a.high == 15.0
    assert a.capped
    assert auto.to_json()["high"] == 15.0
    assert estimate.Estimate.from_json(auto.to_json()) == auto


def test_a_gpu_kind_without_records_borrows_another_s_and_says_so() -> None:
    got = estimate.estimate(
        {"H100": unit()}, ["H100", "H200"], rounds=5, modes=1, adaptive=False, cap=None
    )
    assert got is not None
    assert got.gpus["H100"].basis == "3 earlier runs on H100"
    assert got.gpus["H200"].basis == "none on H200 yet, so H100's 3 earlier runs"
    assert got.typical == pytest.approx(2 * got.gpus["H100"].typical)
    assert estimate.estimate({}, ["H100"], rounds=5, modes=1, adaptive=False, cap=None) is None


def _record(**kw: object) -> dict[str, object]:
    """A recorded cost as `units` hands it on: the cost and its verification's commits."""
    c: dict[str, object] = {
        "design": "alternate",
        "starts": 2,
        "startup_s": 60.0,
        "rows": 1,
        "modes": 1,
        "rounds": 4,
        "runs": 8,
        "run_s": 30.0,
        "adaptive": False,
        "base_sha": "b" * 40,
        "head_sha": "h" * 40,
        "stopped": None,
    }
    c.update(kw)
    return c


def test_a_commit_measured_before_runs_as_long_as_it_did() -> None:
    records = [  # latest first: main's commit `m` measured at 10 s a run, as head then base
        _record(base_sha="m", base_run_s=10.0, head_sha="x", head_run_s=50.0),
        _record(base_sha="o", base_run_s=30.0, head_sha="m", head_run_s=14.0),
        _record(base_sha="p", base_run_s=30.0, head_sha="q", head_run_s=30.0),
    ]
    u = estimate._unit("H100", records)
    assert u.by_commit == {"m": 10.0, "x": 50.0, "o": 30.0, "p": 30.0, "q": 30.0}
    assert u.run_s == 30.0  # the task's median a run

    def typical(base: str | None, head: str | None) -> float:
        got = estimate.estimate(
            {"H100": u}, ["H100"], rounds=5, modes=1, adaptive=False, cap=None,
            base_sha=base, head_sha=head,
        )  # fmt: skip
        assert got is not None
        return got.gpus["H100"].typical

    # 2 starts of 60 s and 10 runs: the base's own 10 s, a new head the task's 30 s
    assert typical("m", "new") == pytest.approx((2 * 60 + 5 * 10 + 5 * 30) / 60, abs=0.01)
    assert typical("m", "x") == pytest.approx((2 * 60 + 5 * 10 + 5 * 50) / 60, abs=0.01)
    assert typical("new", "newer") == typical(None, None)
    assert typical(None, None) == pytest.approx((2 * 60 + 10 * 30) / 60, abs=0.01)


def test_a_null_control_adds_its_runs_and_its_start() -> None:
    plain = estimate._unit("H100", [_record()])
    with_ctl = estimate._unit("H100", [_record(starts=3, control_runs=8)])
    assert (plain.control_share, with_ctl.control_share) == (0.0, 1.0)

    def typical(u: Unit, control: bool | None) -> float:
        got = estimate.estimate(
            {"H100": u}, ["H100"], rounds=4, modes=1, adaptive=False, cap=None, control=control
        )
        assert got is not None
        return got.gpus["H100"].typical

    bare = (2 * 60 + 8 * 30) / 60  # 6 min
    ctl = (3 * 60 + 16 * 30) / 60  # 11 min: the control's start and as many runs again
    assert typical(plain, None) == typical(plain, False) == pytest.approx(bare)
    assert typical(plain, True) == pytest.approx(ctl)  # recorded without, planned with
    assert typical(with_ctl, None) == typical(with_ctl, True) == pytest.approx(ctl)
    assert typical(with_ctl, False) == pytest.approx(bare)


def test_rounds_stopped_before_deciding_are_a_floor_not_where_deciding_stops() -> None:
    cut = _record(adaptive=True, runs=24, stopped="cut-short")  # 12 rounds a side, undecided
    decided = _record(adaptive=True, runs=6, stopped="decided")  # 3 rounds a side
    assert estimate._unit("H100", [cut, decided]).rounds == 3.0
    only_cut = estimate._unit("H100", [cut])
    assert (only_cut.rounds, only_cut.rounds_at_least) == (None, 12.0)

    def rounds_of(u: Unit) -> float:
        got = estimate.estimate({"H100": u}, ["H100"], rounds=20, modes=1, adaptive=True, cap=None)
        assert got is not None
        return (60 * got.gpus["H100"].typical - 2 * 60) / (2 * 30)

    assert rounds_of(only_cut) == pytest.approx(12.0, abs=0.01)  # past halfway (11)
    short = estimate._unit("H100", [_record(adaptive=True, runs=8, stopped="budget")])
    assert rounds_of(short) == pytest.approx(11.0, abs=0.01)  # 4 is below halfway


def test_the_cost_of_a_bundle_with_a_null_control_counts_its_runs() -> None:
    from evidence.cost import cost_of
    from evidence.load import load

    fixtures = Path(__file__).parent / "fixtures" / "h200-reference"
    c = cost_of(load(fixtures / "rsi-bundle-v-alt-aagctl-h200.zip"))
    assert (c.starts, c.runs, c.control_runs) == (3, 28, 28)
    # 1.3834 GPU min, 3 starts of ~11.2 s, 56 bursts: ~0.88 s a burst (not 1.77 as if
    # the control's bursts were the real ones')
    assert c.run_s == pytest.approx(0.884, abs=0.01)
    assert c.base_run_s == pytest.approx(0.884, abs=0.01)
    assert c.head_run_s == pytest.approx(0.923, abs=0.01)
    plain = cost_of(load(fixtures / "rsi-bundle-v-alt-graph-h200.zip"))
    assert plain.control_runs == 0
    assert plain.base_run_s is not None
    assert plain.head_run_s is not None
    assert plain.base_run_s > 4 * plain.head_run_s  # eager base, CUDA-graph head


@pytest.mark.parametrize(
    "cost",
    [
        None,
        "40",
        {"startup_s": "40", "run_s": 1, "rounds": 2, "rows": 1, "modes": 1},
        {"startup_s": True, "run_s": 1, "rounds": 2, "rows": 1, "modes": 1},
        {"startup_s": 40, "run_s": None, "rounds": 2, "rows": 1, "modes": 1},
        {"startup_s": 40, "run_s": 1, "rounds": 0, "rows": 1, "modes": 1},
    ],
)
def test_a_cost_the_estimate_cannot_use_is_left_out(cost: object) -> None:
    assert not (isinstance(cost, dict) and estimate._usable(cost))


# --- through the App ---------------------------------------------------------------------


@pytest.fixture
def w(tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world("embedded", tmp_path, github) as x:
        yield x


CONFIG = (
    "gpus: [H200]\nrounds: 5\nmodes: [non-streaming, streaming]\nwatch:\n  tasks: [cosyvoice3]\n"
)


def _someones_pr(w: World, config: str) -> int:
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", config)
    pull = w.github.add_pull(appkit.UPSTREAM, head="octocat:faster-decode", head_sha="e" * 40)
    return int(pull["number"])


def _measured_once(w: World, number: int) -> float:
    """`/rsi verify` on the PR, finished with a bundle that records its GPU minutes; the
    minutes it recorded."""
    say(w, number, "/rsi verify", "c-first")
    v = w.latest(number)
    assert v.estimate is None  # nothing recorded yet for the task
    w.finish(v.id, base_sha=v.base_sha, head_sha=v.head_sha, gpu_minutes=True)
    done = w.verification(v.id)
    assert done.state == "published", w.reason(v.id)
    total = float((done.headline or {})["H200"]["gpu_minutes"]["total"])
    assert 10 < total < 40  # 20 runs of ~40 s start-up and a few seconds of requests
    return total


def test_a_fixed_rounds_request_over_the_verification_budget_is_refused_before_dispatch(
    w: World,
) -> None:
    # The first request has no estimate (nothing recorded): it runs, and records ~12 min.
    number = _someones_pr(w, CONFIG + "budget:\n  gpu_minutes: 8\n")
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    spent = _measured_once(w, number)
    assert spent > 8
    dispatched = len(w.github.dispatches)
    since = len(w.github.requests)
    say(w, number, "/rsi verify", "c-second")
    v = w.latest(number)
    assert v.state == "cancelled"
    assert (v.end_reason or {})["code"] == "over-budget"
    assert len(w.github.dispatches) == dispatched  # nothing ran
    [told] = [b for b in comments_posted(w, since) if mentions(b, WRITER)]  # no "done" too
    low = (v.estimate or {})["low"]
    assert low > 8
    assert f"is not started: its GPU time was estimated at {low:.0f} minutes or more" in told
    assert "over the 8 a verification with fixed rounds may spend" in told
    assert "ask fewer rounds, or `rounds=auto`" in told
    assert "\n\nEstimated GPU time: " in told
    assert "minutes likely (from 1 earlier run on H200)." in told
    # Rounds until decided stop within the budget: the same request with them runs.
    say(w, number, "/rsi verify rounds=auto", "c-auto")
    auto = w.latest(number)
    assert auto.state == "dispatched"
    assert auto.estimate is not None
    assert auto.estimate["high"] <= 8
    w.github.assert_clean()


def test_rsi_verify_whose_estimate_passes_the_pr_budget_is_refused(w: World) -> None:
    most = 25
    number = _someones_pr(
        w, CONFIG + f"budget:\n  pr_gpu_minutes: {most}\n  day_gpu_minutes: 10000\n"
    )
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    spent = _measured_once(w, number)
    since = len(w.github.requests)
    say(w, number, "/rsi verify", "c-second")
    v = w.latest(number)
    low = (v.estimate or {})["low"]
    assert spent < most < spent + low  # room left, but not for what it will likely take
    assert (v.state, (v.end_reason or {}).get("code")) == ("cancelled", "over-budget")
    [told] = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert f"this PR have spent or hold {spent:.0f} of its {most} GPU minutes" in told
    assert "ask fewer rounds or GPU kinds, or raise the budget" in told
    w.github.assert_clean()


@pytest.mark.parametrize(
    "junk",
    [
        {"starts": "x"},
        {"starts": [1]},
        {"rounds": 10**400},
        {"startup_s": 1e308},
        {"startup_s": float("nan")},
        {"run_s": -100.0},
        {"modes": 0},
    ],
)
def test_a_damaged_cost_record_is_left_out_not_believed(junk: dict[str, object]) -> None:
    good = {
        "design": "alternate",
        "starts": 2,
        "startup_s": 60.0,
        "rows": 2,
        "modes": 2,
        "rounds": 4,
        "runs": 16,
        "run_s": 30.0,
    }
    assert estimate._usable(good)
    assert not estimate._usable({**good, **junk})


@pytest.mark.parametrize(
    "doc",
    [
        None,
        {},
        {"gpus": {}},
        {"gpus": {"H100": "x"}},
        {"gpus": {"H100": {"low": "1", "typical": 2, "high": 3}}},
        {"gpus": {"H100": {"low": float("inf"), "typical": 2, "high": 3}}},
    ],
)
def test_a_stored_estimate_that_is_not_one_reads_as_none(doc: object) -> None:
    assert estimate.Estimate.from_json(doc) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"gpus": {}},
        {"gpus": {"H100": {}}, "low": 1, "high": 2, "typical": 1.5},
        {"gpus": {"H100": "x"}, "low": "a"},
        {"gpus": {"H100": {"capped": "yes", "basis": 7}}, "low": 1, "high": 20, "typical": 5},
    ],
)
def test_the_words_survive_a_stored_estimate_of_any_shape(doc: dict[str, object]) -> None:
    from bot import messages
    from tests.test_app_messages_golden import hostile_verification

    v = hostile_verification("queued")
    v.estimate = doc
    said = messages.reverify_queued("mia", v)
    assert "queued on H100, H200" in said
    assert "(from )" not in said


# --- against what real verifications spent -----------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures"
H200_SEQUENCE = [
    FIXTURES / "h200-reference" / f"rsi-bundle-v-{n}-h200.zip"
    for n in (
        "alt-aa",
        "alt-aag-swap",
        "alt-plant-swap",
        "alt-graph",
        "alt-aag",
        "alt-plant",
        "seq-plant",
        "alt-aagctl",
    )
]
H100_SEQUENCE = [
    FIXTURES / "h100-reference" / f"rsi-bundle-v-{n}-h100.zip"
    for n in ("alt-aag", "alt-plant", "alt-aag-swap", "alt-plant-swap", "alt-graph", "seq-plant")
]


@pytest.mark.parametrize("paths", [H200_SEQUENCE, H100_SEQUENCE], ids=["h200", "h100"])
def test_on_real_gpu_verifications_the_estimate_is_within_thirty_percent(
    paths: list[Path],
) -> None:
    """The real verifications of the reference task, in the order run, each estimated as
    the App would have from the ones before it (bench/estimate.py): the median error of
    the likely figure within ±30%, and the actual inside the stated range nearly always."""
    from bench.estimate import replay

    rows = [r for r in replay(paths) if r.error_pct is not None]
    assert len(rows) == len(paths) - 1
    errors = sorted(abs(r.error_pct or 0.0) for r in rows)
    assert statistics.median(errors) <= 30.0, errors
    assert sum(r.inside for r in rows) >= len(rows) - 1


# --- damaged records (one never takes the estimate, and the budget check, away) ----------


class _Rows:
    """What `estimate.units` reads of a session: the task's published verifications."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def scalars(self, _query: object) -> list[Any]:
        return self.rows


def _published(cost: object, base: str = "e" * 40, head: str = "f" * 40) -> SimpleNamespace:
    return SimpleNamespace(
        headline={"H100": {"cost": cost, "stopped": None}}, base_sha=base, head_sha=head
    )


def _plan(**kw: object) -> Any:
    v: dict[str, object] = {
        "repo": "o/r",
        "task": "t",
        "gpus": ["H100"],
        "rounds": 5,
        "modes": ["streaming"],
        "adaptive": False,
        "gpu_budget_minutes": None,
        "base_sha": "c" * 40,
        "head_sha": "d" * 40,
    }
    v.update(kw)
    return SimpleNamespace(**v)


@pytest.mark.parametrize(
    "junk",
    [
        {"base_run_s": 10**400},  # an integer past any float
        {"head_run_s": 10**400},
        {"control_runs": 10**400},
        {"base_run_s": float("nan"), "head_run_s": -1.0, "control_runs": True},
        {"control_runs": "8", "base_run_s": [1.0]},
    ],
)
def test_a_damaged_new_field_is_ignored_not_the_whole_estimate(junk: dict[str, object]) -> None:
    good = [_published(_record()) for _ in range(3)]
    damaged = _published({**_record(), **junk})
    est = estimate.for_verification(_Rows([damaged, *good]), _plan())  # type: ignore[arg-type]
    assert est is not None
    assert est.typical == pytest.approx((2 * 60 + 10 * 30) / 60, abs=0.01)


def test_a_damaged_headline_is_left_out() -> None:
    rows = [SimpleNamespace(headline=["H100"], base_sha="e", head_sha="f"), _published(_record())]
    est = estimate.for_verification(_Rows(rows), _plan())  # type: ignore[arg-type]
    assert est is not None
    assert est.gpus["H100"].basis == "1 earlier run on H100"


def test_a_damaged_budget_gives_no_estimate_rather_than_a_negative_one() -> None:
    plan = _plan(adaptive=True, gpu_budget_minutes=-5.0)
    assert estimate.for_verification(_Rows([_published(_record())]), plan) is None  # type: ignore[arg-type]
