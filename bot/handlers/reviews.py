"""A review that requests changes opens a review round: the author's next push answers it."""

from __future__ import annotations

from bot.handlers.context import Context
from bot.verification import store


def reviewed(ctx: Context) -> None:
    if str((ctx.payload.get("review") or {}).get("state", "")).lower() != "changes_requested":
        return
    with ctx.db.session() as s:
        pr = store.pull_request(s, ctx.repo, ctx.payload["pull_request"]["number"])
        if pr is not None:
            pr.review_pending = True
