"""Who may do what: write access through GitHub's collaborator-permission API, the
trusted pushers of the settings (and the repository's config), and per-SHA approvals."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.models import Approval
from bot.runtime import Runtime

WRITERS = frozenset({"admin", "maintain", "write"})


def permission(rt: Runtime, repo: str, user: str, installation_id: int | None = None) -> str:
    """`admin`, `maintain`, `write`, `triage`, `read` or `none`."""
    iid = installation_id or rt.github.installation_id(repo)
    _, data = rt.github.request(iid, "GET", f"/repos/{repo}/collaborators/{user}/permission")
    role = str(data.get("role_name") or data.get("permission") or "none")
    return role


def can_write(rt: Runtime, repo: str, user: str, installation_id: int | None = None) -> bool:
    return permission(rt, repo, user, installation_id) in WRITERS


def trusted_pusher(rt: Runtime, user: str, extra: frozenset[str] = frozenset()) -> bool:
    return user.lower() in (rt.settings.trusted_pushers | {u.lower() for u in extra})


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
