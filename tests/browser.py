"""A real browser for page tests: Debian's Chromium driven by Playwright for Python, and
the Flask app served over real HTTP on the loopback interface.

Playwright's own browser builds are never downloaded (`playwright install` cannot work on
these machines): the browser is `/usr/bin/chromium`. A missing browser or a missing
Playwright fails the test with how to install it; it never skips."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from flask import Flask
from werkzeug.serving import make_server

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_CHROMIUM = (
    "install Debian's Chromium: "
    "`DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium` "
    "(`sudo make test` does: it runs scripts/test-services first)"
)
INSTALL_PLAYWRIGHT = (
    "install the test extra: `.venv/bin/pip install -e '.[test]'` (it pins playwright); "
    "do not run `playwright install`: the browser used is Debian's /usr/bin/chromium"
)


def _check_chromium() -> None:
    if not CHROMIUM.is_file() or not shutil.which(str(CHROMIUM)):
        pytest.fail(f"Chromium is missing: no executable {CHROMIUM}; {INSTALL_CHROMIUM}")


@contextmanager
def chromium() -> Iterator[Browser]:
    """Start headless Chromium under Playwright; close both on exit."""
    from tests.services import require_marked

    require_marked("Chromium")
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError as exc:
        pytest.fail(f"Playwright for Python is missing ({exc}); {INSTALL_PLAYWRIGHT}")
    _check_chromium()
    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
        except Error as exc:
            pytest.fail(f"Chromium at {CHROMIUM} did not start under Playwright: {exc}")
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One Chromium for the whole session; each test opens its own context."""
    with chromium() as b:
        yield b


@contextmanager
def serve(app: Flask) -> Iterator[str]:
    """Serve `app` over real HTTP on 127.0.0.1 at a free port; yields the base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="flask-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
