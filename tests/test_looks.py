"""What maintainers read, looked at as they will see it: the Markdown rendered by GitHub's
own parser (cmark-gfm, with GitHub's extensions) and laid out by Chromium at the width of
a PR's conversation column, the history page as served. Each view must stay short
enough to read (plots folded, identical findings one line) and keep its structure (every
`<details>` closed, no raw HTML from untrusted text). With `RSI_SCREENSHOTS=DIR` each view
is also saved as a PNG (the screenshots in docs/screenshots are made so)."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from flask import Flask

from bot import history, messages
from bot.history import NewPoint, SeriesKey
from bot.inquiries import AlertView, StepView
from evidence import render
from evidence.build import Inputs, build, write
from evidence.synth import write_bundle
from tests import appkit
from tests.browser import serve
from tests.bundles import INCONCLUSIVE
from tests.standin import GitHubStandIn
from tests.test_app_flow import rt
from tests.worlds import World, world

if TYPE_CHECKING:
    from playwright.sync_api import Browser

COLUMN_PX = 780  # GitHub's comment body in a PR's conversation, on a laptop screen
CSS = """
body { margin: 0; font: 14px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       color: #1f2328; }
main { width: WIDTHpx; padding: 16px; }
table { border-collapse: collapse; display: block; overflow: auto; }
th, td { border: 1px solid #d1d9e0; padding: 6px 13px; }
pre { background: #f6f8fa; padding: 16px; overflow: auto; }
code { font-size: 85%; }
img { max-width: 100%; }
h2, h3 { border-bottom: 1px solid #d1d9e0; }
""".replace("WIDTH", str(COLUMN_PX - 32))


def as_github(markdown: str) -> str:
    """The Markdown as GitHub renders a comment: GFM, tables, autolinks, raw HTML through
    GitHub's own sanitizer (here: cmark's safe mode is off, as the checks below must see
    what raw HTML there is)."""
    html = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    return f"<!doctype html><meta charset=utf-8><style>{CSS}</style><main>{html}</main>"


def height(browser: Browser, html: str, name: str) -> int:
    """Chromium's layout height of the page; saved as `name`.png under RSI_SCREENSHOTS."""
    page = browser.new_page(viewport={"width": COLUMN_PX, "height": 600})
    try:
        page.set_content(html)
        h = int(page.evaluate("document.documentElement.scrollHeight"))
        shots = os.environ.get("RSI_SCREENSHOTS")
        if shots:
            Path(shots).mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)
        return h
    finally:
        page.close()


def structure(html: str) -> None:
    """Every `<details>` closed, no script or event handler, no image from elsewhere."""
    assert html.count("<details") == html.count("</details>"), html
    low = html.lower()
    assert "<script" not in low
    assert " onerror=" not in low
    assert " onload=" not in low


@pytest.fixture
def w(tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world("embedded", tmp_path, github) as x:
        yield x


def test_an_inconclusive_comment_reads_short_and_ends_with_its_next_step(
    browser: Browser, tmp_path: Path
) -> None:
    spec = INCONCLUSIVE
    ev, sources = build(Inputs(bundles=[write_bundle(tmp_path / "b", spec)]))
    report = "https://rsi.example.com/reports/v-1?token=t"
    write(ev, sources, tmp_path / "out", None, report_url=report, plot_url=lambda n: n)
    shown = render.render_comment(ev, report)
    html = as_github(shown)
    structure(html)
    assert "<strong>Next step on H200:</strong>" in html
    assert height(browser, html, "inconclusive-comment") < 4200


def test_a_partial_comment_names_the_failed_gpu_its_step_and_log(
    w: World, browser: Browser
) -> None:
    vid = w.promote(gpus=["H100", "H200"])
    w.finish(vid, "H200", speedup=0.12)
    log = "\n".join(f"2026-12-06T10:00:{i:02d}Z step {i}" for i in range(30))
    t0 = dt.datetime(2026, 12, 6, 10, 0, tzinfo=dt.UTC)
    window = (t0, t0 + dt.timedelta(seconds=30))
    w.complete(
        vid, "H100", "failure", failed_step="Verify base and head", log=log, failed_window=window
    )
    w.settle()
    v = w.verification(vid)
    bodies = [c.body for c in w.github.comments_on(appkit.UPSTREAM, v.pr_number or 0)]
    [comment] = [b for b in bodies if "<!-- rsi-bot" in b]
    html = as_github(comment)
    structure(html)
    assert "<strong>Partial results:</strong>" in html
    assert "<code>/rsi reverify h100</code>" in html
    assert "lines of the H100 job's log" in html
    assert height(browser, html, "partial-comment") < 5000


def test_an_alert_names_its_culprit_and_the_steps(browser: Browser) -> None:
    good, bad = "1" * 40, "5" * 40
    steps = [
        StepView("confirm", "4" * 40, bad, "regressed", -8.4, -9.9, -6.9, "https://r/1"),
    ]
    view = AlertView(
        repo=appkit.UPSTREAM,
        task="cosyvoice3",
        gpu="H200",
        mode="streaming",
        metric="throughput_qps",
        culprit=bad,
        culprit_pr=44,
        good=good,
        bad=bad,
        commits=1,
        steps=steps,
        history_url="https://rsi.example.com/history/o/r?token=t#series-1",
        culprit_step=steps[0],
    )
    html = as_github(messages.alert(view, "alice"))
    structure(html)
    assert "@alice" in html
    assert height(browser, html, "alert") < 1600


def test_the_history_page_is_one_point_per_merge_in_chromium(app: Flask, browser: Browser) -> None:
    key = SeriesKey(
        appkit.UPSTREAM, "cosyvoice3", "H200", "550.54", "img", "streaming", 8, "throughput_qps"
    )
    t0 = dt.datetime(2026, 11, 2, 9, tzinfo=dt.UTC)
    with rt(app).db.session() as s:
        for n in range(1, 9):
            change = -8.1 if n == 5 else 0.4 * (-1) ** n
            p = NewPoint(
                sha=(f"{n:x}" * 40)[:40],
                parent_sha=(f"{n - 1:x}" * 40)[:40],
                verification_id=f"v-{n}",
                change_pct=change,
                ci_low_pct=change - 1.5,
                ci_high_pct=change + 1.5,
                verdict="regressed" if n == 5 else "no-change",
                pr_number=40 + n,
                pr_title=f"merge {n}",
                pairs=6,
            )
            history.add_point(s, key, p, t0 + dt.timedelta(days=n))
        rerun = NewPoint(**{**p.__dict__, "verification_id": "v-rerun"})
        rerun = NewPoint(
            **{
                **rerun.__dict__,
                "sha": "5" * 40,
                "parent_sha": "4" * 40,
                "change_pct": -9.0,
                "ci_low_pct": -10.5,
                "ci_high_pct": -7.5,
                "verdict": "regressed",
                "pr_number": 45,
                "pr_title": "merge 5",
            }
        )
        history.add_point(s, key, rerun, t0 + dt.timedelta(days=9))
    token = rt(app).signer.history_token(appkit.UPSTREAM)
    with serve(app) as base:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            page.goto(f"{base}/history/{appkit.UPSTREAM}?token={token}")
            rows = page.locator("section table").first.locator("tbody tr")
            assert rows.count() == 8  # eight merges, the rerun pooled into the fifth
            assert page.locator("circle").count() == 8
            assert "pooled from 2 measurements" in page.content()
            shots = os.environ.get("RSI_SCREENSHOTS")
            if shots:
                page.screenshot(path=str(Path(shots) / "history.png"), full_page=True)
        finally:
            page.close()
