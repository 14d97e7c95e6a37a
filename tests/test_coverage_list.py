"""The list of tests `make unit` traces (tests/select_coverage.py) names tests that exist."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests import select_coverage
from tests.conftest import COLLECTED


def test_every_listed_test_is_collected(request: pytest.FixtureRequest) -> None:
    """A test renamed or removed would silently leave its branches untraced. A session
    that collected every listed test already says so; any other (one file, a `-k`) asks a
    collection of the listed files."""
    listed = select_coverage.listed()
    assert listed, "tests/coverage_tests.txt is empty: `make coverage-select`"
    if listed <= request.config.stash.get(COLLECTED, set()):
        return
    files = sorted({t.split("::")[0] for t in listed})
    got = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    collected = {ln.strip() for ln in got.splitlines() if "::" in ln}
    assert sorted(listed - collected) == [], "run `make coverage-select`"


def test_the_selection_covers_every_branch_twice_where_two_tests_reach_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "coverage.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE context (id INTEGER, context TEXT)")
    con.execute("CREATE TABLE arc (file_id INTEGER, context_id INTEGER, fromno INT, tono INT)")
    tests = {1: "t::a|run", 2: "t::b|run", 3: "t::c|run", 4: "t::d|run", 5: "|run"}
    con.executemany("INSERT INTO context VALUES (?, ?)", tests.items())
    arcs = {1: [(1, 2), (2, 3)], 2: [(1, 2)], 3: [(2, 3), (3, 4)], 4: [(9, 9)], 5: [(7, 7)]}
    con.executemany(
        "INSERT INTO arc VALUES (1, ?, ?, ?)", [(c, a, b) for c, xs in arcs.items() for a, b in xs]
    )
    con.commit()
    once = select_coverage.select(db, times=1)
    assert len(once) == 3  # one of a and b is enough once c is in
    assert {"t::c", "t::d"} <= set(once)
    assert select_coverage.select(db, times=2) == ["t::a", "t::b", "t::c", "t::d"]
