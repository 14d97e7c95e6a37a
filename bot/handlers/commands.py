"""`/rsi` commands in PR comments: reverify, status, cancel, help.

For users with write, maintain or admin on the repository, or listed under
`trigger.allow` (who may run commands but approve code for the runners only with write
access). A reaction acknowledges at once; a refusal is polite and says who may, once per
user and PR an hour: later commands of a refused user cost no request at all. Comments
by bots and on issues that are not tracked PRs are ignored; so are edits (only `created`
is handled), and a comment acts once (a re-delivery or replay finds it done).

`/rsi reverify` approves the head the PR had when the comment was written (the comment's
own `created_at`, never the delivery's time), or exactly the commit `<sha>` names among
the heads known then: a comment older than a push approves nothing newer.
"""

from __future__ import annotations

import datetime as dt
import logging
from contextlib import nullcontext
from dataclasses import dataclass
from statistics import median
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot import approvals, inquiries, messages, pull_writes, watch
from bot.commands import ANSWERS, Command, parse
from bot.github.api import Pull
from bot.handlers.context import Context
from bot.models import RunnerJob, Verification, utcnow
from bot.repo_config import Budget, Plan
from bot.verification import machine as M
from bot.verification import reasons as R
from bot.verification import steps, store
from bot.verification.reasons import Reason

log = logging.getLogger(__name__)

PERMISSION_AGE_S = 60.0


@dataclass(frozen=True)
class Said:
    """The comment a command came in: its id, when it was written (None: GitHub did not
    say), and the author's permission when it was looked up already."""

    comment_id: int
    written_at: dt.datetime | None
    permission: str | None


def _written_at(comment: dict[str, Any]) -> dt.datetime | None:
    value = comment.get("created_at")
    if not isinstance(value, str) or not value:
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def commented(ctx: Context) -> None:
    comment, issue = ctx.payload["comment"], ctx.payload["issue"]
    if (ctx.payload.get("sender") or {}).get("type") == "Bot":
        return
    cmd = parse(comment.get("body") or "")
    if cmd is None or ("pull_request" not in issue and cmd.name not in ANSWERS):
        return  # on an issue, only an answer to an alert issue the App opened
    number = int(issue["number"])
    if "pull_request" not in issue:
        with ctx.db.session() as s:
            if number not in pull_writes.opened_issues(s, ctx.repo):
                return  # someone else's issue: not the App's to answer on
    if cmd.name in ANSWERS and not cmd.errors:  # an answer to an alert on a merged PR
        try:
            _answer(ctx, number, comment, cmd.name)
        finally:
            ctx.queue.write(ctx.repo, number)
        return
    with ctx.db.session() as s:
        tracked = store.pull_request(s, ctx.repo, number) is not None
    if not tracked:
        if cmd.name == "verify":  # a PR the App did not open: a writer may have it measured
            try:
                _adopt(ctx, number, comment, cmd)
            finally:
                ctx.queue.write(ctx.repo, number)
        return
    # One command of a PR at a time (`Busy` retries the delivery); what it says is
    # written to the PR's outbox and carried out after, however the command ended.
    try:
        with ctx.pull_lease(number):
            _command(ctx, number, comment, cmd)
    finally:
        ctx.queue.write(ctx.repo, number)


