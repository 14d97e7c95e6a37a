"""Record where the App is installed (`installation`, `installation_repositories`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from bot.handlers.context import Context
from bot.models import Installation


def _row(s: Session, inst: dict[str, Any], repos: list[str]) -> Installation:
    row = s.get(Installation, inst["id"])
    if row is None:
        row = Installation(
            id=inst["id"],
            account=inst["account"]["login"],
            target_type=inst.get("target_type"),
            repositories=repos,
        )
        s.add(row)
    return row


def installation(ctx: Context) -> None:
    inst = ctx.payload["installation"]
    action = ctx.payload.get("action")
    repos = [r["full_name"] for r in ctx.payload.get("repositories") or []]
    with ctx.db.session() as s:
        row = _row(s, inst, repos)
        row.active = action not in ("deleted", "suspend")
        if action in ("created", "new_permissions_accepted") and repos:
            row.repositories = repos


def installation_repositories(ctx: Context) -> None:
    inst = ctx.payload["installation"]
    added = [r["full_name"] for r in ctx.payload.get("repositories_added") or []]
    removed = {r["full_name"] for r in ctx.payload.get("repositories_removed") or []}
    with ctx.db.session() as s:
        row = _row(s, inst, [])
        row.repositories = sorted((set(row.repositories) | set(added)) - removed)
