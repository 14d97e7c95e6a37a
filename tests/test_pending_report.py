"""A report URL before its evidence exists: a "pending" page (202, Retry-After, not
cached) naming the verification's state; an ended one says it ended; unknown ids and
bad tokens stay 404; published, the report itself."""

from __future__ import annotations

from pathlib import Path

from flask import Flask
from flask.testing import FlaskClient

from bot.models import Verification
from tests.standin import GitHubStandIn
from tests.test_app_flow import finish_run, promote, rt

PUBLIC = "https://rsi.example.com"


def path_of(app: Flask, vid: str) -> str:
    return rt(app).report_url(vid).removeprefix(PUBLIC)


def set_state(app: Flask, vid: str, state: str) -> None:
    with rt(app).db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        v.state = state


def test_a_running_verification_has_a_pending_page(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    vid = promote(client)["verification_id"]
    page = client.get(path_of(app, vid))
    assert page.status_code == 202
    assert page.mimetype == "text/html"
    assert page.headers["Retry-After"] == "60"
    assert "no-cache" in page.headers["Cache-Control"]
    assert "no-store" in page.headers["Cache-Control"]
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    text = page.get_data(as_text=True)
    assert f"Verification {vid} is in progress" in text
    assert "(state: dispatched)" in text
    assert "waiting for a GPU runner" in text
    assert 'http-equiv="refresh"' in text
    # Its plots are not there yet: 404, not a page.
    plot = client.get(path_of(app, vid).replace("?", "/plots/rounds.png?"))
    assert plot.status_code == 404

    set_state(app, vid, "running")
    text = client.get(path_of(app, vid)).get_data(as_text=True)
    assert "running on the GPU runners (state: running)" in text

    # Published: the report itself, cacheable as before.
    finish_run(app, client, github, tmp_path, vid, "run-done-1")
    done = client.get(path_of(app, vid))
    assert done.status_code == 200
    assert "Retry-After" not in done.headers
    assert "Performance evidence" in done.get_data(as_text=True)
    assert done.headers["Cache-Control"] == "private, max-age=300"


def test_an_ended_verification_says_so(app: Flask, client: FlaskClient) -> None:
    vid = promote(client)["verification_id"]
    set_state(app, vid, "cancelled")
    page = client.get(path_of(app, vid))
    assert page.status_code == 200
    assert "Retry-After" not in page.headers
    assert "no-cache" in page.headers["Cache-Control"]
    text = page.get_data(as_text=True)
    assert f"Verification {vid} was cancelled" in text
    assert "ended without a report" in text
    assert "refresh" not in text


def test_unknown_ids_and_bad_tokens_stay_404(app: Flask, client: FlaskClient) -> None:
    vid = promote(client)["verification_id"]
    unknown = "v-0000unknown"
    assert client.get(path_of(app, unknown)).status_code == 404  # a valid token, no such id
    for bad in (f"/reports/{vid}?token=forged", f"/reports/{vid}"):
        page = client.get(bad)
        assert page.status_code == 404, bad
        assert b"in progress" not in page.data


def test_an_ended_verification_says_why(app: Flask, client: FlaskClient) -> None:
    """The page names the end reason (`end_reason`, in the App's words), not the
    verdict's one-liner, which an ended verification never has; a hostile parameter is
    text."""
    vid = promote(client)["verification_id"]
    with rt(app).db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        v.state = "failed"
        v.end_reason = {
            "code": "step-failed",
            "params": {"step": "comment", "error": "<script>alert(1)</script>", "attempts": 5},
        }
    page = client.get(path_of(app, vid))
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert f"Verification {vid} failed" in text
    assert (
        "It ended without a report: gave up after 5 attempts at comment: "
        "&lt;script&gt;alert(1)&lt;/script&gt;." in text
    )
    assert "<script>" not in text

    set_state(app, vid, "cancelled")
    with rt(app).db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        v.end_reason = {"code": "cancelled-by", "params": {"user": "alice"}}
    text = client.get(path_of(app, vid)).get_data(as_text=True)
    assert "It ended without a report: cancelled by @alice with /rsi cancel." in text