def _command(ctx: Context, number: int, comment: dict[str, Any], cmd: Command) -> None:
    user, comment_id = str(comment["user"]["login"]), int(comment["id"])
    with ctx.db.session() as s:
        delivery = ctx.delivery_id or f"comment:{comment_id}"
        if not approvals.claim_comment(s, ctx.repo, number, comment_id, delivery, user):
            log.info("%s#%s: comment %s acted on already", ctx.repo, number, comment_id)
            return
        quiet = approvals.recently_refused(s, ctx.repo, number, user)
    config = ctx.config()
    allowed = config.allows(user)
    if quiet and not allowed:
        return  # refused within the hour: no reaction, lookup or reply this time
    with ctx.db.session() as s:
        pull_writes.react(s, ctx.repo, number, comment_id, "eyes")
    ctx.queue.write(ctx.repo, number)  # seen, at once
    permission = None
    if not allowed:
        permission = ctx.github.permission(ctx.repo, user, max_age_s=PERMISSION_AGE_S)
        if permission not in approvals.WRITERS:
            with ctx.db.session() as s:
                _refuse(ctx, s, number, comment_id, user, permission)
            return
    if cmd.errors or cmd.name == "help":
        _say(ctx, number, messages.help_text(cmd.errors))
        return
    said = Said(comment_id, _written_at(comment), permission)
    act = {"reverify": _reverify, "verify": _reverify, "status": _status, "cancel": _cancel}[
        cmd.name
    ]
    reply = act(ctx, number, user, cmd, said)
    if reply is not None:
        _say(ctx, number, reply)


def _take(ctx: Context, s: Session, number: int, comment_id: int, user: str) -> bool:
    """Claim the comment (a comment acts once: False when it did already) and acknowledge
    it with a reaction, carried out after the session commits."""
    delivery = ctx.delivery_id or f"comment:{comment_id}"
    if not approvals.claim_comment(s, ctx.repo, number, comment_id, delivery, user):
        log.info("%s#%s: comment %s acted on already", ctx.repo, number, comment_id)
        return False
    pull_writes.react(s, ctx.repo, number, comment_id, "eyes")
    return True


def _refuse(
    ctx: Context, s: Session, number: int, comment_id: int, user: str, permission: str | None
) -> None:
    """Refuse a user without the access a command needs: told who may, once an hour."""
    approvals.refuse(s, ctx.repo, comment_id, permission or "none")
    pull_writes.comment(s, ctx.repo, number, messages.refusal(user, ctx.repo))


def _adopt(ctx: Context, number: int, comment: dict[str, Any], cmd: Command) -> None:
    """`/rsi verify` on a PR the App does not track: a writer's command (asked afresh:
    it approves the head for the runners) makes it tracked and measures its head against
    its base branch on the repository's watched task; anyone else is told who may, once
    an hour. Two such commands at once take turns on the PR's lease: one measures, the
    other joins it."""
    user, comment_id = str(comment["user"]["login"]), int(comment["id"])
    with ctx.db.session() as s:
        if approvals.recently_refused(s, ctx.repo, number, user):
            return  # refused within the hour: no lookup, reaction or reply this time
    permission = ctx.github.permission(ctx.repo, user, max_age_s=0.0)
    writer = permission in approvals.WRITERS
    # A triager's request is queued for a writer's approval: it runs nothing by itself.
    asks = writer or permission == "triage"
    p = ctx.github.pull(ctx.repo, number) if asks else None
    facts = None
    if p is not None and p.state == "open" and p.head_repo:
        facts = steps.PullFacts(
            p.number, p.head_sha, p.head_ref, p.head_repo, p.base_ref, p.base_sha, p.html_url
        )
        steps.track_pull(ctx.svc, ctx.repo, facts)
    with ctx.pull_lease(number) if facts is not None else nullcontext():
        with ctx.db.session() as s:
            if not _take(ctx, s, number, comment_id, user):
                return
            if not asks:
                _refuse(ctx, s, number, comment_id, user, permission)
                return
        _say(ctx, number, _verify_pull(ctx, user, comment_id, cmd, p, facts, approved=writer))


