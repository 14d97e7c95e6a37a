"""`push`: a push to the repository's default branch, handed to `bot.features.watch`;
another branch, a tag, a deleted or just created branch is not the watch's."""

from __future__ import annotations

from bot.features import watch
from bot.handlers.context import Context

ZERO = "0" * 40


def pushed(ctx: Context) -> None:
    p = ctx.payload
    repository = p.get("repository") or {}
    branch = str(repository.get("default_branch") or "")
    before, after = str(p.get("before") or ""), str(p.get("after") or "")
    if not branch or p.get("ref") != "refs/heads/" + branch or p.get("deleted"):
        return  # another branch or a tag, or the branch deleted
    if len(after) != 40 or before in ("", ZERO):
        return  # a branch just created has nothing before it to compare with
    installation = (p.get("installation") or {}).get("id")
    watch.pushed(
        ctx.svc,
        ctx.repo,
        branch=branch,
        before=before,
        after=after,
        forced=bool(p.get("forced")),
        installation_id=installation if isinstance(installation, int) else None,
    )
