"""The full report and its plots, served from the artifact store behind a signed token
(the same URLs work for private repositories without making their evidence public).

Before its evidence exists, a verification's report URL (already in the PR's comment)
answers a short "pending" page — 202, `Retry-After`, not cached — saying what state the
verification is in; a verification that ended without evidence says so (200). An id
this App does not know, or a wrong token, stays 404."""

from __future__ import annotations

import re
from html import escape

from flask import Blueprint, Response, abort, current_app, request

from bot.models import Verification
from bot.services import Services

bp = Blueprint("reports", __name__)
PLOT = re.compile(r"^[a-z0-9_-]{1,40}$")
VID = re.compile(r"^v-[0-9a-z]{4,32}$")
RETRY_AFTER_S = 60
"""How soon a pending page asks to be loaded again (it also refreshes itself)."""

_WAITING = {
    "queued": "queued: waiting for its GPU runs to be dispatched",
    "dispatched": "dispatched: waiting for a GPU runner to pick it up",
    "running": "running on the GPU runners",
    "ingesting": "its runs are done; the evidence is being built",
    # published, but the report is not in the store (yet): say so rather than 404
    "published": "published; the report is being stored",
}
_ENDED = {
    "failed": "failed",
    "cancelled": "was cancelled",
    "superseded": "was superseded by a newer verification",
    "timed-out": "timed out",
}


def _authorised(rt: Services, vid: str) -> None:
    if not VID.match(vid) or not rt.signer.verify(vid, request.args.get("token", "")):
        abort(404)  # not 403: do not confirm that a verification exists


class _NotFound(Exception):
    """Nothing stored under the key."""


def _serve(rt: Services, key: str) -> Response:
    try:
        chunks, size, ctype = rt.store.open_stream(key)
    except KeyError:
        raise _NotFound(key) from None
    resp = Response(chunks, mimetype=ctype)
    resp.content_length = size
    resp.headers["Cache-Control"] = "private, max-age=300"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    return resp


CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


@bp.get("/reports/<vid>")
def report(vid: str) -> Response:
    rt: Services = current_app.extensions["rsi"]
    _authorised(rt, vid)
    key = f"reports/{vid}/report.html"
    try:
        resp = _serve(rt, key)
    except _NotFound:
        resp = _pending(rt, vid)
    resp.headers["Content-Security-Policy"] = CSP
    return resp


def _pending(rt: Services, vid: str) -> Response:
    """The page of a verification without a stored report, or 404 for an unknown one."""
    with rt.db.session() as s:
        v = s.get(Verification, vid)
        if v is None:
            abort(404)
        state, repo, pr, task, reason = v.state, v.repo, v.pr_number, v.task, v.reason
    what = f"{repo}" + (f" #{pr}" if pr else "") + f", task {task}"
    if state in _ENDED:
        title = f"Verification {vid} {_ENDED[state]}"
        body = "It ended without a report." + (f" {reason}" if reason else "")
        status, refresh = 200, ""
    else:
        title = f"Verification {vid} is in progress"
        body = (
            f"The verification is {_WAITING.get(state, state)} (state: {state}). "
            "Its report appears at this address once the evidence is published; "
            "this page reloads itself."
        )
        status, refresh = 202, f'<meta http-equiv="refresh" content="{RETRY_AFTER_S}">'
    page = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"{refresh}<title>{escape(title)}</title>"
        '<meta name="robots" content="noindex"></head>'
        '<body style="font-family:system-ui,sans-serif;max-width:40em;margin:3em auto">'
        f"<h1>{escape(title)}</h1><p>{escape(what)}</p>"
        f'<p id="state" data-state="{escape(state)}">{escape(body)}</p></body></html>'
    )
    resp = Response(page, status=status, mimetype="text/html")
    resp.headers["Cache-Control"] = "no-cache, no-store, private"
    if status == 202:
        resp.headers["Retry-After"] = str(RETRY_AFTER_S)
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    return resp


@bp.get("/reports/<vid>/plots/<name>.png")
def plot(vid: str, name: str) -> Response:
    rt: Services = current_app.extensions["rsi"]
    _authorised(rt, vid)
    if not PLOT.match(name):
        abort(404)
    try:
        return _serve(rt, f"reports/{vid}/plots/{name}.png")
    except _NotFound:
        abort(404)