def _answer(ctx: Context, number: int, comment: dict[str, Any], answer: str) -> None:
    """`/rsi justified` or `/rsi false-alarm`: a writer's verdict on the PR's regression
    alert, kept in the alert-quality ledger (writers only: `trigger.allow` may run
    commands, not judge alerts); anyone else is told who may."""
    user, comment_id = str(comment["user"]["login"]), int(comment["id"])
    with ctx.db.session() as s:
        if approvals.recently_refused(s, ctx.repo, number, user):
            return
    permission = ctx.github.permission(ctx.repo, user, max_age_s=0.0)
    with ctx.db.session() as s:
        if not _take(ctx, s, number, comment_id, user):
            return
        if permission not in approvals.WRITERS:
            _refuse(ctx, s, number, comment_id, user, permission)
            return
        q = inquiries.triage(s, ctx.repo, number, answer, user)
        reply = messages.triaged(user, answer, q) if q else messages.no_alert(user)
        pull_writes.comment(s, ctx.repo, number, reply)


def _verify_pull(
    ctx: Context,
    user: str,
    comment_id: int,
    cmd: Command,
    pull: Pull | None,
    facts: steps.PullFacts | None,
    *,
    approved: bool,
) -> str:
    """The measurement `/rsi verify` asked for, queued (held for a writer's approval when
    `approved` is false) or joined, within the repository's `/rsi verify` budgets; the
    reply."""
    if cmd.errors:
        return messages.help_text(cmd.errors)
    if pull is None or facts is None:
        return messages.not_measurable(
            user, pull.state if pull else "gone", bool(pull and pull.head_repo)
        )
    found = ctx.svc.repo_config(ctx.repo)
    plan = found.config.plan(gpus=cmd.gpus or None, rounds=cmd.rounds)
    if not isinstance(plan, Plan):
        return messages.refused(user, plan)
    over = _over_budget(ctx, pull.number, found.config.budget)
    if over is not None:
        return messages.verify_budget(user, *over)
    got = steps.verify_pull(
        ctx.svc,
        ctx.repo,
        facts,
        plan,
        config=found.config,
        user=user,
        comment_id=comment_id,
        approved=approved,
    )
    if got is None:
        return messages.no_task(user)
    v, joined = got
    if joined:
        return messages.reverify_joined(user, v, True)
    return messages.reverify_queued(user, v) if approved else messages.verify_held(user, v)


def _over_budget(ctx: Context, number: int, budget: Budget) -> tuple[str, str, str] | None:
    """(which, spent, budget) when `/rsi verify` spent its minutes on this PR or today."""
    with ctx.db.session() as s:
        on_pr, today = watch.verify_minutes(s, ctx.repo, number, utcnow())
    if on_pr >= budget.pr_gpu_minutes:
        return "pr", f"{on_pr:.0f}", f"{budget.pr_gpu_minutes:g}"
    if today >= budget.day_gpu_minutes:
        return "day", f"{today:.0f}", f"{budget.day_gpu_minutes:g}"
    return None


def _say(ctx: Context, number: int, body: str) -> None:
    with ctx.db.session() as s:
        pull_writes.comment(s, ctx.repo, number, body)


