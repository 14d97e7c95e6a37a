"""The full report of a published verification, opened in a real browser (Debian's
Chromium under Playwright) from the app served over real HTTP: the verdict shows, the
serving study is there, every plot loads, nothing is fetched from another origin, the
page breaks no rule of its Content-Security-Policy, and a forged token gives 404."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from flask import Flask
from flask.testing import FlaskClient
from PIL import Image

from tests.browser import serve
from tests.standin import GitHubStandIn
from tests.test_app_flow import finish_run, promote, rt, verification

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Request, Route

PUBLIC = "https://rsi.example.com"


def test_report_page_in_a_real_browser(
    app: Flask,
    client: FlaskClient,
    github: GitHubStandIn,
    tmp_path: Path,
    browser: Browser,
) -> None:
    vid = promote(client)["verification_id"]
    finish_run(app, client, github, tmp_path, vid, "run-done-1")
    v = verification(app, vid)
    assert v.state == "published", v.reason
    assert v.verdict == "improved"
    path = rt(app).report_url(vid).removeprefix(PUBLIC)
    assert path.startswith(f"/reports/{vid}?token=")

    with serve(app) as base:
        origin = urlsplit(base)._replace(path="", query="", fragment="").geturl()
        requests: list[str] = []
        console: list[str] = []
        context = browser.new_context(viewport={"width": 1280, "height": 900})

        def same_origin_only(route: Route) -> None:
            # Recorded by the "request" listener either way; never let one leave the machine.
            if route.request.url.startswith(origin + "/"):
                route.continue_()
            else:
                route.abort()

        context.route("**/*", same_origin_only)
        try:
            page = context.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: _console(console, m))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.on("requestfailed", lambda r: _failed(console, r))

            resp = page.goto(base + path, wait_until="load")
            assert resp is not None
            assert resp.status == 200
            headers: dict[str, Any] = resp.headers
            assert resp.url == base + path
            csp = headers.get("content-security-policy", "")
            assert "default-src 'none'" in csp, headers
            assert "img-src data:" in csp
            assert headers.get("x-content-type-options") == "nosniff"
            assert headers.get("content-type", "").startswith("text/html")

            # The verdict, in the title and the heading.
            assert page.title().startswith("Performance evidence: IMPROVED"), page.title()
            assert vid in page.title()
            heading = page.locator("h1")
            assert heading.count() == 1
            assert "IMPROVED" in heading.inner_text()
            assert heading.locator(".v-improved").count() == 1

            # The serving study: a heading and a table of rows per configuration.
            assert page.locator("h2#study").inner_text() == "Serving study"
            study = page.locator("h2#study ~ h3 + table")
            assert study.count() >= 1
            header = study.first.locator("thead th").all_inner_texts()
            assert header[:6] == ["metric", "role", "base", "head", "delta", "95% CI"]
            rows = study.first.locator("tbody tr")
            assert rows.count() >= 3
            assert "throughput" in study.first.inner_text().lower()
            # The claim's metric and mode (streaming throughput) is a primary row.
            primary = study.locator("tr.primary").all_inner_texts()
            assert any("throughput" in r.lower() for r in primary), primary

            # Every plot decoded: data: URIs (the CSP allows nothing else) with real sizes.
            images = page.evaluate(
                """() => Array.from(document.images).map(i => ({
                    src: i.src.slice(0, 22), complete: i.complete,
                    w: i.naturalWidth, h: i.naturalHeight, alt: i.alt}))"""
            )
            assert images, "the report shows no plot"
            for img in images:
                assert img["src"].startswith("data:image/png;base64"), img
                assert img["complete"], img
                assert img["w"] > 0, img
                assert img["h"] > 0, img
                assert img["alt"], img

            # Nothing fetched from another origin (data: URIs are not fetches).
            elsewhere = [
                u for u in requests if not u.startswith(origin + "/") and not u.startswith("data:")
            ]
            assert elsewhere == [], elsewhere
            assert any(u == base + path for u in requests), requests
            assert console == [], console

            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
            data = shot.read_bytes()
            assert data.startswith(b"\x89PNG\r\n\x1a\n")
            with Image.open(shot) as im:
                assert im.format == "PNG"
                assert im.width >= 1280
                assert im.height > 900  # full page: the report is longer than one screen

            # A forged token, a token of another verification, and none: all 404.
            other = rt(app).signer.token("v-0000other")
            for bad in (
                f"/reports/{vid}?token=forged",
                f"/reports/{vid}?token={other}",
                f"/reports/{vid}",
            ):
                got = page.goto(base + bad)
                assert got is not None
                assert got.status == 404, bad
                assert "Performance evidence" not in page.content()
        finally:
            context.close()


def _console(into: list[str], msg: ConsoleMessage) -> None:
    if msg.type == "error":
        into.append(f"console {msg.type}: {msg.text} at {msg.location}")


def _failed(into: list[str], req: Request) -> None:
    into.append(f"request failed: {req.url} ({req.failure})")
