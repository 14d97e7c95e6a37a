"""Per-SHA approvals: a maintainer's word that exactly this commit may run on the GPU
runners (never sticky: a later push needs a new one)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.models import Approval

WRITERS = frozenset({"admin", "maintain", "write"})


def approve(s: Session, repo: str, pr_number: int, sha: str, by: str) -> None:
    if approved(s, repo, pr_number, sha) is None:
        s.add(Approval(repo=repo, pr_number=pr_number, sha=sha, approved_by=by))


def approved(s: Session, repo: str, pr_number: int, sha: str) -> str | None:
    """Who approved exactly this SHA, if anyone."""
    row = s.scalar(
        select(Approval).where(
            Approval.repo == repo, Approval.pr_number == pr_number, Approval.sha == sha
        )
    )
    return row.approved_by if row else None