def _reverify(ctx: Context, number: int, user: str, cmd: Command, said: Said) -> str | None:
    config = ctx.config()
    gpus = cmd.gpus
    if gpus is None and not cmd.all_gpus:
        with ctx.db.session() as s:
            prev = store.latest(s, ctx.repo, number)
            gpus = [g for g in prev.gpus if g in config.gpus] if prev else None
    plan = config.plan(gpus=gpus or None, rounds=cmd.rounds)
    if not isinstance(plan, Plan):
        return messages.refused(user, plan)
    with ctx.db.session() as s:
        pr = store.pull_request(s, ctx.repo, number)
        adopted = pr is not None and not pr.opened_by_app
    over = _over_budget(ctx, number, config.budget) if adopted else None
    if over is not None:
        return messages.verify_budget(user, *over)
    pull = ctx.github.pull(ctx.repo, number)
    head = pull.head_sha
    with ctx.db.session() as s:
        pr = store.pull_request(s, ctx.repo, number)
        assert pr is not None
        pr.head_sha = head
        # The head read now is known from now on (its push may not be delivered yet):
        # a comment written before this instant does not approve it by itself.
        now = utcnow()
        if approvals.head_at(s, ctx.repo, number, now) != head:
            approvals.record_head(s, ctx.repo, number, head, f"read:{said.comment_id}", now)
        seen: str | None = None
        if said.written_at is not None:
            if cmd.sha is not None:
                named = approvals.resolve(s, ctx.repo, number, cmd.sha, said.written_at)
                seen = named[0] if len(named) == 1 else None
            else:
                seen = approvals.head_at(s, ctx.repo, number, said.written_at)
        needs_writer = seen is not None and not approvals.trusted(s, ctx.repo, number, seen)
        quiet = approvals.recently_refused(s, ctx.repo, number, user)
    if seen is None:
        return messages.reverify_which(user, cmd.sha, head)
    permission = said.permission
    if needs_writer:
        # Listed under `trigger.allow`: approving untrusted code still takes write access.
        if permission is None and quiet:
            return None
        # Asked afresh: a cached answer may predate the removal of the user's access.
        permission = ctx.github.permission(ctx.repo, user, max_age_s=0.0)
    if needs_writer and permission not in approvals.WRITERS:
        with ctx.db.session() as s:
            approvals.refuse(s, ctx.repo, said.comment_id, permission or "none")
        return messages.approval_refused(user, seen)
    if permission in approvals.WRITERS:
        with ctx.db.session() as s:
            approvals.approve(s, ctx.repo, number, seen, user)
    if seen != head:
        return messages.reverify_moved(user, seen, head, named=cmd.sha is not None)
    base_sha = None
    if cmd.base_main or config.base == "main":
        base_sha = ctx.github.branch_sha(ctx.repo, pull.base_ref)
    with ctx.db.session() as s:
        under_way = {a.id for a in store.active(s, ctx.repo, number)}
    v = steps.verify_head(
        ctx.svc,
        ctx.repo,
        number,
        head_sha=head,
        trigger=f"/rsi reverify by @{user}",
        gpus=plan.gpus,
        rounds=plan.rounds,
        adaptive=plan.adaptive,
        gpu_minutes=plan.gpu_minutes,
        modes=plan.modes,
        requested_by=user,
        base_sha=base_sha,
    )
    if v is None:
        return messages.nothing_to_repeat(user)
    if v.id in under_way:
        # The same measurement was under way: the request joined it.
        return messages.reverify_joined(user, v, user in (v.requested_by or "").split())
    return messages.reverify_queued(user, v)


def _status(ctx: Context, number: int, user: str, cmd: Command, said: Said) -> str:
    with ctx.db.session() as s:
        v = store.latest(s, ctx.repo, number)
        if v is None:
            return messages.nothing_verified(user)
        _ = list(v.jobs)
        end = store.aware(v.dispatched_at) if v.dispatched_at else utcnow()
        queued = (end - store.aware(v.created_at)).total_seconds()
        expected = _expected_gpu_minutes(s, v.task)
        return messages.status_reply(v, user, queued, v.dispatched_at is None, expected)


def _cancel(ctx: Context, number: int, user: str, cmd: Command, said: Said) -> str:
    event = M.Cancel(Reason(R.CANCELLED_BY, {"user": user}))
    ids = steps.cancel_active(ctx.svc, ctx.repo, number, event)
    return messages.cancelled(user, ids) if ids else messages.nothing_running(user)


def _expected_gpu_minutes(s: Session, task: str) -> float | None:
    rows = s.execute(
        select(RunnerJob.dispatched_at, RunnerJob.completed_at)
        .join(Verification)
        .where(Verification.task == task, RunnerJob.state == M.JobState.KEPT.value)
        .order_by(RunnerJob.completed_at.desc())
        .limit(20)
    ).all()
    spans = [(store.aware(b) - store.aware(a)).total_seconds() / 60 for a, b in rows if a and b]
    return median(spans) if spans else None
