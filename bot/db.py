"""Database engine, sessions and migrations (SQLAlchemy 2 + Alembic).

`DATABASE_URL` takes the usual forms (`sqlite:///path`, `postgresql://user@host:port/db`);
PostgreSQL URLs are routed to psycopg 3. Migrations ship inside the package, so
`upgrade()` works from any working directory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from bot import clock
from bot.delivery_writer import DeliveryWriter
from bot.files import private_file

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


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
            private_file(Path(parsed.database))  # 0600 in a 0700 folder, before SQLite opens it
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


def upgrade(url: str, revision: str = "head") -> None:
    """Create or migrate the schema to `revision` (the newest by default)."""
    _migrate(url, lambda cfg: command.upgrade(cfg, revision))


def downgrade(url: str, revision: str) -> None:
    """Migrate the schema back to `revision`."""
    _migrate(url, lambda cfg: command.downgrade(cfg, revision))


def _migrate(url: str, run: Callable[[Config], None]) -> None:
    engine = make_engine(url)
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            # A migration that rebuilds a table (SQLite's way to drop a column) drops the
            # old one, which rows of other tables still reference: foreign keys are off
            # while it runs (outside a transaction, where SQLite takes the pragma), and
            # checked whole before they are on again.
            conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
            conn.commit()
        with conn.begin():
            cfg = alembic_config(url)
            cfg.attributes["connection"] = conn
            run(cfg)
            if sqlite:
                broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"the migration broke references: {broken[:5]}")
        if sqlite:
            conn.exec_driver_sql("PRAGMA foreign_keys=ON")
            conn.commit()
    engine.dispose()


URL_UNUSABLE = "its URL cannot be used"


def next_step(behind: str) -> str:
    """What to do about `schema_behind`'s answer."""
    if behind.startswith(URL_UNUSABLE):
        return "set DATABASE_URL to sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
    return "run `rsi-bot db upgrade` first"


def schema_behind(url: str) -> str | None:
    """Why the database at `url` is not at the newest schema, or None when it is."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlalchemy.exc import SQLAlchemyError

    newest = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    try:
        engine = make_engine(url)  # a URL SQLAlchemy cannot read, or no driver for it
    except SQLAlchemyError as exc:
        return f"{URL_UNUSABLE} ({type(exc).__name__})"
    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
    except SQLAlchemyError as exc:
        return f"it cannot be opened ({type(exc).__name__})"
    finally:
        engine.dispose()
    if current == newest:
        return None
    return f"its schema is {current or 'not created'}, the newest is {newest}"


def shown(url: str) -> str:
    """`url` as the App prints it: the password masked (logs and terminals keep what
    they are shown)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "(DATABASE_URL, unreadable)"


class Database:
    """One engine and session factory per process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._writer = DeliveryWriter(self._connect_writer)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed on success, rolled back on error."""
        with self.sessions() as s, s.begin():
            yield s

    def store_delivery(self, delivery_id: str, source: str, event: str, payload: str) -> bool:
        """Keep a delivery before it is acknowledged; False when this id was stored before
        (a redelivery). The webhook's hot path: on PostgreSQL a prepared `INSERT … ON
        CONFLICT DO NOTHING` in autocommit, shared with the deliveries arriving meanwhile
        (`bot.delivery_writer`; no ORM unit of work); the worker fills in `action` and
        `installation_id` when it parses the payload."""
        if self.engine.dialect.name == "postgresql":
            return self._writer.store((delivery_id, source, event, payload, clock.utcnow()))
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
                received_at=clock.utcnow(),
            )
            .on_conflict_do_nothing(index_elements=["id"])
        )
        with self.engine.begin() as conn:
            return bool(conn.execute(stmt).rowcount)

    def stored_delivery_ids(self, ids: list[str]) -> set[str]:
        """Which of these GitHub delivery ids (`X-GitHub-Delivery` guids) are stored: a
        failed delivery GitHub lists may still have been stored (the 500 came after the
        commit), and only the others need a redelivery."""
        from sqlalchemy import select

        from bot.models import Delivery

        found: set[str] = set()
        with self.session() as s:
            for start in range(0, len(ids), 1000):  # bounded IN lists
                chunk = ids[start : start + 1000]
                found.update(
                    s.scalars(
                        select(Delivery.id).where(
                            Delivery.source == "github", Delivery.id.in_(chunk)
                        )
                    )
                )
        return found

    def _connect_writer(self) -> Any:
        """An autocommit psycopg connection for the delivery writer, taken out of the
        pool (same connect arguments) and kept by it. A pooled connection that died in a
        database outage is thrown away, not handed over (the writer would answer 500 to
        the first deliveries after the database came back)."""
        for _ in range(3):
            fairy = self.engine.raw_connection()
            conn: Any = fairy.driver_connection
            try:
                conn.execute("SELECT 1")
                if conn.info.transaction_status:  # the check opened a transaction
                    conn.rollback()
            except Exception:
                fairy.invalidate()
                continue
            fairy.detach()
            conn.autocommit = True
            return conn
        fairy = self.engine.raw_connection()
        conn = fairy.driver_connection
        fairy.detach()
        conn.autocommit = True
        return conn

    def dispose(self) -> None:
        self._writer.close()
        self.engine.dispose()
