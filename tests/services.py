"""Real PostgreSQL and Redis for tests (this machine runs both; `.ci/run` starts them)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import redis

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS = "redis://127.0.0.1:6379"


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh, empty database; dropped afterwards."""
    name = f"rsi_test_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        raise RuntimeError(
            "PostgreSQL is not running on 127.0.0.1:5432; start it as .ci/run does"
        ) from exc
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def redis_db(number: int = 14) -> Iterator[str]:
    url = f"{REDIS}/{number}"
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    except redis.ConnectionError as exc:
        raise RuntimeError(
            "Redis is not running on 127.0.0.1:6379; start it as .ci/run does"
        ) from exc
    try:
        yield url
    finally:
        client.flushdb()
        client.close()
