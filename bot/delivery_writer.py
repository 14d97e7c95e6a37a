"""Group commit for webhook deliveries on PostgreSQL.

A delivery must be stored before its 202, so every acknowledgement waits for a database
round trip and a commit. Deliveries that arrive while one `INSERT` is in flight wait for
it, then go to the database together in one multi-row `INSERT` (one round trip, one
commit) written by the first of them — the leader/follower scheme of a database's group
commit, with no timer: a lone delivery is written at once, a burst in batches. One
connection per process, shared by its threads or greenlets. Under the bench's load this
halves PostgreSQL's CPU per delivery (bench/README.md).
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

Row = tuple[str, str, str, str, dt.datetime]  # id, source, event, payload, received_at
MAX_BATCH = 64  # rows per INSERT: 320 parameters, well under PostgreSQL's 65,535

_COLUMNS = "INSERT INTO deliveries (id, source, event, payload, status, attempts, received_at) "
_ROW = "(%s, %s, %s, %s, 'queued', 0, %s)"  # received by the App's clock, not the server's


@cache
def statement(rows: int) -> str:
    """The `INSERT` of `rows` deliveries; it returns the ids that were new."""
    values = ", ".join([_ROW] * rows)
    return f"{_COLUMNS}VALUES {values} ON CONFLICT (id) DO NOTHING RETURNING id"


@dataclass(eq=False, slots=True)
class _Waiting:
    row: Row
    woken: threading.Event = field(default_factory=threading.Event)
    written: bool = False  # its batch was written (or failed); else, when woken, it leads
    inserted: bool = False
    error: BaseException | None = None


class DeliveryWriter:
    """`store(row)` returns once the row is committed: True if it was new, False if that
    id was stored before. `connect` gives an autocommit psycopg connection."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._waiting: list[_Waiting] = []
        self._busy = False  # a leader is writing
        self._conn: Any = None

    def store(self, row: Row) -> bool:
        if self._pid != os.getpid():
            self._reset()  # a forked child: the parent's connection and waiters are not ours
        me = _Waiting(row)
        with self._lock:
            self._waiting.append(me)
            leads, self._busy = not self._busy, True
        if not leads:
            me.woken.wait()  # its batch is written, or it is the next leader
        if not me.written:
            self._lead()
        if me.error is not None:
            raise me.error
        return me.inserted

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._pid == os.getpid():
            conn.close()

    def _lead(self) -> None:
        """Write the oldest waiting rows (the leader's own first), then hand over."""
        with self._lock:
            batch = self._waiting[:MAX_BATCH]
            del self._waiting[:MAX_BATCH]
        try:
            self._write(batch)
        except BaseException:  # the leader was interrupted (a greenlet killed mid-write)
            self._conn = None  # the connection's state is unknown: the next leader reconnects
            for w in batch[1:]:
                w.error = w.error or ConnectionError("the write of this delivery was interrupted")
            raise
        finally:
            for w in batch:
                w.written = True
                w.woken.set()
            with self._lock:
                if self._waiting:
                    self._waiting[0].woken.set()  # not written: it leads the next batch
                else:
                    self._busy = False

    def _write(self, batch: list[_Waiting]) -> None:
        first: dict[str, _Waiting] = {}
        for w in batch:
            first.setdefault(w.row[0], w)
        unique = list(first.values())
        try:
            new = self._insert([w.row for w in unique])
        except Exception as exc:
            if len(unique) == 1 or not _row_error(exc):
                for w in unique:
                    w.error = exc
            else:  # one bad row must not fail the others: write each on its own
                for w in unique:
                    try:
                        w.inserted = bool(self._insert([w.row]))
                    except Exception as row_exc:
                        w.error = row_exc
        else:
            for w in unique:
                w.inserted = w.row[0] in new
        for w in batch:
            if first[w.row[0]] is not w:  # the same id twice in one batch: a redelivery
                w.error = first[w.row[0]].error

    def _insert(self, rows: list[Row]) -> set[str]:
        params = [v for row in rows for v in row]
        conn = self._connection()
        try:
            cur = conn.execute(statement(len(rows)), params, prepare=True)
        except Exception as exc:
            if not _disconnected(conn, exc):
                raise
            # The server closed the connection (restart, idle timeout): one fresh try. A
            # row committed just before the drop now reads as a redelivery; it stays
            # `queued` and the reconciler queues its job.
            self._conn = None
            cur = self._connection().execute(statement(len(rows)), params, prepare=True)
        return {r[0] for r in cur.fetchall()}

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        return self._conn


def _disconnected(conn: Any, exc: Exception) -> bool:
    """True when `exc` is psycopg saying the connection is gone (not a query error)."""
    import psycopg

    return isinstance(exc, psycopg.OperationalError) and bool(conn.closed or conn.broken)


def _row_error(exc: Exception) -> bool:
    """An error one row's values can cause (a NUL character in the text, a value too
    long), as opposed to the server or the connection failing."""
    import psycopg

    return isinstance(exc, psycopg.DataError | psycopg.IntegrityError)
