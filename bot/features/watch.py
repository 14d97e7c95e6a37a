"""A push to a repository's default branch: the watch measures it against the commit
before it (`bot.watch`), when the repository has a valid `.github/rsi.yml`. A forced push
is not measured (the commit before it is no longer the branch's); one handled after the
branch moved on is recorded unmeasured, its range left to the next (`bot.watch`)."""

from __future__ import annotations

import logging

from bot.verification import steps
from bot.verification.ports import StepPorts

log = logging.getLogger(__name__)


def pushed(
    p: StepPorts,
    repo: str,
    *,
    branch: str,
    before: str,
    after: str,
    forced: bool,
    installation_id: int | None,
) -> None:
    found = p.repo_config(repo)
    if not found.found:
        return  # the watch needs the repository to have chosen rsi-bot's settings
    if not found.ok:
        log.warning("%s: push to %s not watched: .github/rsi.yml has problems", repo, branch)
        return  # its `watch:` may say false: nothing runs on a file that cannot be read
    if forced:
        log.info("%s: forced push to %s not watched", repo, branch)
        return
    steps.watch_push(
        p,
        repo,
        before=before,
        after=after,
        branch=branch,
        tip=p.github.branch_sha(repo, branch),  # a push handled late is not the tip
        config=found.config,
        installation_id=installation_id,
    )
