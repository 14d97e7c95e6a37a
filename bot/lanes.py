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

A job is tagged each time it enters the queue (`huey`'s enqueued signal: first queued, a
retry, a scheduled job come due), never when it is scheduled for later, so a retry or a
job that comes back later takes a turn then, not the place it had. The state is numbers in
the queue's own key-value store, shared by every process: on Redis a tag is taken in one
script (atomic), elsewhere under a lock of the process. Jobs without a lane (the
reconciler, the fan-out of the web's batches) run before any lane's.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
from typing import Any

from huey import Huey
from huey.constants import EmptyData

log = logging.getLogger(__name__)

NOW = "rsi.lanes.now"  # the tag of the job most recently started

# KEYS[1]: the store's hash; ARGV: the clock's field, the lane's field. A value that is
# not a finite number reads as 0 (a damaged key heals at the next tag).
_TAG = """
local function num(v)
  local x = tonumber(v)
  if x == nil or x ~= x or x == math.huge or x == -math.huge then return 0 end
  return x
end
local tag = math.max(num(redis.call('HGET', KEYS[1], ARGV[1])),
                     num(redis.call('HGET', KEYS[1], ARGV[2]))) + 1
local text = string.format('%.17g', tag)
redis.call('HSET', KEYS[1], ARGV[2], text)
return text
"""
_STARTED = """
local now = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
local tag = tonumber(ARGV[2])
if now == nil or now ~= now or now == math.huge or now < tag then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 0
"""


def key(lane: str) -> str:
    return f"rsi.lanes.last:{lane}"


def lane_name(lane: str) -> str:
    """GitHub's repository names are case-insensitive: one lane whatever the spelling."""
    return lane.strip().lower()


class Lanes:
    """Tags for the jobs of each lane, over one huey instance's storage."""

    def __init__(self, huey: Huey) -> None:
        self._huey, self._storage = huey, huey.storage
        self._lock = threading.Lock()
        conn: Any = getattr(self._storage, "conn", None)
        hash_key = getattr(self._storage, "result_key", None)
        self._redis = (
            (conn.register_script(_TAG), conn.register_script(_STARTED), hash_key)
            if hasattr(conn, "register_script") and isinstance(hash_key, str)
            else None
        )

    def tag_on_enqueue(self, signal: str, task: Any, *args: Any, **kwargs: Any) -> None:
        """huey's enqueued signal, just before the job is stored: its priority now."""
        lane = (task.kwargs or {}).get("lane") if isinstance(task.kwargs, dict) else None
        if self._huey.immediate or not isinstance(lane, str):
            return
        if task.eta is not None and task.eta > self._now():
            # On its way to the schedule: it takes its turn when it comes back.
            task.priority = None
            return
        task.priority = self.priority(lane)

    def priority(self, lane: str | None) -> float | None:
        """The priority to queue a job of `lane` with (None: before every lane)."""
        if lane is None:
            return None
        name = lane_name(lane)
        try:
            if self._redis is not None:
                tag_script, _, hash_key = self._redis
                tag = float(tag_script(keys=[hash_key], args=[NOW, key(name)]))
            else:
                with self._lock:
                    tag = max(self._read(NOW), self._read(key(name))) + 1.0
                    self._storage.put_data(key(name), repr(tag).encode())
        except Exception:  # the queue's store unreachable: enqueueing fails on its own
            log.warning("lanes: no tag for %s; queued without one", name, exc_info=True)
            return None
        return -tag

    def started(self, priority: float | None) -> None:
        """A job queued with `priority` has started: the lanes' clock moves to its tag."""
        if not priority or not math.isfinite(priority):
            return
        tag = -float(priority)
        try:
            if self._redis is not None:
                _, started_script, hash_key = self._redis
                started_script(keys=[hash_key], args=[NOW, repr(tag)])
                return
            with self._lock:
                if tag > self._read(NOW):
                    self._storage.put_data(NOW, repr(tag).encode())
        except Exception:
            log.warning("lanes: the clock could not be moved to %s", tag, exc_info=True)

    def _now(self) -> dt.datetime:
        """Now, as huey writes a job's `eta` (naive; UTC unless told otherwise)."""
        return dt.datetime.now(dt.UTC).replace(tzinfo=None) if self._huey.utc else dt.datetime.now()

    def _read(self, name: str) -> float:
        value: Any = self._storage.peek_data(name)
        if value is EmptyData:
            return 0.0
        try:
            x = float(value.decode() if isinstance(value, bytes) else value)
        except (TypeError, ValueError):
            return 0.0
        return x if math.isfinite(x) else 0.0
