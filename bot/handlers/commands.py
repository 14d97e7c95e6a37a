"""`/rsi` commands in PR comments: reverify, status, cancel, help.

For users with write, maintain or admin on the repository, or listed under
`trigger.allow`. A reaction acknowledges at once; a refusal is polite and says who may.
Comments by bots and on issues that are not tracked PRs are ignored; so are edits
(only `created` is handled).
"""

from __future__ import annotations

import datetime as dt
from statistics import median

from sqlalchemy import select

from bot import approvals, messages
from bot.commands import Command, parse
from bot.handlers.context import Context
from bot.handlers.registry import on
from bot.models import RunnerJob, Verification, utcnow
from bot.repo_config import Plan
from bot.verification import machine as M
from bot.verification import reasons as R
from bot.verification import steps, store
from bot.verification.reasons import Reason


@on("issue_comment", "created")
def commented(ctx: Context) -> None:
    comment, issue = ctx.payload["comment"], ctx.payload["issue"]
    if "pull_request" not in issue or (ctx.payload.get("sender") or {}).get("type") == "Bot":
        return
    cmd = parse(comment.get("body") or "")
    if cmd is None:
        return
    number, user = int(issue["number"]), str(comment["user"]["login"])
    with ctx.db.session() as s:
        if store.pull_request(s, ctx.repo, number) is None:
            return
    ctx.github.react(ctx.repo, number, comment["id"], "eyes")
    config = ctx.config()
    if not (config.allows(user) or ctx.github.permission(ctx.repo, user) in approvals.WRITERS):
        ctx.github.create_comment(ctx.repo, number, messages.refusal(user, ctx.repo))
        return
    if cmd.errors or cmd.name == "help":
        ctx.github.create_comment(ctx.repo, number, messages.help_text(cmd.errors))
        return
    act = {"reverify": _reverify, "status": _status, "cancel": _cancel}[cmd.name]
    ctx.github.create_comment(ctx.repo, number, act(ctx, number, user, cmd))


def _reverify(ctx: Context, number: int, user: str, cmd: Command) -> str:
    config = ctx.config()
    gpus = cmd.gpus
    if gpus is None and not cmd.all_gpus:
        with ctx.db.session() as s:
            prev = store.latest(s, ctx.repo, number)
            gpus = [g for g in prev.gpus if g in config.gpus] if prev else None
    plan = config.plan(gpus=gpus or None, rounds=cmd.rounds)
    if not isinstance(plan, Plan):
        return messages.refused(user, plan)
    pull = ctx.github.pull(ctx.repo, number)
    base_sha = None
    if cmd.base_main or config.base == "main":
        base_sha = ctx.github.branch_sha(ctx.repo, pull.base_ref)
    with ctx.db.session() as s:
        pr = store.pull_request(s, ctx.repo, number)
        assert pr is not None
        pr.head_sha = pull.head_sha
        approvals.approve(s, ctx.repo, number, pull.head_sha, user)
    v = steps.verify_head(
        ctx.svc,
        ctx.repo,
        number,
        head_sha=pull.head_sha,
        trigger=f"/rsi reverify by @{user}",
        gpus=plan.gpus,
        rounds=plan.rounds,
        modes=plan.modes,
        requested_by=user,
        base_sha=base_sha,
    )
    if v is None:
        return messages.nothing_to_repeat(user)
    return messages.reverify_queued(user, v)


def _status(ctx: Context, number: int, user: str, cmd: Command) -> str:
    with ctx.db.session() as s:
        v = store.latest(s, ctx.repo, number)
        if v is None:
            return messages.nothing_verified(user)
        _ = list(v.jobs)
        end = store.aware(v.dispatched_at) if v.dispatched_at else utcnow()
        queued = _human((end - store.aware(v.created_at)).total_seconds())
        if v.dispatched_at is None:
            queued += " so far"
        expected = _expected_gpu_minutes(s, v.task)
        return messages.status_reply(v, user, queued, expected)


def _cancel(ctx: Context, number: int, user: str, cmd: Command) -> str:
    event = M.Cancel(Reason(R.CANCELLED_BY, {"user": user}))
    ids = steps.cancel_active(ctx.svc, ctx.repo, number, event)
    return messages.cancelled(user, ids) if ids else messages.nothing_running(user)


def _expected_gpu_minutes(s: object, task: str) -> float | None:
    from sqlalchemy.orm import Session

    assert isinstance(s, Session)
    rows = s.execute(
        select(RunnerJob.dispatched_at, RunnerJob.completed_at)
        .join(Verification)
        .where(Verification.task == task, RunnerJob.state == M.JobState.KEPT.value)
        .order_by(RunnerJob.completed_at.desc())
        .limit(20)
    ).all()
    spans = [(store.aware(b) - store.aware(a)).total_seconds() / 60 for a, b in rows if a and b]
    return median(spans) if spans else None


def _human(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{dt.timedelta(seconds=seconds).total_seconds() / 3600:.1f} h"
