"""`pull_request` closed and reopened, handed to `bot.features.pulls`."""

from __future__ import annotations

from bot.features import pulls
from bot.handlers.context import Context


def closed(ctx: Context) -> None:
    pull = ctx.payload["pull_request"]
    pulls.closed(ctx.svc, ctx.repo, int(pull["number"]), merged=bool(pull.get("merged")))


def reopened(ctx: Context) -> None:
    pulls.reopened(ctx.svc, ctx.repo, int(ctx.payload["pull_request"]["number"]))
