"""Review rounds on tracked PRs: pushes, reviews that request changes, GitHub's Re-run
button, and closing. Untrusted code never reaches the GPU runners unapproved."""

from __future__ import annotations

from sqlalchemy import select

from bot import reviews, runtime, trust
from bot.models import PullRequest
from bot.routing import Payload, Router

router = Router()


def _tracked(s: object, payload: Payload) -> PullRequest | None:
    from sqlalchemy.orm import Session

    assert isinstance(s, Session)
    pr = payload["pull_request"]
    return s.scalar(
        select(PullRequest).where(
            PullRequest.repo == payload["repository"]["full_name"],
            PullRequest.number == pr["number"],
        )
    )


@router.register("pull_request", "synchronize")
def pushed(payload: Payload) -> None:
    rt = runtime.current()
    sender = payload["sender"]["login"]
    head = payload["pull_request"]["head"]
    with rt.db.session() as s:
        pr = _tracked(s, payload)
        if pr is None:
            return
        pr.head_sha = head["sha"]
        repo, number, sha = pr.repo, pr.number, pr.head_sha
        review_round = pr.review_pending
    result = rt.repo_config(repo)
    config = result.config
    ok = (
        trust.trusted_pusher(rt, sender, frozenset(config.trigger.trusted_pushers))
        or config.approval == "never-required"
        or trust.can_write(rt, repo, sender)
    )
    # A repository may ask to be measured against the current main automatically.
    base_sha = None
    if config.base == "main":
        base_ref = payload["pull_request"]["base"]["ref"]
        base_sha = rt.github.repo(repo).get_branch(base_ref).commit.sha
    with rt.db.session() as s:
        pr = _tracked(s, payload)
        assert pr is not None
        if not ok and trust.approved(s, repo, number, sha) is None:
            _ask_for_approval(rt, repo, number, sha, sender)
            return
        trigger = "push after review" if review_round else "push"
        v = reviews.verify_head(
            rt,
            s,
            pr,
            trigger=f"{trigger} by @{sender}",
            requested_by=sender,
            review_round=review_round,
            base_sha=base_sha,
        )
        vid = v.id if v else None
    if vid:
        rt.tasks.start(vid)


def _ask_for_approval(rt: runtime.Runtime, repo: str, number: int, sha: str, sender: str) -> None:
    rt.github.repo(repo).get_issue(number).create_comment(
        f"@{sender} pushed `{sha[:10]}`. rsi-bot runs code on its GPU runners only for "
        "trusted authors, so this commit is not verified yet. A maintainer can approve "
        f"**exactly this commit** with `/rsi reverify`; a later push needs a new approval."
    )


@router.register("pull_request_review", "submitted")
def reviewed(payload: Payload) -> None:
    if (payload.get("review") or {}).get("state", "").lower() != "changes_requested":
        return
    rt = runtime.current()
    with rt.db.session() as s:
        pr = _tracked(s, payload)
        if pr is not None:
            pr.review_pending = True


@router.register("pull_request", "closed")
def closed(payload: Payload) -> None:
    rt = runtime.current()
    with rt.db.session() as s:
        pr = _tracked(s, payload)
        if pr is None:
            return
        pr.state = "merged" if payload["pull_request"].get("merged") else "closed"
        for v in reviews.active(s, pr.repo, pr.number):
            reviews.cancel(rt, s, v, f"The PR was {pr.state}; the verification was cancelled.")


@router.register("check_run", "rerequested")
def rerun(payload: Payload) -> None:
    """GitHub's Re-run button: only writers can press it, so it approves that SHA."""
    from bot.flow import CHECK_NAME

    run = payload["check_run"]
    if run.get("name") != CHECK_NAME:
        return
    rt = runtime.current()
    repo = payload["repository"]["full_name"]
    sender = payload["sender"]["login"]
    with rt.db.session() as s:
        numbers = [p["number"] for p in run.get("pull_requests") or []]
        pr = s.scalar(
            select(PullRequest).where(
                PullRequest.repo == repo,
                PullRequest.head_sha == run["head_sha"],
                *([PullRequest.number.in_(numbers)] if numbers else []),
            )
        )
        if pr is None:
            return
        trust.approve(s, repo, pr.number, run["head_sha"], sender)
        v = reviews.verify_head(rt, s, pr, trigger=f"Re-run by @{sender}", requested_by=sender)
        vid = v.id if v else None
    if vid:
        rt.tasks.start(vid)
