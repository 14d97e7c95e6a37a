"""Hands acknowledged deliveries to the job queue off the request thread, in batches.

A webhook is stored in the database before its 202; queuing its job is the last step and
the costliest one left on the hot path (a Redis round trip and a pickled task per
delivery). A thread per process collects the ids that arrive within a few milliseconds
and queues one job for all of them, which fans out into one job per delivery in the
worker. Nothing is lost if this process dies with ids not yet queued: the deliveries stay
`queued` in the database and the reconciler queues them after its grace period.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Batcher:
    """`put(id)` returns at once; `submit(ids)` is called from a background thread with
    every id put during `linger_s` after the first one (at most `max_batch`)."""

    def __init__(
        self,
        submit: Callable[[list[str]], None],
        *,
        linger_s: float = 0.01,
        max_batch: int = 500,
    ) -> None:
        self.submit = submit
        self.linger_s = linger_s
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._pending = 0  # put but not yet handed to submit (or failed)
        self._idle = threading.Condition(self._lock)
        atexit.register(self.flush)

    def put(self, item: str) -> None:
        with self._lock:
            self._pending += 1
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                # A forked child (gunicorn worker) inherits the object but not the thread.
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="rsi-batcher", daemon=True)
                self._thread.start()
        self._queue.put(item)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything put so far was handed to `submit`; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending and self._pid == os.getpid():
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or not self._thread.is_alive():
                    return False
                self._idle.wait(left)
        return True

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            time.sleep(self.linger_s)  # let the deliveries arriving meanwhile join
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self.submit(batch)
            except Exception:
                log.exception(
                    "could not queue %d deliveries (%s…); the reconciler will", len(batch), batch[0]
                )
            with self._idle:
                self._pending -= len(batch)
                self._idle.notify_all()
