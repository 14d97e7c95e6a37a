"""The App's schema for a test's SQLite database, migrated once per test process.

Most App tests start from an empty database at the newest revision. Running every
migration for each of them cost about a quarter of a second of CPU a test; a copy of a
database migrated once is the same file. Tests of the migrations themselves call
`bot.db.upgrade` as before (tests/test_migration_rows.py, tests/test_boot.py).
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

from bot.db import upgrade

SQLITE = "sqlite:///"


@functools.cache
def _template() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="rsi-schema-"))
    path = folder / "template.sqlite"
    upgrade(f"{SQLITE}{path}")
    return path


def migrated(url: str) -> None:
    """The newest schema at `url`, as `bot.db.upgrade(url)` leaves a new database: a copy
    of the template for a SQLite file not made yet, else the migrations themselves."""
    if url.startswith(SQLITE):
        dest = Path(url.removeprefix(SQLITE))
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_template(), dest)
            return
    upgrade(url)
