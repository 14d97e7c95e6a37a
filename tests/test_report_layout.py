"""The report page at its own width, in a real browser (Debian's Chromium under
Playwright): at 1180 px every table fits the page and no word in a table is broken
across lines ("primar y", "improve d"); long identifiers in code cells may wrap."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from evidence.build import Inputs, build, read_json_file, write
from evidence.model import Candidate
from tests.bundles import clean_bundle

if TYPE_CHECKING:
    from playwright.sync_api import Browser


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WIDTH = 1180

# Every word of a table cell (but code cells and identifiers longer than 30 characters)
# must sit on one line: its rectangles share one top. A line may break after a hyphen
# ("output-length-" / "shift"), as text does; never inside a word. Every table must fit its column.
MEASURE = """() => {
  const broken = [];
  for (const cell of document.querySelectorAll('th, td')) {
    if (cell.classList.contains('mono')) continue;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      const re = /[^\\s-]+/g;
      let m;
      while ((m = re.exec(node.textContent))) {
        if (m[0].length > 30) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(range.getClientRects())
          .filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  }
  const wide = [];
  for (const t of document.querySelectorAll('table')) {
    const room = t.parentElement.clientWidth;
    if (t.getBoundingClientRect().width > room + 1) wide.push([t.rows[0].innerText, room]);
  }
  return {broken, wide, page: document.documentElement.scrollWidth};
}"""


def _reports(tmp_path: Path) -> dict[str, Path]:
    cand = read_json_file(EXAMPLES / "candidate.json", Candidate)
    cases: dict[str, Inputs] = {
        "examples": Inputs(
            bundles=[
                EXAMPLES / "rsi-bundle-v-2c1f0e-h100.zip",
                EXAMPLES / "rsi-bundle-v-2c1f0e-h200.zip",
            ],
            candidate=cand,
        ),
        "wide": Inputs(
            bundles=[
                clean_bundle(
                    tmp_path / "b",
                    speedup=0.0,
                    round_cv=0.15,
                    concurrencies=(4, 128),
                    head_audio_scale=0.8,
                )
            ]
        ),
    }
    out = {}
    for name, inputs in cases.items():
        ev, sources = build(inputs)
        write(ev, sources, tmp_path / name, None)
        out[name] = tmp_path / name / "report.html"
    return out


@pytest.mark.parametrize("case", ["examples", "wide"])
def test_report_tables_fit_at_1180_px_without_broken_words(
    case: str, tmp_path: Path, browser: Browser
) -> None:
    report = _reports(tmp_path)[case]
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    try:
        page = context.new_page()
        page.goto(report.as_uri())
        got: dict[str, Any] = page.evaluate(MEASURE)
    finally:
        context.close()
    assert got["broken"] == [], f"words broken across lines: {got['broken'][:20]}"
    assert got["wide"] == [], f"tables wider than the page: {got['wide']}"
    assert got["page"] <= WIDTH
