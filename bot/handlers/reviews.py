"""`pull_request_review` submitted: one that requests changes opens a review round
(`bot.features.pulls`)."""

from __future__ import annotations

from bot.features import pulls
from bot.handlers.context import Context


def reviewed(ctx: Context) -> None:
    if str((ctx.payload.get("review") or {}).get("state", "")).lower() != "changes_requested":
        return
    pulls.changes_requested(ctx.svc, ctx.repo, int(ctx.payload["pull_request"]["number"]))
