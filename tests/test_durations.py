"""tests/README.md's timing tables (tests/durations.py), from a run's --durations-json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import durations

ROOT = Path(__file__).resolve().parent.parent


def _rows(*rows: tuple[str, str, float]) -> list[dict[str, object]]:
    return [{"test": t, "when": w, "s": s} for t, w, s in rows]


def test_the_tables_rank_tests_files_and_fixtures_by_their_cost(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    rows = _rows(
        ("tests/test_a.py::fast", "setup", 0.01),
        ("tests/test_a.py::fast", "call", 0.2),
        ("tests/test_a.py::fast", "teardown", 0.0),
        ("tests/test_b.py::slow[x|y]", "setup", 3.0),
        ("tests/test_b.py::slow[x|y]", "call", 9.0),
        ("tests/test_b.py::slow[x|y]", "teardown", 1.5),
    )
    path.write_text(json.dumps(rows))
    text = durations.tables(durations.load(path), top=4)
    lines = text.splitlines()
    assert lines[0].startswith("2 tests, 14 test-seconds")
    first = lines.index("| total s | setup | call | teardown | test |") + 2
    assert lines[first] == "| 13.5 | 3.0 | 9.0 | 1.5 | `tests/test_b.py::slow[x\\|y]` |"
    assert lines[first + 1] == "| 0.2 | 0.0 | 0.2 | 0.0 | `tests/test_a.py::fast` |"
    assert "| 13.5 | 1 | 4.5 | `tests/test_b.py` |" in lines
    assert "| 3.0 | setup | `tests/test_b.py::slow[x\\|y]` |" in lines


def test_only_the_part_between_the_markers_is_rewritten() -> None:
    readme = f"intro\n{durations.START}\nold table\n{durations.END}\nafter\n"
    assert durations.rewrite(readme, "new") == (
        f"intro\n{durations.START}\nnew\n{durations.END}\nafter\n"
    )
    with pytest.raises(ValueError, match="markers are missing"):
        durations.rewrite("no markers", "new")


def test_the_readme_holds_the_tables_and_the_run_can_write_them(tmp_path: Path) -> None:
    """A real run's --durations-json (this file's first test, in a pytest of its own) is
    read by the module; the README carries the markers it writes between."""
    out = tmp_path / "d.json"
    one = f"{__file__}::test_only_the_part_between_the_markers_is_rewritten"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    r = subprocess.run(
        [*cmd, f"--durations-json={out}", one],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    [test] = durations.load(out)
    assert test.name.endswith("::test_only_the_part_between_the_markers_is_rewritten")
    assert set(test.phases) == {"setup", "call", "teardown"}
    readme = durations.README.read_text(encoding="utf-8")
    assert durations.START in readme
    assert durations.END in readme
