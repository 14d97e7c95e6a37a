"""`issue_comment` created: a `/rsi` command, handed to `bot.features.commands` with the
comment it came in. Comments by bots, comments that are no command and edits (only
`created` is handled) are ignored here."""

from __future__ import annotations

import datetime as dt
from typing import Any

from bot.commands import parse
from bot.features import commands
from bot.handlers.context import Context


def _written_at(comment: dict[str, Any]) -> dt.datetime | None:
    value = comment.get("created_at")
    if not isinstance(value, str) or not value:
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def commented(ctx: Context) -> None:
    comment, issue = ctx.payload["comment"], ctx.payload["issue"]
    if (ctx.payload.get("sender") or {}).get("type") == "Bot":
        return
    cmd = parse(comment.get("body") or "")
    if cmd is None:
        return
    said = commands.Comment(
        repo=ctx.repo,
        number=int(issue["number"]),
        on_pull="pull_request" in issue,
        comment_id=int(comment["id"]),
        user=str(comment["user"]["login"]),
        written_at=_written_at(comment),
        delivery=ctx.delivery_id,
    )
    commands.commented(ctx.svc, said, cmd)
