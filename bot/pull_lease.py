"""Commands on one PR take turns: each holds the PR's lease while it reads the PR, decides
and writes, so two `/rsi` commands delivered at once cannot both queue a verification of
the same head or approve in between each other's reads. A command that finds the lease
held is not acted on now: `Busy` is an outage a later attempt outlasts, so its delivery
is retried (the lease of a killed worker runs out)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from bot import leases
from bot.db import Database
from bot.models import PullRequest


class Busy(Exception):
    """Another command of the PR is being acted on."""


@contextmanager
def held(db: Database, repo: str, number: int, lease_s: int) -> Iterator[None]:
    where = (PullRequest.repo == repo) & (PullRequest.number == number)
    token = leases.take(db, PullRequest, where, lease_s)
    if token is None:
        raise Busy(f"{repo}#{number}: another command of this PR is being acted on")
    try:
        yield
    finally:
        leases.give_back(db, PullRequest, where, token)
