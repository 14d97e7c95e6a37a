"""Review rounds: verify a PR's new head, supersede what it replaces, cancel on request.

A verification of a later commit supersedes every earlier one still active: their runs
are cancelled and they are never published as current.
"""

from __future__ import annotations

import copy
import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot import flow
from bot.models import ACTIVE, CANCELLED, QUEUED, SUPERSEDED, PullRequest, RunnerJob, Verification
from bot.runtime import Runtime

log = logging.getLogger(__name__)


def latest(s: Session, repo: str, number: int) -> Verification | None:
    return s.scalar(
        select(Verification)
        .where(Verification.repo == repo, Verification.pr_number == number)
        .order_by(Verification.created_at.desc())
        .limit(1)
    )


def active(s: Session, repo: str, number: int) -> list[Verification]:
    return list(
        s.scalars(
            select(Verification)
            .where(
                Verification.repo == repo,
                Verification.pr_number == number,
                Verification.state.in_(ACTIVE),
            )
            .order_by(Verification.created_at)
        )
    )


def verify_head(
    rt: Runtime,
    s: Session,
    pr: PullRequest,
    *,
    trigger: str,
    requested_by: str | None = None,
    gpus: list[str] | None = None,
    rounds: int | None = None,
    base_sha: str | None = None,
    review_round: bool = False,
) -> Verification | None:
    """Start a verification of the PR's current head (None if the PR has none to copy).

    Idempotent: an active verification of the same head and base is returned as it is.
    """
    prev = latest(s, pr.repo, pr.number)
    if prev is None:
        return None
    base = base_sha or prev.base_sha
    for v in active(s, pr.repo, pr.number):
        if v.head_sha == pr.head_sha and v.base_sha == base and (gpus is None or v.gpus == gpus):
            return v
    cand = copy.deepcopy(prev.candidate)
    cand["head"] = {
        **cand.get("head", {}),
        "sha": pr.head_sha,
        "repo": pr.head_repo,
        "ref": pr.head_ref,
    }
    cand["base_sha"] = base
    new = Verification(
        id=flow.new_id(),
        candidate_id=prev.candidate_id,
        repo=pr.repo,
        pr_number=pr.number,
        task=prev.task,
        base_sha=base,
        head_sha=pr.head_sha,
        head_repo=pr.head_repo,
        head_ref=pr.head_ref,
        gpus=gpus or prev.gpus,
        rounds=rounds or prev.rounds,
        modes=prev.modes,
        candidate=cand,
        trigger=trigger,
        requested_by=requested_by,
        review_round=review_round,
        installation_id=prev.installation_id,
        state=QUEUED,
    )
    s.add(new)
    s.flush()
    for gpu in new.gpus:
        s.add(RunnerJob(verification_id=new.id, gpu=gpu))
    for old in active(s, pr.repo, pr.number):
        if old.id != new.id:
            supersede(rt, s, old, new)
    log.info(
        "verification %s of %s#%s at %s (%s)", new.id, pr.repo, pr.number, pr.head_sha[:10], trigger
    )
    return new


def supersede(rt: Runtime, s: Session, old: Verification, new: Verification) -> None:
    flow.cancel_runs(rt, old)
    old.superseded_by = new.id
    why = (
        f"Superseded by verification `{new.id}` of `{new.head_sha[:10]}`"
        if new.head_sha != old.head_sha
        else f"Superseded by verification `{new.id}`"
    )
    flow.end(rt, s, old, SUPERSEDED, why + ".", comment=False)


def cancel(rt: Runtime, s: Session, v: Verification, why: str) -> None:
    flow.cancel_runs(rt, v)
    flow.end(rt, s, v, CANCELLED, why)
