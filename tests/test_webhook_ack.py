"""The webhook's acknowledgement path: what it refuses, what it leaves to the job, the
PostgreSQL writer's group commit, and the batches of jobs it queues off the request thread."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from bot import clock, runtime
from bot.batcher import Batcher
from bot.db import Database, upgrade
from bot.delivery_writer import DeliveryWriter, Row
from bot.models import Delivery
from bot.web.app import create_app
from bot.web.webhooks import NOT_JSON
from tests import appkit
from tests.services import postgres_database, redis_db
from tests.standin import GitHubStandIn, example
from tests.test_app_flow import deliver


def post_raw(client: FlaskClient, body: bytes, delivery: str, event: str = "installation") -> int:
    resp = client.post(
        "/webhooks/github", data=body, headers=appkit.webhook_headers(body, event, delivery)
    )
    return resp.status_code


# --- what the acknowledgement refuses and what it leaves to the job -----------------------


@pytest.mark.parametrize(
    "body",
    [b"payload=%7B%22action%22%3A%22created%22%7D", b"[1, 2]", b"\xff{}", b"{\xff}", b""],
    ids=["form-encoded", "array", "not-utf8-start", "not-utf8", "empty"],
)
def test_a_body_that_cannot_be_a_json_object_is_refused(
    app: Flask, client: FlaskClient, body: bytes
) -> None:
    resp = client.post(
        "/webhooks/github", data=body, headers=appkit.webhook_headers(body, "push", "bad-1")
    )
    assert resp.status_code == 400
    assert resp.get_json() == {"error": NOT_JSON}
    with app.extensions["rsi"].db.session() as s:
        assert s.query(Delivery).count() == 0


def test_a_signed_body_that_is_not_json_is_kept_and_failed_by_the_job(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    assert post_raw(client, b'{"action": "created", truncated', "broken-1") == 202
    with app.extensions["rsi"].db.session() as s:
        d = s.get(Delivery, "broken-1")
        assert d is not None
        assert (d.status, d.attempts) == ("failed", 1)
        assert d.error == "the body is not a JSON object"
        assert d.payload == '{"action": "created", truncated'  # kept as received
    assert github.count() == 0  # no handler ran, nothing was asked of GitHub
    github.assert_clean()


def test_a_signed_payload_missing_a_field_fails_once_saying_which(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    """Before: a KeyError traceback, retried six times; the same payload can only fail
    the same way again."""
    payload = example("issue_comment", "created")
    del payload["comment"]
    assert deliver(client, "issue_comment", payload, "no-comment-1") == 202
    with app.extensions["rsi"].db.session() as s:
        d = s.get(Delivery, "no-comment-1")
        assert d is not None
        assert (d.status, d.attempts) == ("failed", 1)
        assert d.error == "the payload could not be read (KeyError: 'comment')"
    github.assert_clean()


def test_the_job_records_action_and_installation(app: Flask, client: FlaskClient) -> None:
    payload = example("installation", "created")
    assert deliver(client, "installation", payload, "inst-1") == 202
    with app.extensions["rsi"].db.session() as s:
        d = s.get(Delivery, "inst-1")
        assert d is not None
        assert d.status == "done"
        assert d.action == "created"
        assert d.installation_id == payload["installation"]["id"]


# --- the PostgreSQL writer -------------------------------------------------------------------


def test_postgres_store_is_idempotent_and_survives_a_dropped_connection() -> None:
    with postgres_database() as url:
        upgrade(url)
        db = Database(url)
        try:
            assert db.store_delivery("d-1", "github", "push", '{"a": 1}') is True
            assert db.store_delivery("d-1", "github", "push", '{"a": 2}') is False
            pid = db._writer._connection().info.backend_pid
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            assert db.store_delivery("d-2", "github", "push", '{"a": 3}') is True
            assert db._writer._connection().info.backend_pid != pid
            with db.session() as s:
                rows = {d.id: (d.payload, d.status, d.attempts) for d in s.query(Delivery)}
            assert rows == {"d-1": ('{"a": 1}', "queued", 0), "d-2": ('{"a": 3}', "queued", 0)}
        finally:
            db.dispose()
        assert db._writer._conn is None


class CountingWriter(DeliveryWriter):
    """Records the rows of every INSERT it sends."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        super().__init__(connect)
        self.inserts: list[list[str]] = []

    def _insert(self, rows: list[Row]) -> set[str]:
        self.inserts.append([r[0] for r in rows])
        return super()._insert(rows)


