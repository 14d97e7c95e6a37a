"""The App's local files — the SQLite database (and its WAL), the SQLite queue, the artifact
folder and what is stored in it — are created owner-only (0600 files, 0700 folders), under
the usual umask that would make them world-readable."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot import runtime
from bot.db import upgrade
from tests import appkit


@pytest.fixture
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root.parent)): stat.S_IMODE(p.stat().st_mode)
        for p in [root, *sorted(root.rglob("*"))]
    }


@pytest.mark.usefixtures("usual_umask")
def test_database_queue_and_artifacts_are_owner_only(tmp_path: Path) -> None:
    state = tmp_path / "state"  # nothing of it exists yet
    settings = appkit.settings(
        tmp_path,
        "http://127.0.0.1:9",
        DATABASE_URL=f"sqlite:///{state / 'db' / 'rsi.db'}",
        QUEUE_PATH=state / "queue" / "queue.db",
        ARTIFACT_STORE=str(state / "artifacts"),
    )
    upgrade(settings.DATABASE_URL)
    rt = runtime.build(settings)  # a real SQLite queue, not the immediate one
    try:
        assert rt.db.store_delivery("d-1", "github", "ping", "{}")
        rt.huey.enqueue(rt.queue.start_task.s("v-1"))
        rt.store.put_bytes("v-1/h200/bundle.zip", b"PK\x05\x06" + bytes(18))
        rt.store.put_bytes("v-1/report.html", b"<html></html>")
        found = modes(state)
        assert {"state/db/rsi.db", "state/db/rsi.db-wal", "state/queue/queue.db"} <= set(found)
        assert "state/artifacts/v-1/h200/bundle.zip" in found
        for name, mode in found.items():
            want = 0o700 if (tmp_path / name).is_dir() else 0o600
            assert mode == want, f"{name}: {oct(mode)}"
    finally:
        rt.db.dispose()


@pytest.mark.usefixtures("usual_umask")
def test_what_exists_is_left_alone(tmp_path: Path) -> None:
    from bot.files import private_dir, private_file

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    existing = shared / "kept.db"
    existing.write_bytes(b"")
    existing.chmod(0o640)
    assert private_file(existing) == existing
    assert stat.S_IMODE(existing.stat().st_mode) == 0o640
    made = private_dir(shared / "a" / "b")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert stat.S_IMODE((shared / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
