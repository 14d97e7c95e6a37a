"""The queue's Redis store: huey's sorted-set queue (priorities, which `bot.lanes` sets),
and the move of a queue an earlier release left in a Redis list.

The move is one Lua script, so it is atomic: two processes starting together cannot
both move it, and nothing can be pushed between the read and the delete. It is tried
when a process starts and again whenever Redis answers WRONGTYPE (Redis was down at the
start, or a process of the earlier release, still running, pushed to a list again), so
the queue never stops on a list it cannot read.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from huey import PriorityRedisHuey
from huey.storage import PriorityRedisStorage

log = logging.getLogger(__name__)

# KEYS[1]: the queue. The list is pushed on the left and popped on the right (oldest
# last); each job keeps its place: score 0, prefixed with its order (8 bytes, big-endian,
# as huey prefixes a time), so ahead of any job queued since.
_MOVE = """
if redis.call('TYPE', KEYS[1])['ok'] ~= 'list' then return -1 end
local items = redis.call('LRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1])
local n = #items
local function be8(x)
  local s = ''
  for _ = 1, 8 do s = string.char(x % 256) .. s; x = math.floor(x / 256) end
  return s
end
for i = n, 1, -1 do redis.call('ZADD', KEYS[1], 0, be8(n - i) .. items[i]) end
return n
"""


def move_list(storage: Any) -> int | None:
    """Jobs moved from a list at the queue's key (None: there was no list)."""
    moved = int(storage.conn.eval(_MOVE, 1, storage.queue_key))
    if moved < 0:
        return None
    log.warning("queue: %d jobs moved from a Redis list to the priority queue", moved)
    return moved


def _wrong_type(exc: redis.ResponseError) -> bool:
    return str(exc).startswith("WRONGTYPE")


class QueueStorage(PriorityRedisStorage):  # type: ignore[misc]
    """huey's sorted-set queue, which moves a list it finds at its key and goes on."""

    def enqueue(self, data: bytes, priority: float | None = None) -> None:
        try:
            super().enqueue(data, priority)
        except redis.ResponseError as exc:
            if not _wrong_type(exc):
                raise
            move_list(self)
            super().enqueue(data, priority)

    def dequeue(self) -> bytes | None:
        try:
            return super().dequeue()  # type: ignore[no-any-return]
        except redis.ResponseError as exc:
            if not _wrong_type(exc):
                raise
            move_list(self)
            return super().dequeue()  # type: ignore[no-any-return]

    def queue_size(self) -> int:
        try:
            return int(super().queue_size())
        except redis.ResponseError as exc:
            if not _wrong_type(exc):
                raise
            move_list(self)
            return int(super().queue_size())


class QueueHuey(PriorityRedisHuey):  # type: ignore[misc]
    storage_class = QueueStorage


def redis_huey(url: str, *, immediate: bool = False, **storage: Any) -> QueueHuey:
    huey = QueueHuey("rsi-bot", url=url, immediate=immediate, **storage)
    if not immediate:
        try:
            move_list(huey.storage)
        except redis.RedisError:  # Redis down: tried again at the first WRONGTYPE
            log.warning("queue: Redis could not be asked whether a list is left to move")
    return huey
