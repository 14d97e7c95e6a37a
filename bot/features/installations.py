"""Record where the App is installed (`installation`, `installation_repositories`)."""

from __future__ import annotations

from bot import runtime
from bot.models import Installation
from bot.routing import Payload, Router

router = Router()


@router.register("installation")
def installation(payload: Payload) -> None:
    inst = payload["installation"]
    repos = [r["full_name"] for r in payload.get("repositories") or []]
    with runtime.current().db.session() as s:
        row = s.get(Installation, inst["id"])
        if row is None:
            row = Installation(
                id=inst["id"],
                account=inst["account"]["login"],
                target_type=inst.get("target_type"),
                repositories=repos,
            )
            s.add(row)
        row.active = payload.get("action") not in ("deleted", "suspend")
        if payload.get("action") in ("created", "new_permissions_accepted") and repos:
            row.repositories = repos


@router.register("installation_repositories")
def installation_repositories(payload: Payload) -> None:
    inst = payload["installation"]
    added = [r["full_name"] for r in payload.get("repositories_added") or []]
    removed = {r["full_name"] for r in payload.get("repositories_removed") or []}
    with runtime.current().db.session() as s:
        row = s.get(Installation, inst["id"])
        if row is None:
            row = Installation(
                id=inst["id"],
                account=inst["account"]["login"],
                target_type=inst.get("target_type"),
                repositories=[],
            )
            s.add(row)
        row.repositories = sorted((set(row.repositories) | set(added)) - removed)
