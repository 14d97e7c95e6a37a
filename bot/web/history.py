"""`/history/<owner>/<name>`: main's history per fingerprint, as a page (server-rendered,
no script), as JSON and as CSV, behind the repository's signed token (the same address
works for a private repository without making its history public).

Filters come from the query string (`task`, `gpu`, `mode`, `concurrency`, `since`,
`until`); one that is not understood is a 400 naming it. An unknown repository or a wrong
token is 404.
"""

from __future__ import annotations

import csv
import io

import orjson
from flask import Blueprint, Response, abort, current_app, request

from bot import history, inquiries
from bot.services import Services
from evidence.render import environment

bp = Blueprint("history", __name__)
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
SHOWN_POINTS = 200
"""Table rows per series on the page (the chart and the exports hold every point)."""


def _repo(rt: Services, owner: str, name: str) -> str:
    repo = f"{owner}/{name}"
    if not rt.signer.verify(f"history\x00{repo}", request.args.get("token", "")):
        abort(404)  # not 403: do not confirm that the repository is watched
    return repo


def _selected(
    rt: Services, owner: str, name: str
) -> tuple[history.Filter, list[history.SeriesView]]:
    """The series the token and the filters select; 404 or 400 (naming the filter)."""
    repo = _repo(rt, owner, name)
    try:
        f = history.Filter.parse(request.args)
    except history.FilterError as exc:
        abort(Response(f"{exc}\n", status=400, mimetype="text/plain"))
    with rt.db.session() as s:
        return f, history.history(s, repo, f)


def _headers(resp: Response) -> Response:
    resp.headers["Cache-Control"] = "private, no-cache"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    resp.headers["Content-Security-Policy"] = CSP
    return resp


def _cell(value: object) -> object:
    """A CSV cell a spreadsheet shows as text: a string that starts like a formula (`=`,
    `+`, `-`, `@`, a tab or a return; task names and image tags come from runners) gets a
    leading apostrophe. Numbers are numbers."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


@bp.get("/history/<owner>/<name>")
def page(owner: str, name: str) -> Response:
    rt: Services = current_app.extensions["rsi"]
    if name.endswith((".json", ".csv")):
        return export(owner, name)
    f, views = _selected(rt, owner, name)
    repo = f"{owner}/{name}"
    token = rt.signer.history_token(repo)
    with rt.db.session() as s:
        ids = [v.id for v in views]
        quality, hunts = inquiries.quality(s, ids), inquiries.of_series(s, ids)
    html = (
        environment()
        .get_template("history.html.j2")
        .render(
            repo=repo,
            views=views,
            charts={v.id: history.chart(v.points) for v in views},
            shown=SHOWN_POINTS,
            filters=f,
            query={**f.query_args(), "token": token},
            report_url=rt.report_url,
            github_url=rt.settings.web_url,
            quality=quality,
            hunts=hunts,
        )
    )
    return _headers(Response(html, mimetype="text/html"))


def export(owner: str, name: str) -> Response:
    rt: Services = current_app.extensions["rsi"]
    name, _, kind = name.rpartition(".")
    _, views = _selected(rt, owner, name)
    repo = f"{owner}/{name}"

    def bundle(vid: str, key: str | None) -> str | None:
        return None if key is None else rt.report_url(vid)

    rows = list(history.export_rows(views, bundle))
    if kind == "json":
        body = orjson.dumps({"repo": repo, "points": rows}, option=orjson.OPT_INDENT_2)
        resp = Response(body, mimetype="application/json")
    else:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=history.EXPORT_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)
        resp = Response(out.getvalue(), mimetype="text/csv")
        resp.headers["Content-Disposition"] = f'attachment; filename="{name}-history.csv"'
    return _headers(resp)
