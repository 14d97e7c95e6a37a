"""GitHub's Re-run button on `rsi/verify`: a writer re-verifies (and so approves) that
SHA. GitHub shows the button to anyone who can see checks, so the sender's permission is
checked here."""

from __future__ import annotations

from bot import approvals
from bot.github.api import CHECK_NAME
from bot.handlers.context import Context
from bot.handlers.registry import on
from bot.models import PullRequest
from bot.verification import steps, store


@on("check_run", "rerequested")
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
    plan = config.plan_like(prev_gpus)
    with ctx.db.session() as s:
        approvals.approve(s, ctx.repo, number, sha, sender)
    steps.verify_head(
        ctx.svc,
        ctx.repo,
        number,
        head_sha=sha,
        trigger=f"Re-run by @{sender}",
        gpus=plan.gpus,
        rounds=plan.rounds,
        adaptive=plan.adaptive,
        gpu_minutes=plan.gpu_minutes,
        modes=plan.modes,
        requested_by=sender,
    )
