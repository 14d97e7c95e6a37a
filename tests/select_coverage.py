"""Choose the tests `make unit` traces for coverage: the fewest whose union covers every
branch of `bot/verification` the whole suite covers, each branch by two tests where two
reach it (so a change to one test rarely drops a branch).

    python -m tests.select_coverage .coverage     # a run with --cov-context=test

Coverage's tracer makes the code it runs two to four times slower on Python 3.11,
including code it does not record (every line event still reaches the tracer): traced
whole, the App's tests cost the suite minutes for branches a few of them reach already.
The list is written to `tests/coverage_tests.txt`; `make coverage-select` runs the whole
suite traced and writes it again. A test not listed runs untraced (`no_cover`), so the
figure `make unit` reports can only be lower than the whole suite's, and its floor holds
either way.
"""

from __future__ import annotations

import collections
import sqlite3
import sys
from pathlib import Path

LIST = Path(__file__).with_name("coverage_tests.txt")
TIMES = 2  # tests per branch, where that many reach it


def select(db: Path, times: int = TIMES) -> list[str]:
    con = sqlite3.connect(db)
    names = dict(con.execute("SELECT id, context FROM context"))
    cover: dict[str, set[tuple[int, int, int]]] = collections.defaultdict(set)
    for fid, cid, a, b in con.execute("SELECT file_id, context_id, fromno, tono FROM arc"):
        test = str(names[cid]).rsplit("|", 1)[0]  # pytest-cov's `node id|run`
        if test:
            cover[test].add((fid, a, b))
    reach = collections.Counter(arc for arcs in cover.values() for arc in arcs)
    left = {arc: min(times, n) for arc, n in reach.items()}
    chosen: list[str] = []
    while any(left.values()):
        best = max(
            (t for t in cover if t not in chosen),
            key=lambda t: (sum(1 for a in cover[t] if left[a] > 0), t),
        )
        chosen.append(best)
        for arc in cover[best]:
            left[arc] = max(0, left[arc] - 1)
    return sorted(chosen)


def main() -> None:
    db = Path(sys.argv[1] if len(sys.argv) > 1 else ".coverage")
    chosen = select(db)
    head = (
        "# The tests `make unit` traces for coverage (python -m tests.select_coverage);\n"
        "# `make coverage-select` chooses them again from a whole traced run.\n"
    )
    LIST.write_text(head + "".join(t + "\n" for t in chosen))
    print(f"{LIST}: {len(chosen)} tests")


def listed() -> frozenset[str]:
    """The node ids in the list (empty when there is none: then every test is traced)."""
    if not LIST.exists():
        return frozenset()
    lines = (ln.strip() for ln in LIST.read_text().splitlines())
    return frozenset(ln for ln in lines if ln and not ln.startswith("#"))


if __name__ == "__main__":
    main()
