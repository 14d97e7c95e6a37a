"""The interval, the test, the detectable effect and Holm's correction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evidence.stats import compare, holm


def test_log_ratio_interval_matches_welch_by_hand() -> None:
    base = np.array([10.0, 10.2, 9.9, 10.1, 9.8])
    head = np.array([11.0, 11.3, 10.8, 11.1, 10.9])
    c = compare(base, head, "log")
    lb, lh = np.log(base), np.log(head)
    d = lh.mean() - lb.mean()
    vb, vh = lb.var(ddof=1) / 5, lh.var(ddof=1) / 5
    se = math.sqrt(vb + vh)
    df = (vb + vh) ** 2 / (vb**2 / 4 + vh**2 / 4)
    from scipy import stats

    t = stats.t.ppf(0.975, df)
    assert c.delta == pytest.approx(math.expm1(d))
    assert c.lo == pytest.approx(math.expm1(d - t * se))
    assert c.hi == pytest.approx(math.expm1(d + t * se))
    assert c.p is not None
    assert c.p < 1e-4
    assert c.mde == pytest.approx(math.expm1((t + stats.t.ppf(0.8, df)) * se))


def test_one_round_a_side_has_no_interval() -> None:
    c = compare(np.array([10.0]), np.array([12.0, 12.1]), "log")
    assert c.delta == pytest.approx(0.205, abs=1e-3)
    assert c.lo is None
    assert c.p is None


def test_identical_rounds_give_an_exact_difference() -> None:
    c = compare(np.array([5.0, 5.0, 5.0]), np.array([5.0, 5.0, 5.0]), "log")
    assert (c.delta, c.lo, c.hi, c.p) == (0.0, 0.0, 0.0, 1.0)


def test_diff_scale_for_rates_that_can_be_zero() -> None:
    c = compare(np.array([0.0, 0.0, 0.0]), np.array([0.01, 0.02, 0.015]), "diff")
    assert c.delta is None  # no ratio against zero
    assert c.delta_abs == pytest.approx(0.015)
    assert c.lo_abs is not None
    assert c.lo_abs > 0


def test_log_scale_falls_back_to_difference_on_zeros() -> None:
    c = compare(np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0]), "log")
    assert c.delta_abs == pytest.approx(1.0)


def test_nan_rounds_are_ignored() -> None:
    c = compare(np.array([10.0, np.nan, 10.0, 10.2]), np.array([10.0, 10.1, 9.9]), "log")
    assert c.delta is not None
    assert abs(c.delta) < 0.02


def test_holm_matches_the_textbook_example() -> None:
    # Holm (1979) step-down: sorted p × (m, m−1, …), made monotone.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5]) == [0.5]
    assert holm([]) == []
    assert max(holm([0.9, 0.8, 0.7])) <= 1.0


def test_one_side_repeating_itself_exactly_still_has_an_interval() -> None:
    c = compare(np.array([40.0, 40.0]), np.array([41.0, 42.0]), "log")
    assert c.lo is not None
    assert c.hi is not None
    assert c.lo < c.delta < c.hi  # type: ignore[operator]
