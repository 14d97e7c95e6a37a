"""The tidy tables: one row per request, one row per round."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from evidence.load import load
from evidence.table import requests_table, rounds_table
from tests.conftest import REAL


def test_requests_table_has_one_row_per_request(bundle: Path) -> None:
    df = requests_table([load(bundle)])
    assert len(df) == 16 * 120
    assert list(df.columns[:8]) == [
        "gpu",
        "side",
        "round",
        "mode",
        "concurrency",
        "run",
        "request_id",
        "is_success",
    ]
    one = df[(df["run"] == "r1-base-stream-c8")]
    assert len(one) == 120
    assert one["request_id"].is_unique
    assert one["audio_ttfp_s"].notna().all()
    assert df[df["mode"] == "non-streaming"]["audio_ttfp_s"].isna().all()
    assert np.isfinite(df["wer"]).all()


def test_rounds_table_for_a_per_run_study() -> None:
    src = load(REAL / "pr1445-h100-ab.results-summary.json")
    assert requests_table([src]).empty
    rounds = rounds_table([src])
    assert len(rounds) == 12
    assert rounds.loc[0, "throughput_qps"] == 4.692
    assert rounds["order"].tolist() == list(range(12))
