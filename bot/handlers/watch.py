"""`push` to a repository's default branch: the watch measures it against the commit
before it (`bot.watch`), when the repository has a valid `.github/rsi.yml`. A forced push
is not measured (the commit before it is no longer the branch's); one handled after the
branch moved on is recorded unmeasured, its range left to the next (`bot.watch`)."""

from __future__ import annotations

import logging

from bot.handlers.context import Context
from bot.verification import steps

log = logging.getLogger(__name__)
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
    found = ctx.svc.repo_config(ctx.repo)
    if not found.found:
        return  # the watch needs the repository to have chosen rsi-bot's settings
    if not found.ok:
        log.warning("%s: push to %s not watched: .github/rsi.yml has problems", ctx.repo, branch)
        return  # its `watch:` may say false: nothing runs on a file that cannot be read
    if p.get("forced"):
        log.info("%s: forced push to %s not watched", ctx.repo, branch)
        return
    installation = (p.get("installation") or {}).get("id")
    steps.watch_push(
        ctx.svc,
        ctx.repo,
        before=before,
        after=after,
        branch=branch,
        tip=ctx.github.branch_sha(ctx.repo, branch),  # a push handled late is not the tip
        config=found.config,
        installation_id=installation if isinstance(installation, int) else None,
    )
