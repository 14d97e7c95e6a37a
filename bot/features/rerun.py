"""The buttons of `rsi/verify`: GitHub's Re-run, with which a writer re-verifies (and so
approves) that SHA, and the App's own Approve and verify on a check run awaiting
approval, with which a writer approves exactly its head SHA, while it is the PR's head.
The sender's permission is checked here (afresh, for approving code), whoever GitHub
shows a button to."""

from __future__ import annotations

import logging

from bot import approvals, triggers
from bot.models import PullRequest
from bot.repo_config import Plan
from bot.verification import machine as M
from bot.verification import steps, store
from bot.verification.ports import StepPorts

log = logging.getLogger(__name__)


def rerun(p: StepPorts, repo: str, sha: str, numbers: list[int], sender: str) -> None:
    """GitHub's Re-run of `rsi/verify` on `sha` (its PRs `numbers`, none for a fork's PR):
    a writer's re-verifies and so approves it."""
    with p.db.session() as s:
        # Fork PRs come with no `pull_requests`: then the head SHA finds the PR.
        prs = [store.pull_request(s, repo, n) for n in numbers] or store.pulls_at(s, repo, sha)
        pr: PullRequest | None = next((x for x in prs if x and x.head_sha == sha), None)
        if pr is None:
            return
        number = pr.number
        prev = store.latest(s, repo, number)
        prev_gpus = list(prev.gpus) if prev else None
    if p.github.permission(repo, sender) not in approvals.WRITERS:
        return
    config = p.repo_config(repo).config
    with p.db.session() as s:
        approvals.approve(s, repo, number, sha, sender)
    _verify(p, repo, number, sha, sender, triggers.of("rerun", sender), config.plan_like(prev_gpus))


def approve_pressed(
    p: StepPorts, repo: str, sha: str, sender: str, vid: str, check_run_id: int
) -> None:
    """Approve and verify: the check run's verification (its `external_id`) awaited
    approval of its head SHA. A writer's press (permission asked afresh) approves exactly
    that SHA and verifies it, if it is still the PR's head; a press on an older head
    approves nothing, and the writer is told so; anyone else's does nothing."""
    with p.db.session() as s:
        v = store.get(s, vid)
        if v is None or v.repo != repo or v.pr_number is None:
            return
        if v.check_run_id != check_run_id or v.head_sha != sha or not v.held_for_approval:
            return  # not the App's awaiting check run of this SHA
        number, gpus = v.pr_number, list(v.gpus)
        if store.pull_request(s, repo, number) is None:
            return
    if p.github.permission(repo, sender, max_age_s=0.0) not in approvals.WRITERS:
        log.info("%s#%s: %s may not approve %s; nothing runs", repo, number, sender, sha[:10])
        return
    pull = p.github.pull(repo, number)
    if pull.head_sha != sha:
        steps.apply(p, vid, M.StalePress(sender, sha, pull.head_sha))
        return
    with p.db.session() as s:
        pr = store.pull_request(s, repo, number)
        assert pr is not None
        pr.head_sha = sha
        approvals.approve(s, repo, number, sha, sender)
    config = p.repo_config(repo).config
    base_sha = p.github.branch_sha(repo, pull.base_ref) if config.base == "main" else None
    trigger = triggers.of("approve", sender)
    _verify(p, repo, number, sha, sender, trigger, config.plan_like(gpus), base_sha)


def _verify(
    p: StepPorts,
    repo: str,
    number: int,
    sha: str,
    sender: str,
    trigger: str,
    plan: Plan,
    base_sha: str | None = None,
) -> None:
    """Verify `sha`, just approved by `sender`, under `plan`."""
    steps.verify_head(
        p,
        repo,
        number,
        head_sha=sha,
        trigger=trigger,
        plan=plan,
        requested_by=sender,
        base_sha=base_sha,
    )
