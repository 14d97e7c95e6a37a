"""Jobs taken in turn by repository, not first in, first out.

One queue serves every repository the App is installed on; in arrival order, a repository
that sends a hundred webhooks a second makes everyone else's jobs wait behind its hundred.
Start-time fair queueing (Goyal, Vin and Cheng, 1996) over the queue's own priorities
orders them instead: each job of a lane (a repository) is tagged one past the later of the
lane's last tag and the tag of the job most recently started; the queue runs the lowest
tag first (huey's priority, higher first, is the tag negated), ties first in, first out.
A lane that sent nothing for a while starts level with the job now running, so a job of a
quiet repository waits behind at most one job of each busy repository, whatever their
backlogs, and no repository can bank turns by staying quiet.

The state is two numbers in the queue's own key-value store, shared by every process that
queues. Reads and writes are not one atomic step: two jobs of a lane queued at the same
instant may share a tag, which costs a little fairness and nothing else. Jobs without a
lane (the reconciler, the fan-out of the web's batches) run before any lane's.
"""

from __future__ import annotations

import logging
from typing import Any

from huey import Huey
from huey.constants import EmptyData

log = logging.getLogger(__name__)

_NOW = "rsi.lanes.now"  # the tag of the job most recently started


def _key(lane: str) -> str:
    return f"rsi.lanes.last:{lane}"


class Lanes:
    """Tags for the jobs of each lane, over one huey instance's storage."""

    def __init__(self, huey: Huey) -> None:
        self._storage = huey.storage

    def priority(self, lane: str | None) -> float | None:
        """The priority to queue a job of `lane` with (None: before every lane)."""
        if lane is None:
            return None
        tag = max(self._read(_NOW), self._read(_key(lane))) + 1.0
        self._write(_key(lane), tag)
        return -tag

    def started(self, priority: float | None) -> None:
        """A job queued with `priority` has started: the lanes' clock moves to its tag."""
        if not priority:
            return
        tag = -float(priority)
        if tag > self._read(_NOW):
            self._write(_NOW, tag)

    def _read(self, key: str) -> float:
        try:
            value: Any = self._storage.peek_data(key)
        except Exception:  # the queue's store unreachable: enqueueing fails on its own
            log.exception("lanes: could not read %s", key)
            return 0.0
        if value is EmptyData:
            return 0.0
        try:
            return float(value.decode() if isinstance(value, bytes) else value)
        except (TypeError, ValueError):
            return 0.0

    def _write(self, key: str, tag: float) -> None:
        try:
            self._storage.put_data(key, repr(tag).encode())
        except Exception:
            log.exception("lanes: could not write %s", key)
