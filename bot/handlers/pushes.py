"""A push to a tracked PR: verify the new head when its author is trusted, else ask a
maintainer to approve exactly that commit. The push ends a review round that asked for
changes: it is the answer to that review, later pushes are plain pushes."""

from __future__ import annotations

import logging

from bot import approvals, messages
from bot.handlers.context import Context
from bot.handlers.registry import on
from bot.verification import steps, store

log = logging.getLogger(__name__)


@on("pull_request", "synchronize")
def pushed(ctx: Context) -> None:
    pull, sender = ctx.payload["pull_request"], ctx.sender
    sha, number = pull["head"]["sha"], pull["number"]
    with ctx.db.session() as s:
        if store.pull_request(s, ctx.repo, number) is None:
            return
    # A late or redelivered push must not replace the verification of a newer head.
    if ctx.github.pull(ctx.repo, number).head_sha != sha:
        log.info("%s#%s: push of %s is not the head any more; ignored", ctx.repo, number, sha[:10])
        return
    with ctx.db.session() as s:
        pr = store.pull_request(s, ctx.repo, number)
        assert pr is not None
        pr.head_sha = sha
        answers_review, pr.review_pending = pr.review_pending, False
        prev = store.latest(s, ctx.repo, number)
        prev_gpus = list(prev.gpus) if prev else None
        approved_by = approvals.approved(s, ctx.repo, number, sha)
    config = ctx.config()
    trusted = (
        config.trusts_pusher(sender, ctx.settings.trusted_pushers)
        or approved_by is not None
        or ctx.github.permission(ctx.repo, sender) in approvals.WRITERS
    )
    if not trusted:
        ctx.github.create_comment(ctx.repo, number, messages.approval_needed(sender, sha))
        return
    plan = config.plan_like(prev_gpus)
    base_sha = None
    if config.base == "main":
        base_sha = ctx.github.branch_sha(ctx.repo, pull["base"]["ref"])
    trigger = "push after review" if answers_review else "push"
    steps.verify_head(
        ctx.svc,
        ctx.repo,
        number,
        head_sha=sha,
        trigger=f"{trigger} by @{sender}",
        gpus=plan.gpus,
        rounds=plan.rounds,
        modes=plan.modes,
        base_sha=base_sha,
        review_round=answers_review,
    )
