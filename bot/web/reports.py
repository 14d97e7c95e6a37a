"""The full report and its plots, served from the artifact store behind a signed token
(the same URLs work for private repositories without making their evidence public)."""

from __future__ import annotations

import re

from flask import Blueprint, Response, abort, current_app, request

from bot.services import Services

bp = Blueprint("reports", __name__)
PLOT = re.compile(r"^[a-z0-9_-]{1,40}$")
VID = re.compile(r"^v-[0-9a-z]{4,32}$")


def _authorised(rt: Services, vid: str) -> None:
    if not VID.match(vid) or not rt.signer.verify(vid, request.args.get("token", "")):
        abort(404)  # not 403: do not confirm that a verification exists


def _serve(rt: Services, key: str) -> Response:
    try:
        chunks, size, ctype = rt.store.open_stream(key)
    except KeyError:
        abort(404)
    resp = Response(chunks, mimetype=ctype)
    resp.content_length = size
    resp.headers["Cache-Control"] = "private, max-age=300"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    return resp


@bp.get("/reports/<vid>")
def report(vid: str) -> Response:
    rt: Services = current_app.extensions["rsi"]
    _authorised(rt, vid)
    resp = _serve(rt, f"reports/{vid}/report.html")
    resp.headers["Content-Security-Policy"] = (
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
    )
    return resp


@bp.get("/reports/<vid>/plots/<name>.png")
def plot(vid: str, name: str) -> Response:
    rt: Services = current_app.extensions["rsi"]
    _authorised(rt, vid)
    if not PLOT.match(name):
        abort(404)
    return _serve(rt, f"reports/{vid}/plots/{name}.png")
