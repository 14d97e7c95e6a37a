"""Real PostgreSQL and Redis for tests (`scripts/test-services`, which `make test` runs
first, installs and starts both). A test that uses them is marked `services` (by
tests/conftest.py) and, when one is not running, fails with the command to run."""

from __future__ import annotations

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


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh, empty database; dropped afterwards."""
    require_marked("PostgreSQL")
    name = f"rsi_test_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        raise RuntimeError(
            f"PostgreSQL is not running on 127.0.0.1:5432 ({exc}); {BRING_UP}"
        ) from exc
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def redis_db(number: int = 14) -> Iterator[str]:
    require_marked("Redis")
    url = f"{REDIS}/{number}"
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    except redis.ConnectionError as exc:
        raise RuntimeError(f"Redis is not running on 127.0.0.1:6379 ({exc}); {BRING_UP}") from exc
    try:
        yield url
    finally:
        client.flushdb()
        client.close()
