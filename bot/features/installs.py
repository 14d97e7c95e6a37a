"""Where the App is installed: the installation's account and repositories, kept as
GitHub tells of them (`installation`, `installation_repositories`)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from bot.models import Installation
from bot.verification.ports import StepPorts


def _row(
    s: Session, inst_id: int, account: str, target_type: str | None, repos: list[str]
) -> Installation:
    row = s.get(Installation, inst_id)
    if row is None:
        row = Installation(id=inst_id, account=account, target_type=target_type, repositories=repos)
        s.add(row)
    return row


def changed(
    p: StepPorts,
    inst_id: int,
    account: str,
    target_type: str | None,
    action: str | None,
    repos: list[str],
) -> None:
    """The installation created, deleted, suspended or given new permissions."""
    with p.db.session() as s:
        row = _row(s, inst_id, account, target_type, repos)
        row.active = action not in ("deleted", "suspend")
        if action in ("created", "new_permissions_accepted") and repos:
            row.repositories = repos


def repositories(
    p: StepPorts,
    inst_id: int,
    account: str,
    target_type: str | None,
    added: list[str],
    removed: set[str],
) -> None:
    """Repositories added to or removed from the installation."""
    with p.db.session() as s:
        row = _row(s, inst_id, account, target_type, [])
        row.repositories = sorted((set(row.repositories) | set(added)) - removed)
