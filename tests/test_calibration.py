"""Calibration on simulated studies with a fixed seed (docs/statistics.md).

Each study: per-round throughput drawn log-normally with a round-to-round CV of 2%, 5
rounds a side, order-balanced; one configuration, and again 16 (2 GPUs × 2 modes × 4
concurrencies). The *overall* verdict is judged, through the same code the CLI runs
(`build_study` → `decide`).

Binomial tolerance: each rate is estimated from a finite number of studies, so the test
allows the one-sided 99% binomial sampling error at the target, z₀.₉₉ · √(p(1−p)/n):
with n = 1,000 single-configuration studies that is 2.2 points (power ≥ 87.8%, A/A ≤ 6.6%),
with n = 400 sixteen-configuration studies 2.5 points (A/A ≤ 7.5%, power ≥ 87.5%).

Why the slack matters: under these settings no two-sample test at 95% can do much better.
A Welch t on 5 + 5 log rounds at CV 2% detects +5% with probability ≈ 0.905 (noncentrality
3.86, df ≈ 8), and the 3% practical threshold on the point estimate keeps ≈ 0.936 of them:
≈ 0.89 jointly. The figures this test measured are in bench/README.md.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from evidence.load import Source
from evidence.model import Mode
from evidence.policy import Policy
from evidence.study import build_study
from evidence.synth import schedule
from evidence.verdict import decide
from tests.sources import QpsRun, qps_source

N_SINGLE = 1000
N_MULTI = 400
CV = 0.02
ROUNDS = 5
Z99 = 2.326


def _source(
    gpu: str, configs: list[tuple[Mode, int]], rng: np.random.Generator, effect: float
) -> Source:
    runs: list[QpsRun] = []
    for mode, conc in configs:
        level = rng.uniform(5, 50)
        for side, rnd in schedule(ROUNDS, "balanced"):
            qps = level * (1 + effect if side == "head" else 1) * np.exp(rng.normal(0, CV))
            runs.append(QpsRun(side, rnd, float(qps), mode=mode, concurrency=conc, requests=128))
    return qps_source(runs, gpu=gpu)


CONFIGS_1: list[tuple[Mode, int]] = [("streaming", 16)]
CONFIGS_8: list[tuple[Mode, int]] = [
    (m, c) for m in ("streaming", "non-streaming") for c in (1, 4, 16, 64)
]


def _verdicts(n_configs: int, effect: float, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(N_SINGLE if n_configs == 1 else N_MULTI):
        if n_configs == 1:
            sources = [_source("H200", CONFIGS_1, rng, effect)]
        else:
            sources = [_source(g, CONFIGS_8, rng, effect) for g in ("H100", "H200")]
        rows, _ = build_study(sources, Policy(), None)
        assert sum(r.primary for r in rows) == n_configs
        out.append(decide(rows, [])[0])
    return out


def _tolerance(p: float, n: int) -> float:
    return Z99 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("n_configs", [1, 16])
def test_aa_studies_rarely_claim_anything(n_configs: int) -> None:
    verdicts = _verdicts(n_configs, 0.0, seed=20261202 + n_configs)
    rate = sum(v in ("improved", "regressed") for v in verdicts) / len(verdicts)
    print(f"A/A, {n_configs} configuration(s): false verdicts {rate:.2%} of {len(verdicts)}")
    assert rate <= 0.05 + _tolerance(0.05, len(verdicts))


@pytest.mark.parametrize("n_configs", [1, 16])
def test_a_planted_five_percent_gain_is_found(n_configs: int) -> None:
    verdicts = _verdicts(n_configs, 0.05, seed=7 + n_configs)
    rate = sum(v == "improved" for v in verdicts) / len(verdicts)
    print(f"+5%, {n_configs} configuration(s): found {rate:.2%} of {len(verdicts)}")
    assert not any(v == "regressed" for v in verdicts)
    assert rate >= 0.90 - _tolerance(0.90, len(verdicts))


def test_a_planted_regression_is_found_as_regressed() -> None:
    verdicts = _verdicts(1, -0.05, seed=99)
    rate = sum(v == "regressed" for v in verdicts) / len(verdicts)
    assert rate >= 0.90 - _tolerance(0.90, len(verdicts))
    assert not any(v == "improved" for v in verdicts)
