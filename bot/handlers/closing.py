"""Closing or merging a tracked PR cancels what is still running for it."""

from __future__ import annotations

from bot.handlers.context import Context
from bot.verification import machine as M
from bot.verification import reasons as R
from bot.verification import steps, store
from bot.verification.reasons import Reason


def closed(ctx: Context) -> None:
    pull = ctx.payload["pull_request"]
    with ctx.db.session() as s:
        pr = store.pull_request(s, ctx.repo, pull["number"])
        if pr is None:
            return
        pr.state = "merged" if pull.get("merged") else "closed"
        state, number = pr.state, pr.number
    steps.cancel_active(ctx.svc, ctx.repo, number, M.Cancel(Reason(R.PR_CLOSED, {"state": state})))


def reopened(ctx: Context) -> None:
    with ctx.db.session() as s:
        pr = store.pull_request(s, ctx.repo, ctx.payload["pull_request"]["number"])
        if pr is not None:
            pr.state = "open"