def store_concurrently_behind_a_lock(
    url: str, rows: list[Row]
) -> tuple[CountingWriter, dict[str, bool | str]]:
    """Store `rows` from one thread each while another transaction locks the table, so
    that every row after the first arrives while the first INSERT waits."""
    writer = CountingWriter(lambda: psycopg.connect(url, autocommit=True))
    results: dict[str, bool | str] = {}

    def store(i: int) -> None:
        try:
            results[f"{i}:{rows[i][0]}"] = writer.store(rows[i])
        except psycopg.Error as exc:
            results[f"{i}:{rows[i][0]}"] = type(exc).__name__

    with psycopg.connect(url) as locker:
        locker.execute("LOCK TABLE deliveries IN EXCLUSIVE MODE")
        first = threading.Thread(target=store, args=(0,))
        first.start()
        wait_until(lambda: writer.inserts != [])  # the leader's INSERT waits on the lock
        rest = [threading.Thread(target=store, args=(i,)) for i in range(1, len(rows))]
        for t in rest:
            t.start()
        wait_until(lambda: len(writer._waiting) == len(rows) - 1)
        locker.commit()  # releases the lock
    for t in [first, *rest]:
        t.join(10)
    writer.close()
    return writer, results


def wait_until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_deliveries_arriving_during_an_insert_are_written_together() -> None:
    with postgres_database() as url:
        upgrade(url)
        now = clock.utcnow()
        rows: list[Row] = [(f"g-{i}", "github", "push", f'{{"n": {i}}}', now) for i in range(20)]
        writer, results = store_concurrently_behind_a_lock(url, rows)
        assert writer.inserts[0] == ["g-0"]
        assert sorted(writer.inserts[1]) == sorted(f"g-{i}" for i in range(1, 20))
        assert len(writer.inserts) == 2  # one round trip and one commit for 19 deliveries
        assert set(results.values()) == {True}
        with psycopg.connect(url) as conn:
            stored = dict(conn.execute("SELECT id, payload FROM deliveries").fetchall())
        assert stored == {r[0]: r[3] for r in rows}


def test_a_bad_row_or_a_repeated_id_in_a_batch_fails_only_itself() -> None:
    with postgres_database() as url:
        upgrade(url)
        now = clock.utcnow()
        rows: list[Row] = [
            ("b-0", "github", "push", "{}", now),
            ("b-1", "github", "push", "{}", now),
            ("b-bad", "github", "push", '{"nul": "\x00"}', now),  # PostgreSQL text has no NUL
            ("b-1", "github", "push", "{}", now),  # a redelivery arriving with the first one
            ("b-2", "github", "push", "{}", now),
        ]
        writer, results = store_concurrently_behind_a_lock(url, rows)
        assert results["0:b-0"] is True
        assert results["4:b-2"] is True
        assert sorted([results["1:b-1"], results["3:b-1"]]) == [False, True]
        assert isinstance(results["2:b-bad"], str)  # psycopg's error, raised to its caller
        # the batch failed on the bad row, then each row was written on its own
        assert sorted(writer.inserts[1]) == ["b-1", "b-2", "b-bad"]  # b-1 once
        assert all(len(i) == 1 for i in writer.inserts[2:])
        with psycopg.connect(url) as conn:
            ids = {r[0] for r in conn.execute("SELECT id FROM deliveries")}
        assert ids == {"b-0", "b-1", "b-2"}


