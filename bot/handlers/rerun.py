"""The buttons of `rsi/verify`: GitHub's Re-run, with which a writer re-verifies (and so
approves) that SHA, and the App's own Approve and verify on a check run awaiting
approval, with which a writer approves exactly its head SHA, while it is the PR's head.
The sender's permission is checked here (afresh, for approving code), whoever GitHub
shows a button to."""

from __future__ import annotations

import logging

from bot import approvals
from bot.github.api import APPROVE_ACTION, CHECK_NAME
from bot.handlers.context import Context
from bot.models import PullRequest
from bot.repo_config import Plan
from bot.verification import machine as M
from bot.verification import steps, store

log = logging.getLogger(__name__)


def rerun(ctx: Context) -> None:
    run = ctx.payload["check_run"]
    if run.get("name") != CHECK_NAME:
        return
    sender, sha = ctx.sender, run["head_sha"]
    numbers = [p["number"] for p in run.get("pull_requests") or []]
    with ctx.db.session() as s:
        # Fork PRs come with no `pull_requests`: then the head SHA finds the PR.
        prs = [store.pull_request(s, ctx.repo, n) for n in numbers] or store.pulls_at(
            s, ctx.repo, sha
        )
        pr: PullRequest | None = next((p for p in prs if p and p.head_sha == sha), None)
        if pr is None:
            return
        number = pr.number
        prev = store.latest(s, ctx.repo, number)
        prev_gpus = list(prev.gpus) if prev else None
    if ctx.github.permission(ctx.repo, sender) not in approvals.WRITERS:
        return
    config = ctx.config()
    with ctx.db.session() as s:
        approvals.approve(s, ctx.repo, number, sha, sender)
    _verify(ctx, number, sha, sender, f"Re-run by @{sender}", config.plan_like(prev_gpus))


def approve_pressed(ctx: Context) -> None:
    """Approve and verify: the check run's verification (its `external_id`) awaited
    approval of its head SHA. A writer's press (permission asked afresh) approves exactly
    that SHA and verifies it, if it is still the PR's head; a press on an older head
    approves nothing, and the writer is told so; anyone else's does nothing."""
    run, pressed = ctx.payload["check_run"], ctx.payload.get("requested_action") or {}
    if run.get("name") != CHECK_NAME or pressed.get("identifier") != APPROVE_ACTION:
        return
    sender, sha, vid = ctx.sender, str(run.get("head_sha") or ""), str(run.get("external_id"))
    with ctx.db.session() as s:
        v = store.get(s, vid)
        if v is None or v.repo != ctx.repo or v.pr_number is None:
            return
        if v.check_run_id != run.get("id") or v.head_sha != sha or not v.held_for_approval:
            return  # not the App's awaiting check run of this SHA
        number, gpus = v.pr_number, list(v.gpus)
        if store.pull_request(s, ctx.repo, number) is None:
            return
    if ctx.github.permission(ctx.repo, sender, max_age_s=0.0) not in approvals.WRITERS:
        log.info("%s#%s: %s may not approve %s; nothing runs", ctx.repo, number, sender, sha[:10])
        return
    pull = ctx.github.pull(ctx.repo, number)
    if pull.head_sha != sha:
        steps.apply(ctx.svc, vid, M.StalePress(sender, sha, pull.head_sha))
        return
    with ctx.db.session() as s:
        pr = store.pull_request(s, ctx.repo, number)
        assert pr is not None
        pr.head_sha = sha
        approvals.approve(s, ctx.repo, number, sha, sender)
    config = ctx.config()
    base_sha = ctx.github.branch_sha(ctx.repo, pull.base_ref) if config.base == "main" else None
    trigger = f"Approve and verify by @{sender}"
    _verify(ctx, number, sha, sender, trigger, config.plan_like(gpus), base_sha)


def _verify(
    ctx: Context,
    number: int,
    sha: str,
    sender: str,
    trigger: str,
    plan: Plan,
    base_sha: str | None = None,
) -> None:
    """Verify `sha`, just approved by `sender`, under `plan`."""
    steps.verify_head(
        ctx.svc,
        ctx.repo,
        number,
        head_sha=sha,
        trigger=trigger,
        gpus=plan.gpus,
        rounds=plan.rounds,
        adaptive=plan.adaptive,
        gpu_minutes=plan.gpu_minutes,
        modes=plan.modes,
        requested_by=sender,
        base_sha=base_sha,
    )
