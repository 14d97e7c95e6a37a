"""Database engine, sessions and migrations (SQLAlchemy 2 + Alembic).

`DATABASE_URL` takes the usual forms (`sqlite:///path`, `postgresql://user@host:port/db`);
PostgreSQL URLs are routed to psycopg 3. Migrations ship inside the package, so
`upgrade()` works from any working directory.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_INSERT_DELIVERY = (
    "INSERT INTO deliveries (id, source, event, payload, status, attempts, received_at) "
    "VALUES (%s, %s, %s, %s, 'queued', 0, now()) ON CONFLICT (id) DO NOTHING"
)


def _disconnected(conn: Any, exc: Exception) -> bool:
    """True when `exc` is psycopg saying the connection is gone (not a query error)."""
    import psycopg

    return isinstance(exc, psycopg.OperationalError) and bool(conn.closed or conn.broken)


def normalize_url(url: str) -> str:
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    parsed = make_url(url)
    # No pre-ping (a round trip per checkout on the webhook hot path); connections are
    # recycled before servers drop idle ones instead.
    kwargs: dict[str, Any] = {"future": True, "pool_recycle": 1800}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
    engine = create_engine(url, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets the web process read while the worker writes; foreign keys are off by default.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return cfg


def upgrade(url: str) -> None:
    """Create or migrate the schema to the newest revision."""
    engine = make_engine(url)
    with engine.begin() as conn:
        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    engine.dispose()


class Database:
    """One engine and session factory per process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._writers: list[Any] = []  # every thread's writer connection, for dispose()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed on success, rolled back on error."""
        with self.sessions() as s, s.begin():
            yield s

    def store_delivery(self, delivery_id: str, source: str, event: str, payload: str) -> bool:
        """Keep a delivery before it is acknowledged; False when this id was stored before
        (a redelivery). The webhook's hot path: on PostgreSQL one prepared `INSERT … ON
        CONFLICT DO NOTHING` in autocommit on a connection owned by the calling thread (one
        round trip, no ORM unit of work); the worker fills in `action` and
        `installation_id` when it parses the payload."""
        if self.engine.dialect.name == "postgresql":
            return self._store_pg(delivery_id, source, event, payload)
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        from bot.models import Delivery

        stmt = (
            sqlite_insert(Delivery)
            .values(
                id=delivery_id,
                source=source,
                event=event,
                payload=payload,
                status="queued",
                attempts=0,
                received_at=dt.datetime.now(dt.UTC),
            )
            .on_conflict_do_nothing(index_elements=["id"])
        )
        with self.engine.begin() as conn:
            return bool(conn.execute(stmt).rowcount)

    def _store_pg(self, delivery_id: str, source: str, event: str, payload: str) -> bool:
        params = (delivery_id, source, event, payload)
        cur = self._writer()
        try:
            cur.execute(_INSERT_DELIVERY, params)
        except Exception as exc:
            if not _disconnected(cur.connection, exc):
                raise
            # The server closed the connection (restart, idle timeout): one fresh try.
            self._local.cursor = None
            cur = self._writer()
            cur.execute(_INSERT_DELIVERY, params)
        return bool(cur.rowcount)

    def _writer(self) -> Any:
        """A cursor on this thread's autocommit connection for `store_delivery`, taken out
        of the pool (same connect arguments) and kept; a forked child makes its own."""
        cur = getattr(self._local, "cursor", None)
        if cur is None or cur.connection.closed or self._local.pid != os.getpid():
            fairy = self.engine.raw_connection()
            conn: Any = fairy.driver_connection
            fairy.detach()
            conn.autocommit = True
            cur = conn.cursor()
            self._local.cursor, self._local.pid = cur, os.getpid()
            with self._lock:
                self._writers.append(conn)
        return cur

    def dispose(self) -> None:
        with self._lock:
            writers, self._writers = self._writers, []
        for conn in writers:
            conn.close()
        self.engine.dispose()
