"""`installation` and `installation_repositories`, handed to `bot.features.installs`."""

from __future__ import annotations

from bot.features import installs
from bot.handlers.context import Context


def _names(key: str, ctx: Context) -> list[str]:
    return [str(r["full_name"]) for r in ctx.payload.get(key) or []]


def installation(ctx: Context) -> None:
    inst, action = ctx.payload["installation"], ctx.payload.get("action")
    installs.changed(
        ctx.svc,
        int(inst["id"]),
        str(inst["account"]["login"]),
        inst.get("target_type"),
        action if isinstance(action, str) else None,
        _names("repositories", ctx),
    )


def installation_repositories(ctx: Context) -> None:
    inst = ctx.payload["installation"]
    installs.repositories(
        ctx.svc,
        int(inst["id"]),
        str(inst["account"]["login"]),
        inst.get("target_type"),
        _names("repositories_added", ctx),
        set(_names("repositories_removed", ctx)),
    )
