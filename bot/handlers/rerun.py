"""`check_run` rerequested and requested_action on `rsi/verify`: GitHub's Re-run and the
App's Approve and verify, handed to `bot.features.rerun`."""

from __future__ import annotations

from bot.features import rerun as feature
from bot.github.api import APPROVE_ACTION, CHECK_NAME
from bot.handlers.context import Context


def rerun(ctx: Context) -> None:
    run = ctx.payload["check_run"]
    if run.get("name") != CHECK_NAME:
        return
    numbers = [int(p["number"]) for p in run.get("pull_requests") or []]
    feature.rerun(ctx.svc, ctx.repo, str(run["head_sha"]), numbers, ctx.sender)


def approve_pressed(ctx: Context) -> None:
    run, pressed = ctx.payload["check_run"], ctx.payload.get("requested_action") or {}
    if run.get("name") != CHECK_NAME or pressed.get("identifier") != APPROVE_ACTION:
        return
    run_id = run.get("id")
    if not isinstance(run_id, int):
        return
    feature.approve_pressed(
        ctx.svc,
        ctx.repo,
        sha=str(run.get("head_sha") or ""),
        sender=ctx.sender,
        vid=str(run.get("external_id")),
        check_run_id=run_id,
    )
