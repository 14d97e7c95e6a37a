"""The engine's paired analysis (evidence/stats.py `compare_paired`, evidence/study.py):
against SciPy, and which bundles get it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from evidence.load import Source
from evidence.policy import Policy
from evidence.stats import compare, compare_paired
from evidence.study import build_study
from tests.sources import QpsRun, qps_source


def _ols(d: np.ndarray, second: np.ndarray) -> tuple[float, float]:
    fit = stats.linregress(np.where(second, 1.0, -1.0), d)
    return float(fit.intercept), float(fit.intercept_stderr)


def test_compare_paired_is_ols_with_the_order_on_log_ratios() -> None:
    rng = np.random.default_rng(1)
    base = 50 * np.exp(rng.normal(0, 0.05, 10))
    head = base * 1.04 * np.exp(rng.normal(0, 0.02, 10))
    second = np.array([i % 2 == 0 for i in range(10)])
    c = compare_paired(base, head, second, "log")
    mu, se = _ols(np.log(head) - np.log(base), second)
    q = stats.t.ppf(0.975, 8)
    assert c.delta == pytest.approx(math.expm1(mu))
    assert c.lo == pytest.approx(math.expm1(mu - q * se))
    assert c.hi == pytest.approx(math.expm1(mu + q * se))
    assert c.p == pytest.approx(2 * stats.t.sf(abs(mu) / se, 8))
    assert c.mde == pytest.approx(math.expm1((q + stats.t.ppf(0.8, 8)) * se))
    assert c.delta_abs == pytest.approx(head.mean() - base.mean())


def test_compare_paired_falls_back_to_a_one_sample_t() -> None:
    base = np.array([10.0, 11.0, 12.0])
    head = np.array([10.5, 11.4, 12.9])
    c = compare_paired(base, head, np.array([True, False, True]), "log")
    d = np.log(head) - np.log(base)
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert c.lo == pytest.approx(math.expm1(ci.low))
    assert c.hi == pytest.approx(math.expm1(ci.high))
    assert c.p == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue)


def test_compare_paired_edges() -> None:
    # differences as a figure on the absolute scale, a missing figure left out
    base = np.array([0.10, 0.12, np.nan, 0.11])
    head = np.array([0.12, 0.15, 0.2, 0.12])
    c = compare_paired(base, head, np.array([True, False, True, False]), "diff")
    d = np.array([0.02, 0.03, 0.01])
    assert c.delta_abs == pytest.approx(d.mean())
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert (c.lo_abs, c.hi_abs) == pytest.approx((ci.low, ci.high))
    assert c.delta == pytest.approx(d.mean() / np.array([0.10, 0.12, 0.11]).mean())
    # one pair: an estimate, no interval
    one = compare_paired(np.array([1.0]), np.array([2.0]), np.array([True]), "log")
    assert one.delta == pytest.approx(1.0)
    assert one.lo is None
    assert one.p is None
    # identical differences: exact
    same = compare_paired(
        np.array([1.0, 2.0]), np.array([2.0, 4.0]), np.array([True, False]), "log"
    )
    assert (same.lo, same.hi, same.p) == pytest.approx((1.0, 1.0, 0.0))


def _source(design: dict[str, Any] | None, runs: list[tuple[str, int, float, str]]) -> Source:
    """runs: (side, round, throughput, status) in execution order."""
    return qps_source([QpsRun(*r) for r in runs], design=design)


ALTERNATE = {"name": "alternate", "paired": True, "unit": "burst"}
# ABBA bursts riding a host whose speed doubles halfway: head 4% faster throughout
ABBA = [
    ("base", 1, 40.0, "ok"), ("head", 1, 41.6, "ok"), ("head", 2, 41.7, "ok"),
    ("base", 2, 40.1, "ok"), ("base", 3, 80.0, "ok"), ("head", 3, 83.3, "ok"),
    ("head", 4, 83.1, "ok"), ("base", 4, 79.8, "ok"),
]  # fmt: skip


def _row(src: Source) -> Any:
    rows, _ = build_study([src], Policy(), None)
    (row,) = [r for r in rows if r.metric == "throughput_qps"]
    return row


def test_a_paired_design_is_compared_pair_by_pair() -> None:
    paired = _row(_source(ALTERNATE, ABBA))
    assert paired.method == "paired"
    assert paired.pairs == 4
    assert paired.verdict == "improved"
    assert paired.ci_low_pct > 3.0
    assert paired.note is None
    # the same runs read as today's rounds: the host's doubling swamps the 4%
    welch = _row(_source(None, ABBA))
    assert welch.method == "welch"
    assert welch.pairs is None
    assert welch.verdict == "inconclusive"
    b = np.array([40.0, 40.1, 80.0, 79.8])
    h = np.array([41.6, 41.7, 83.3, 83.1])
    lo = compare(b, h, "log").lo
    assert lo is not None
    assert welch.ci_low_pct == pytest.approx(100 * lo, abs=1e-3)


def test_only_a_design_the_engine_knows_is_paired() -> None:
    for design in (
        {"name": "sequential", "paired": False, "unit": "round"},
        {"name": "something-new", "paired": True},
        {"name": "alternate", "paired": False},
    ):
        assert _row(_source(design, ABBA)).method == "welch", design


def test_incomplete_pairs_are_left_out_and_counted() -> None:
    runs = [*ABBA, ("base", 5, 80.0, "ok"), ("head", 5, 0.0, "failed")]
    runs += [("head", 6, 83.0, "ok"), ("base", 6, 80.0, "ok")]
    row = _row(_source(ALTERNATE, runs))
    assert row.pairs == 5
    assert row.n_base == row.n_head == 5
    assert row.note is not None
    assert row.note.startswith("1 incomplete pair")
    few = _row(_source(ALTERNATE, [ABBA[0], ABBA[1], ("head", 2, 41.0, "failed"), ABBA[3]]))
    assert few.pairs == 1
    assert few.verdict == "inconclusive"
    assert few.note is not None
    assert "fewer than 2 complete pairs" in few.note
    assert "1 incomplete pair" in few.note
