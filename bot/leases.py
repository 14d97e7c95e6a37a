"""A lease on a row: whoever holds it acts on what the row stands for (a verification's
effects, a PR's commands), others wait or retry. A row's lease is its `lease_until` and
`lease_owner` columns, taken and given back in transactions of their own so that other
workers see it at once; an expired lease is free to take (its holder died)."""

from __future__ import annotations

import datetime as dt
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import ColumnElement, update
from sqlalchemy.exc import IntegrityError

from bot.db import Database
from bot.models import utcnow


def take(db: Database, model: Any, where: ColumnElement[bool], lease_s: float) -> str | None:
    """Take the lease of the row `where` selects; its token, or None when it is held."""
    now, token = utcnow(), secrets.token_hex(8)
    with db.session() as s:
        got = s.execute(
            update(model)
            .where(where, (model.lease_until.is_(None)) | (model.lease_until < now))
            .values(lease_until=now + dt.timedelta(seconds=lease_s), lease_owner=token)
            .execution_options(synchronize_session=False)
        ).rowcount  # type: ignore[attr-defined]
    return token if got else None


def renew(db: Database, model: Any, where: ColumnElement[bool], token: str, lease_s: float) -> bool:
    """Extend a lease still ours; False when it was lost (it expired and was taken)."""
    with db.session() as s:
        got = s.execute(
            update(model)
            .where(where, model.lease_owner == token)
            .values(lease_until=utcnow() + dt.timedelta(seconds=lease_s))
            .execution_options(synchronize_session=False)
        ).rowcount  # type: ignore[attr-defined]
    return bool(got)


def give_back(db: Database, model: Any, where: ColumnElement[bool], token: str) -> None:
    """Give the lease back, if it is still ours."""
    with db.session() as s:
        s.execute(
            update(model)
            .where(where, model.lease_owner == token)
            .values(lease_until=None, lease_owner=None)
            .execution_options(synchronize_session=False)
        )


@contextmanager
def named(db: Database, name: str, lease_s: float = 30.0, wait_s: float = 10.0) -> Iterator[bool]:
    """Hold the lease of the `locks` row `name` (created on first use) for the block;
    yields False when it could not be taken within `wait_s` (its holder is slow or
    died: an expired lease is taken after `lease_s`)."""
    from bot.models import Lock

    where = Lock.name == name
    deadline, pause = time.monotonic() + wait_s, 0.002
    token = take(db, Lock, where, lease_s)
    if token is None:
        _create(db, name)  # first use, or another worker holds it: either way it exists
        token = take(db, Lock, where, lease_s)
    while token is None and time.monotonic() < deadline:
        time.sleep(pause)  # a start decision takes milliseconds
        pause = min(pause * 2, 0.05)
        token = take(db, Lock, where, lease_s)
    try:
        yield token is not None
    finally:
        if token is not None:
            give_back(db, Lock, where, token)


def _create(db: Database, name: str) -> None:
    """The `locks` row `name`, unless it is there already."""
    from bot.models import Lock

    with db.session() as s:
        if s.get(Lock, name) is None:
            try:
                s.add(Lock(name=name))
                s.flush()
            except IntegrityError:  # another worker created it meanwhile
                s.rollback()
