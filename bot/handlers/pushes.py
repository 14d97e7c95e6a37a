"""`pull_request` opened, reopened and synchronize: the PR's head, handed to
`bot.features.pushes` (recorded, and on a push verified or held for approval)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from bot.features import pushes
from bot.handlers.context import Context


def _parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def _head(ctx: Context) -> pushes.Head:
    pull = ctx.payload["pull_request"]
    return pushes.Head(
        repo=ctx.repo,
        number=int(pull["number"]),
        sha=str(pull["head"]["sha"]),
        base_ref=str(pull["base"]["ref"]),
        sender=ctx.sender,
        updated_at=_parse_time(pull.get("updated_at")),
        delivery=ctx.delivery_id,
        event=ctx.event,
    )


def head_seen(ctx: Context) -> None:
    pushes.seen(ctx.svc, _head(ctx))


def pushed(ctx: Context) -> None:
    pushes.pushed(ctx.svc, _head(ctx))
