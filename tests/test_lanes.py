"""Repositories take turns in the job queue (`bot.lanes`): on both of the queue's stores
(SQLite for the embedded default, Redis deployed), a repository's job waits behind one
job of each busy repository, not behind a flooder's backlog."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from huey import Huey, PriorityRedisHuey, RedisHuey, SqliteHuey

from bot import deliveries
from bot.db import Database
from bot.deliveries import lane_of
from bot.lanes import NOW, Lanes, key
from bot.models import Delivery
from bot.queue import Jobs, Queue
from bot.queue_store import QueueHuey, move_list, redis_huey
from bot.services import make_huey
from tests import appkit, schema
from tests.services import redis_db


@pytest.fixture(params=["sqlite", "redis"])
def huey(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Huey]:
    if request.param == "sqlite":
        yield SqliteHuey("rsi-bot", filename=str(tmp_path / "queue.db"))
        return
    with redis_db() as url:
        yield PriorityRedisHuey("rsi-bot", url=url, blocking=False)


class Recorder:
    """A queue whose jobs record what ran, in order; each job's lane is the text before
    its `#` (a verification id or delivery id names its repository)."""

    def __init__(self, huey: Huey, **jobs: Callable[..., Any]) -> None:
        self.huey, self.ran = huey, list[str]()
        self.at: dt.datetime | None = None  # the consumer's clock, when not now
        self.queue = Queue(
            huey,
            Jobs(
                **{
                    "process_delivery": self.ran.append,
                    "start": self.ran.append,
                    "drain": self.ran.append,
                    "write": lambda repo, n: self.ran.append(f"{repo}#{n}"),
                    "reconcile": lambda: self.ran.append("reconcile"),
                    "verification_lane": lambda vid: vid.split("#")[0],
                    "delivery_lanes": lambda ids: {i: i.split("#")[0] for i in ids if "#" in i},
                    **jobs,
                }
            ),
        )

    def run(self, jobs: int | None = None) -> list[str]:
        """Run `jobs` queued jobs (all when None), as a consumer would; what ran."""
        start = len(self.ran)
        while jobs is None or len(self.ran) - start < jobs:
            task = self.huey.dequeue()
            if task is None:
                break
            self.huey.execute(task, self.at)
        return self.ran[start:]


def lanes_of(ran: list[str]) -> str:
    return "".join(x.split("#")[0][-1] for x in ran)


def test_a_quiet_repository_s_job_waits_one_turn_behind_a_flood(huey: Huey) -> None:
    q = Recorder(huey)
    for i in range(20):
        q.queue.start(f"o/flood#{i}")
    q.queue.drain("o/quiet#0")
    ran = q.run()
    assert len(ran) == 21
    # In arrival order it would run last; it runs after the flood's first job.
    assert ran.index("o/quiet#0") == 1
    assert [x for x in ran if x.startswith("o/flood")] == [f"o/flood#{i}" for i in range(20)]


def test_a_job_queued_mid_flood_waits_one_turn_not_for_the_backlog(huey: Huey) -> None:
    q = Recorder(huey)
    for i in range(20):
        q.queue.write("o/flood", i)
    assert q.run(5) == [f"o/flood#{i}" for i in range(5)]
    q.queue.write("o/quiet", 1)
    rest = q.run()
    assert rest.index("o/quiet#1") <= 1
    assert len(rest) == 16


def test_two_busy_repositories_alternate_and_quiet_time_banks_no_turns(huey: Huey) -> None:
    q = Recorder(huey)
    for i in range(6):
        q.queue.start(f"o/a#{i}")
    for i in range(6):
        q.queue.start(f"o/b#{i}")
    assert lanes_of(q.run()) == "ab" * 6
    # `a` ran alone for a while; `b`, quiet meanwhile, gets no run of turns for it.
    for i in range(10):
        q.queue.start(f"o/a#{10 + i}")
    q.run()
    for i in range(4):
        q.queue.start(f"o/b#{10 + i}")
        q.queue.start(f"o/a#{30 + i}")
    assert lanes_of(q.run()) == "ba" * 4


def test_jobs_without_a_repository_run_first(huey: Huey) -> None:
    q = Recorder(huey)
    for i in range(3):
        q.queue.start(f"o/a#{i}")
    q.queue.reconcile_task()
    q.queue.process_deliveries(["o/b#1", "o/b#2", "installation-event"])
    ran = q.run()
    assert ran[0] == "reconcile"
    # The batch's fan-out ran next and put each delivery in its lane (a delivery about no
    # repository runs before any lane's).
    assert ran[1] == "installation-event"
    assert lanes_of(ran[2:]) == "abab" + "a"


def come_due(q: Recorder, seconds: float) -> None:
    """What the consumer's scheduler does `seconds` from now: scheduled jobs that are
    due by then enter the queue (the lanes' clock read as then, too)."""
    later = q.queue.lanes._now() + dt.timedelta(seconds=seconds)
    q.queue.lanes._now = lambda: later  # type: ignore[method-assign]
    q.at = later
    for task in q.huey.read_schedule(later):
        q.huey.enqueue(task)


def test_a_write_that_comes_back_later_takes_its_turn_when_it_comes_back(huey: Huey) -> None:
    """Scheduled, it holds no turn (its repository's next job is not pushed back), and
    come due it takes a turn then, not the place it had (no turns banked)."""
    came_back: set[int] = set()

    def write(repo: str, n: int) -> float | None:
        q.ran.append(f"{repo}#w{n}")
        if n in came_back:
            return None
        came_back.add(n)
        return 30.0

    q = Recorder(huey, write=write)
    for n in range(20):
        q.queue.write("o/a", n)
    q.run()  # each outbox comes back in 30 s
    assert len(huey.scheduled()) == 20
    for i in range(40):
        q.queue.start(f"o/b#{i}")
    q.queue.drain("o/a#reply")
    ran = q.run(10)
    assert ran.index("o/a#reply") <= 1, ran
    come_due(q, 31)  # twenty writes of `a` come back while `b` is busy
    ran = q.run(20)
    # They take turns with `b`'s backlog from now on; tagged when scheduled, they would
    # all have run first.
    assert 9 <= lanes_of(ran).count("b") <= 11, ran


def test_retries_take_a_new_turn_not_the_place_they_had(huey: Huey) -> None:
    """A flood whose jobs fail for a while (its installation rate-limited): when its
    retries come due, a job another repository queued meanwhile waits one turn."""
    ran: list[str] = []

    def process(delivery_id: str) -> None:
        ran.append(delivery_id)
        if delivery_id.startswith("o/flood"):
            raise ConnectionError("rate limited")  # huey retries it

    q = Recorder(huey, process_delivery=process)
    for i in range(30):
        q.queue.process_delivery(f"o/flood#{i}", lane="o/flood")
    q.run(10)  # ten of the flood ran, and failed
    q.queue.process_delivery("o/quiet#0", lane="o/quiet")
    come_due(q, 6)  # their retries come due (5 s)
    start = len(ran)
    while "o/quiet#0" not in ran and (task := huey.dequeue()) is not None:
        huey.execute(task, q.at)
    assert ran[start:].index("o/quiet#0") <= 1, ran[start:]


def test_a_repository_is_one_lane_however_its_name_is_spelled(huey: Huey) -> None:
    q = Recorder(huey)
    for i in range(4):
        q.queue.start(f"Octo/A#{i}")
        q.queue.write("octo/a", i)
    for i in range(8):
        q.queue.start(f"octo/b#{i}")
    assert lanes_of(q.run()).replace("A", "a") == "ab" * 8


def test_jobs_of_one_lane_queued_at_once_take_a_tag_each(huey: Huey) -> None:
    lanes = Lanes(huey)
    tags: list[float | None] = []
    barrier = threading.Barrier(4)

    def tag() -> None:
        barrier.wait()
        for _ in range(50):
            tags.append(lanes.priority("o/flood"))

    threads = [threading.Thread(target=tag) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(tags)) == 200


@pytest.mark.parametrize("value", [b"nan", b"inf", b"-inf", b"not a number"])
def test_a_damaged_clock_reads_as_zero_and_the_queue_goes_on(huey: Huey, value: bytes) -> None:
    q = Recorder(huey)
    huey.storage.put_data(NOW, value)
    huey.storage.put_data(key("o/a"), value)
    for i in range(3):
        q.queue.start(f"o/a#{i}")
    for i in range(3):
        q.queue.start(f"o/b#{i}")
    assert lanes_of(q.run()) == "ab" * 3


def test_the_lane_of_a_delivery_is_its_repository() -> None:
    assert lane_of({"repository": {"full_name": "Octo/Repo"}}) == "octo/repo"
    assert lane_of({"repo": "octo/intake", "candidate_id": "c"}) == "octo/intake"
    assert lane_of({"installation": {"id": 1}}) is None
    assert lane_of({"repository": "not-a-dict"}) is None
    assert lane_of({"repository": {"full_name": 7}}) is None


RAN: list[str] = []


def _start(x: str) -> None:
    RAN.append(x)


def _old_release(url: str, n: int, prefix: str = "old") -> None:
    """`n` jobs queued by an earlier release: a Redis list."""
    old = RedisHuey("rsi-bot", url=url, blocking=False)
    task = old.task(name="start")(_start)
    for i in range(n):
        task(f"{prefix}-{i}")


def _task(huey: Huey) -> Any:
    return huey.task(name="start")(_start)


def _run_all(huey: Huey) -> list[str]:
    RAN.clear()
    while (t := huey.dequeue()) is not None:
        huey.execute(t)
    return list(RAN)


def test_a_queue_left_in_a_redis_list_is_kept_in_order(tmp_path: Path) -> None:
    """An earlier release queued in a Redis list; the priority queue reads a sorted set.
    The jobs left behind are moved, oldest first, ahead of any new one."""
    with redis_db() as url:
        _old_release(url, 3)
        assert redis.Redis.from_url(url).type("huey.redis.rsibot") == b"list"
        settings = appkit.settings(tmp_path, "http://127.0.0.1:9", REDIS_URL=url)
        new = make_huey(settings)
        new.storage.blocking = False
        _task(new)("new")
        assert _run_all(new) == ["old-0", "old-1", "old-2", "new"]


def test_processes_moving_the_list_at_once_lose_and_repeat_nothing() -> None:
    with redis_db() as url:
        _old_release(url, 50)
        hueys = [QueueHuey("rsi-bot", url=url, blocking=False) for _ in range(4)]
        barrier = threading.Barrier(4)
        moved: list[int | None] = []

        def move(h: Huey) -> None:
            barrier.wait()
            moved.append(move_list(h.storage))

        threads = [threading.Thread(target=move, args=(h,)) for h in hueys]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(moved, key=str) == [50, None, None, None]
        _task(hueys[0])
        assert _run_all(hueys[0]) == [f"old-{i}" for i in range(50)]


def test_a_list_found_later_is_moved_then_and_the_queue_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis down while the process started (nothing moved), or a process of the earlier
    release still pushing to a list: the first WRONGTYPE moves it, and nothing stops."""
    with redis_db() as url:
        _old_release(url, 2)

        def down(*args: Any, **kwargs: Any) -> Any:
            raise redis.ConnectionError("Redis is restarting")

        with monkeypatch.context() as m:
            m.setattr(redis.Redis, "eval", down)
            new = redis_huey(url, blocking=False)  # could not look: goes on
        _task(new)("new")  # WRONGTYPE: moved, then queued
        assert _run_all(new) == ["old-0", "old-1", "new"]
        # The queue empty (Redis drops the key), a process of the earlier release, still
        # running, pushes to a list again.
        _old_release(url, 2, prefix="late")
        assert new.pending_count() == 2  # reading the length moves it too
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            _old_release(url, 1, prefix="later")  # a sorted set now: the old one fails
        assert _run_all(new) == ["late-0", "late-1"]


def test_the_lanes_of_stored_deliveries_are_read_a_few_at_a_time(tmp_path: Path) -> None:
    settings = appkit.settings(tmp_path, "http://127.0.0.1:9")
    schema.migrated(settings.DATABASE_URL)
    db = Database(settings.DATABASE_URL)
    payloads = {
        **{f"g-{i}": {"repository": {"full_name": f"Octo/Repo{i % 3}"}} for i in range(45)},
        "intake": {"repo": "octo/intake", "candidate_id": "c"},
        "installation": {"installation": {"id": 1}},
        "not-json": "{",
    }
    with db.session() as s:
        for delivery_id, payload in payloads.items():
            text = payload if isinstance(payload, str) else json.dumps(payload)
            s.add(Delivery(id=delivery_id, source="github", event="x", payload=text))
    got = deliveries.lanes(db, [*payloads, "missing"])
    assert got == {
        **{f"g-{i}": f"octo/repo{i % 3}" for i in range(45)},
        "intake": "octo/intake",
    }
    db.dispose()