def test_one_writer_connection_per_process_for_all_threads() -> None:
    with postgres_database() as url:
        upgrade(url)
        db = Database(url)
        try:
            threads = [
                threading.Thread(target=db.store_delivery, args=(f"t-{i}", "github", "push", "{}"))
                for i in range(8)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            conn = db._writer._conn
            with psycopg.connect(url) as admin:
                (n,) = admin.execute(
                    "SELECT count(*) FROM deliveries WHERE id LIKE 't-%'"
                ).fetchone() or (0,)
            assert n == 8
            db._writer._pid = -1  # what a forked child sees: not its connection
            assert db.store_delivery("child", "github", "push", "{}") is True
            assert db._writer._conn is not conn
            assert not conn.closed
        finally:
            db.dispose()
            conn.close()


def test_the_postgres_payload_is_lz4_compressed_and_kept_inline() -> None:
    body = orjson.dumps(example("pull_request", "synchronize")).decode()  # 23.7 KB
    with postgres_database() as url:
        upgrade(url)
        db = Database(url)
        try:
            assert db.store_delivery("big-1", "github", "pull_request", body)
        finally:
            db.dispose()
        with psycopg.connect(url) as conn:
            method, storage = conn.execute(
                "SELECT attcompression, attstorage FROM pg_attribute "
                "WHERE attrelid = 'deliveries'::regclass AND attname = 'payload'"
            ).fetchone() or ("?", "?")
            (toast,) = conn.execute(
                "SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'deliveries'"
            ).fetchone() or ("?",)
            (toasted,) = conn.execute(f"SELECT count(*) FROM {toast}").fetchone() or (-1,)
            (stored,) = conn.execute("SELECT payload FROM deliveries").fetchone() or ("",)
        assert method == "l"  # lz4 ('p' would be pglz, '' the server default)
        assert storage == "m"  # MAIN: compressed in the row, out of line only if it must
        assert toasted == 0  # 2.9 KB compressed: no TOAST row, no TOAST index entry
        assert stored == body


# --- jobs queued in batches off the request thread --------------------------------------------


def test_batcher_hands_every_item_over_in_batches() -> None:
    batches: list[list[str]] = []
    release = threading.Event()

    def submit(batch: list[str]) -> None:
        release.wait(5)
        batches.append(batch)

    b = Batcher(submit, linger_s=0.001)
    for i in range(300):
        b.put(str(i))
    release.set()
    assert b.flush(5)
    assert sorted(int(x) for batch in batches for x in batch) == list(range(300))
    assert len(batches) < 300  # items arriving while a batch is submitted go together
    assert all(len(batch) <= b.max_batch for batch in batches)


def test_batcher_survives_a_failing_submit(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[list[str]] = []

    def submit(batch: list[str]) -> None:
        seen.append(batch)
        if len(seen) == 1:
            raise ConnectionError("redis is down")

    b = Batcher(submit, linger_s=0.0)
    with caplog.at_level(logging.ERROR, logger="bot.batcher"):
        b.put("lost")
        assert b.flush(5)
        b.put("next")
        assert b.flush(5)
    assert seen == [["lost"], ["next"]]
    assert "could not queue 1 deliveries (lost…); the reconciler will" in caplog.text


def test_batcher_starts_its_thread_again_in_a_forked_child() -> None:
    got: list[str] = []
    b = Batcher(got.extend, linger_s=0.0)
    b.put("parent")
    assert b.flush(5)
    first = b._thread
    b._pid = -1  # what a forked child sees: the object, not the thread
    b.put("child")
    assert b.flush(5)
    assert b._thread is not first
    assert got == ["parent", "child"]


def test_deliveries_reach_redis_in_batch_jobs_and_fan_out(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    with postgres_database() as db_url, redis_db() as redis_url:
        settings = appkit.settings(tmp_path, github.url, DATABASE_URL=db_url, REDIS_URL=redis_url)
        upgrade(db_url)
        rt = runtime.build(settings)  # a real Redis queue, no consumer yet
        try:
            client = create_app(svc=rt).test_client()
            ids = [f"batch-{i}" for i in range(40)]
            for delivery in ids:
                assert deliver(client, "installation", example("installation", "created"), delivery)
            assert rt.flush(5)
            jobs = [rt.huey.serializer.deserialize(x) for x in rt.huey.storage.enqueued_items()]
            assert {j.name for j in jobs} == {"bot.queue.process_deliveries"}
            assert sorted(x for j in jobs for x in j.args[0]) == sorted(ids)
            assert len(jobs) < len(ids)
            rt.huey.storage.flush_queue()
            for j in jobs:  # what the worker does with each batch job
                rt.queue.process_deliveries_task.call_local(j.args[0])
            queued = [rt.huey.serializer.deserialize(x) for x in rt.huey.storage.enqueued_items()]
            assert sorted(x.args[0] for x in queued) == sorted(ids)
            assert {x.name for x in queued} == {"bot.queue.process_delivery"}
        finally:
            rt.db.dispose()
            rt.huey.storage.conn.close()
