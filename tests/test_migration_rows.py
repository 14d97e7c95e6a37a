"""Migrations keep the rows they find: a verification and its runner job written at 0010
survive the upgrade to the newest schema and a downgrade back (SQLite with foreign keys
on, as `bot.db` opens it, rebuilds a table to drop a column)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import text

from bot.db import downgrade, make_engine, upgrade
from tests import schema
from tests.services import postgres_database

VERIFICATION = (
    "INSERT INTO verifications (id, repo, pr_number, task, base_sha, head_sha, head_repo,"
    " head_ref, gpus, rounds, modes, candidate, candidate_id, trigger, state, version,"
    " attempts, created_at, updated_at, held_for_approval, adaptive) VALUES ('v-1', 'o/r', 1,"
    " 't', 'a', 'b', 'o/r', 'x', '[\"H200\"]', 4, '[\"streaming\"]', '{}', 'c', 'intake',"
    " 'published', 1, 0, '2026-01-01', '2026-01-01', false, false)"
)
JOB = "INSERT INTO runner_jobs (verification_id, gpu, state) VALUES ('v-1', 'H200', 'kept')"


def _counts(url: str) -> tuple[int, int]:
    engine = make_engine(url)
    with engine.connect() as conn:
        got = (
            int(conn.execute(text("SELECT count(*) FROM verifications")).scalar() or 0),
            int(conn.execute(text("SELECT count(*) FROM runner_jobs")).scalar() or 0),
        )
    engine.dispose()
    return got


def _keeps_rows(url: str) -> None:
    upgrade(url, "0010")
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text(VERIFICATION))
        conn.execute(text(JOB))
    engine.dispose()
    upgrade(url)
    assert _counts(url) == (1, 1)
    engine = make_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT watch FROM verifications")).scalar() in (0, False)
    engine.dispose()
    downgrade(url, "0010")
    assert _counts(url) == (1, 1)
    upgrade(url)
    assert _counts(url) == (1, 1)


def test_the_newest_migrations_keep_rows_on_sqlite(tmp_path: Path) -> None:
    _keeps_rows(f"sqlite:///{tmp_path}/rows.db")


def test_the_newest_migrations_keep_rows_on_postgresql() -> None:
    with postgres_database() as url:
        _keeps_rows(url)


def test_a_test_database_copied_from_the_template_is_the_upgraded_one(tmp_path: Path) -> None:
    """tests/schema.py copies one migrated database for each App test: the copy must be
    what `upgrade` makes of a new database, table for table and revision for revision."""
    fresh, copied = tmp_path / "fresh.sqlite", tmp_path / "copied.sqlite"
    upgrade(f"sqlite:///{fresh}")
    schema.migrated(f"sqlite:///{copied}")

    def shape(path: Path) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
        with sqlite3.connect(path) as conn:
            objects = conn.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
            ).fetchall()
            revision = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        return objects, revision

    assert shape(copied) == shape(fresh)
    assert shape(fresh)[0]  # the template is not an empty file


def test_a_postgresql_test_database_from_the_template_is_the_upgraded_one() -> None:
    """tests/services.py copies a migrated template for each deployed world."""

    def shape(url: str) -> list[tuple[object, ...]]:
        engine = make_engine(url)
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT table_name, column_name, data_type, is_nullable, column_default "
                    "FROM information_schema.columns WHERE table_schema = 'public' "
                    "UNION ALL SELECT 'index', indexname, indexdef, '', '' FROM pg_indexes "
                    "WHERE schemaname = 'public' "
                    "UNION ALL SELECT 'revision', version_num, '', '', '' FROM alembic_version "
                    "ORDER BY 1, 2, 3"
                )
            ).all()
        engine.dispose()
        return [tuple(r) for r in rows]

    with postgres_database() as fresh, postgres_database(migrated=True) as copied:
        upgrade(fresh)
        assert shape(copied) == shape(fresh)
        assert any(r[0] == "revision" for r in shape(fresh))
