"""Where the suite's time goes: tests/README.md's tables, from a run's `--durations-json`.

`make durations` runs the suite as `make unit` does, with `--durations-json`, then
`python -m tests.durations out/test-durations.json` rewrites the part of tests/README.md
between its markers: the slowest tests (setup, call and teardown apart, so a costly
fixture shows as setup or teardown), the files that cost most, and the slowest setups
and teardowns. Seconds are as measured inside the parallel run, where the other workers
share the cores: compare rows with each other, not with a test run alone.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

README = Path(__file__).with_name("README.md")
START = "<!-- durations:start (python -m tests.durations writes this part) -->"
END = "<!-- durations:end -->"


@dataclass
class Test:
    name: str
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.phases.values())

    @property
    def file(self) -> str:
        return self.name.split("::", 1)[0]


def load(path: Path) -> list[Test]:
    tests: dict[str, Test] = {}
    for row in json.loads(path.read_text(encoding="utf-8")):
        t = tests.setdefault(row["test"], Test(row["test"]))
        t.phases[row["when"]] = t.phases.get(row["when"], 0.0) + float(row["s"])
    return list(tests.values())


def _cell(name: str) -> str:
    return "`" + name.replace("|", "\\|").replace("`", "'") + "`"


def tables(tests: list[Test], top: int = 30) -> str:
    """The Markdown that goes between the markers."""
    total = sum(t.total for t in tests)
    lines = [
        f"{len(tests)} tests, {total:,.0f} test-seconds in all "
        "(setup + call + teardown, summed over the workers).",
        "",
        f"The {top} slowest tests:",
        "",
        "| total s | setup | call | teardown | test |",
        "| ---: | ---: | ---: | ---: | --- |",
    ]
    for t in sorted(tests, key=lambda t: -t.total)[:top]:
        p = t.phases
        lines.append(
            f"| {t.total:.1f} | {p.get('setup', 0):.1f} | {p.get('call', 0):.1f} "
            f"| {p.get('teardown', 0):.1f} | {_cell(t.name)} |"
        )
    files: dict[str, list[Test]] = defaultdict(list)
    for t in tests:
        files[t.file].append(t)
    lines += [
        "",
        "The files that cost most (setup and teardown are their fixtures' share):",
        "",
        "| total s | tests | setup + teardown s | file |",
        "| ---: | ---: | ---: | --- |",
    ]
    ranked = sorted(files.items(), key=lambda kv: -sum(t.total for t in kv[1]))
    for name, group in ranked[: top // 2]:
        fixtures = sum(t.phases.get("setup", 0) + t.phases.get("teardown", 0) for t in group)
        lines.append(
            f"| {sum(t.total for t in group):.1f} | {len(group)} | {fixtures:.1f} | {_cell(name)} |"
        )
    phases = [(t.phases.get(w, 0.0), w, t.name) for t in tests for w in ("setup", "teardown")]
    lines += [
        "",
        "The slowest setups and teardowns (a fixture's cost, paid by the test named):",
        "",
        "| s | phase | test |",
        "| ---: | --- | --- |",
    ]
    for s, w, name in sorted(phases, reverse=True)[: top // 2]:
        lines.append(f"| {s:.1f} | {w} | {_cell(name)} |")
    return "\n".join(lines)


def rewrite(readme: str, body: str) -> str:
    """`readme` with the part between the markers replaced by `body`."""
    head, sep, rest = readme.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"the markers are missing: {START} … {END}")
    return f"{head}{START}\n{body}\n{END}{tail}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.durations DURATIONS.json", file=sys.stderr)
        return 2
    tests = load(Path(argv[0]))
    README.write_text(rewrite(README.read_text(encoding="utf-8"), tables(tests)), "utf-8")
    print(f"{README}: {len(tests)} tests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
