"""Real PostgreSQL and Redis for tests (`scripts/test-services`, which `make test` runs
first, installs and starts both). A test that uses them is marked `services` (by
tests/conftest.py) and, when one is not running, fails with the command to run."""

from __future__ import annotations

import atexit
import functools
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import redis

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS = "redis://127.0.0.1:6379"
BRING_UP = "run `sudo make test` (it runs scripts/test-services first), or that script as root"

# Set per test by tests/conftest.py: whether the running test carries the marker.
MARKED = True
NODE = ""


def require_marked(what: str) -> None:
    """Fail a test that uses `what` but is not marked `services`: `make unit-fast` would
    run it on a machine without the service."""
    if not MARKED:
        raise AssertionError(
            f"{NODE} uses {what} but is not marked `services`: teach "
            "tests/conftest.py's pytest_collection_modifyitems how it reaches it"
        )


@functools.cache
def _migrated_template() -> str:
    """A database at the newest schema, made once per test process (pytest-xdist's
    workers each have theirs) and dropped when the process exits."""
    from bot.db import upgrade

    name = f"rsi_template_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    atexit.register(_drop, name)
    upgrade(f"postgresql://postgres@127.0.0.1:5432/{name}")
    return name


def _drop(name: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def postgres_database(migrated: bool = False) -> Iterator[str]:
    """A fresh database, empty or (`migrated`) a copy of one at the App's newest schema,
    as `bot.db.upgrade` leaves a new one (tests/test_migration_rows.py checks that);
    dropped afterwards."""
    require_marked("PostgreSQL")
    name = f"rsi_test_{secrets.token_hex(4)}"
    try:
        template = f' TEMPLATE "{_migrated_template()}" STRATEGY FILE_COPY' if migrated else ""
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{template}')
    except psycopg.OperationalError as exc:
        raise RuntimeError(
            f"PostgreSQL is not running on 127.0.0.1:5432 ({exc}); {BRING_UP}"
        ) from exc
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        _drop(name)


# Databases a test may have: 0 holds the locks below.
REDIS_DBS = range(1, 16)


@contextmanager
def redis_db() -> Iterator[str]:
    """An empty Redis database no other test process holds (a lock per database in
    database 0, expiring in case a run is killed): pytest-xdist's workers, or two test
    runs on one machine, would otherwise share, and flush, each other's queue."""
    require_marked("Redis")
    locks = redis.Redis.from_url(f"{REDIS}/0")
    token = secrets.token_hex(8)
    try:
        for number in REDIS_DBS:
            key = f"rsi-tests:redis-db:{number}"
            try:
                if not locks.set(key, token, nx=True, ex=900):
                    continue
            except redis.ConnectionError as exc:
                raise RuntimeError(
                    f"Redis is not running on 127.0.0.1:6379 ({exc}); {BRING_UP}"
                ) from exc
            try:
                with _flushed(f"{REDIS}/{number}") as url:
                    yield url
            finally:
                if locks.get(key) == token.encode():
                    locks.delete(key)
            return
        raise RuntimeError(f"every Redis database of {list(REDIS_DBS)} is held by a test run")
    finally:
        locks.close()


@contextmanager
def _flushed(url: str) -> Iterator[str]:
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()
