"""The full report and its plots, served from the artifact store behind a signed token
(the same URLs work for private repositories without making their evidence public).

Before its evidence exists, a verification's report URL (already in the PR's comment)
answers a short "pending" page — 202, `Retry-After`, not cached — saying what state the
verification is in; a verification that ended without evidence says so and why (200).
The page is `pr_templates/pending.html.j2`. An id this App does not know, or a wrong
token, stays 404."""

from __future__ import annotations

import re

from flask import Blueprint, Response, abort, current_app, request

from bot import messages
from bot.models import Verification
from bot.services import Services
from bot.verification.reasons import Reason
from evidence.render import environment

bp = Blueprint("reports", __name__)
PLOT = re.compile(r"^[a-z0-9_-]{1,40}$")
VID = re.compile(r"^v-[0-9a-z]{4,32}$")
RETRY_AFTER_S = 60
"""How soon a pending page asks to be loaded again (it also refreshes itself)."""

ENDED = frozenset({"failed", "cancelled", "superseded", "timed-out"})
"""States that end a verification without a report; the others are still on the way."""


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
        page, ended = pending_page(v)
    resp = Response(page, status=200 if ended else 202, mimetype="text/html")
    resp.headers["Cache-Control"] = "no-cache, no-store, private"
    if not ended:
        resp.headers["Retry-After"] = str(RETRY_AFTER_S)
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    return resp


def pending_page(v: Verification) -> tuple[str, bool]:
    """`pr_templates/pending.html.j2` for `v`, and whether `v` ended without a report:
    an ended one says why, in the words of its end reason (`messages.reason_plain`)."""
    ended = v.state in ENDED
    why = Reason.from_json(v.end_reason) if ended else None
    page = (
        environment()
        .get_template("pending.html.j2")
        .render(
            vid=v.id,
            state=v.state,
            repo=v.repo,
            pr=v.pr_number,
            task=v.task,
            ended=ended,
            why=messages.reason_plain(why) if why is not None else None,
            retry_after=RETRY_AFTER_S,
        )
    )
    return page, ended


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
