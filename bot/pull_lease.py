"""Commands on one PR take turns: each holds the PR's lease while it reads the PR, decides
and writes, so two `/rsi` commands delivered at once cannot both queue a verification of
the same head or approve in between each other's reads. A command that finds the lease
held is not acted on now: `Busy` is an outage a later attempt outlasts, so its delivery
is retried (the lease of a killed worker runs out)."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import update

from bot.db import Database
from bot.models import PullRequest, utcnow


class Busy(Exception):
    """Another command of the PR is being acted on."""


@contextmanager
def held(db: Database, repo: str, number: int, lease_s: int) -> Iterator[None]:
    now, token = utcnow(), secrets.token_hex(8)
    with db.session() as s:
        got = s.execute(
            update(PullRequest)
            .where(
                PullRequest.repo == repo,
                PullRequest.number == number,
                (PullRequest.lease_until.is_(None)) | (PullRequest.lease_until < now),
            )
            .values(lease_until=now + dt.timedelta(seconds=lease_s), lease_owner=token)
            .execution_options(synchronize_session=False)
        ).rowcount  # type: ignore[attr-defined]
    if not got:
        raise Busy(f"{repo}#{number}: another command of this PR is being acted on")
    try:
        yield
    finally:
        with db.session() as s:
            s.execute(
                update(PullRequest)
                .where(
                    PullRequest.repo == repo,
                    PullRequest.number == number,
                    PullRequest.lease_owner == token,
                )
                .values(lease_until=None, lease_owner=None)
                .execution_options(synchronize_session=False)
            )
