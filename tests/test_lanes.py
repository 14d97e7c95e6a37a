"""Repositories take turns in the job queue (`bot.lanes`): on both of the queue's stores
(SQLite for the embedded default, Redis deployed), a repository's job waits behind one
job of each busy repository, not behind a flooder's backlog."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from huey import Huey, PriorityRedisHuey, RedisHuey, SqliteHuey

from bot.deliveries import lane_of
from bot.queue import Jobs, Queue
from bot.services import make_huey
from tests import appkit
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

    def __init__(self, huey: Huey, write: Callable[[str, int], float | None] | None = None) -> None:
        self.huey, self.ran = huey, list[str]()
        self.queue = Queue(
            huey,
            Jobs(
                process_delivery=self.ran.append,
                start=self.ran.append,
                drain=self.ran.append,
                write=write or (lambda repo, n: self.ran.append(f"{repo}#{n}")),
                reconcile=lambda: self.ran.append("reconcile"),
                verification_lane=lambda vid: vid.split("#")[0],
                delivery_lanes=lambda ids: {i: i.split("#")[0] for i in ids if "#" in i},
            ),
        )

    def run(self, jobs: int | None = None) -> list[str]:
        """Run `jobs` queued jobs (all when None), as a consumer would; what ran."""
        start = len(self.ran)
        while jobs is None or len(self.ran) - start < jobs:
            task = self.huey.dequeue()
            if task is None:
                break
            self.huey.execute(task)
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


def test_a_write_that_comes_back_later_keeps_its_repository_s_lane(huey: Huey) -> None:
    waits = iter([30.0, None])
    ran: list[str] = []

    def write(repo: str, n: int) -> float | None:
        ran.append(repo)
        return next(waits)

    q = Recorder(huey, write)
    q.queue.write("o/a", 1)
    q.run()
    assert ran == ["o/a"]
    (later,) = huey.scheduled()
    assert later.args == ("o/a", 1)
    # Queued in its lane (a tag past the one that ran), not before every lane.
    assert later.priority is not None
    assert later.priority < -1


def test_the_lane_of_a_delivery_is_its_repository() -> None:
    assert lane_of({"repository": {"full_name": "Octo/Repo"}}) == "octo/repo"
    assert lane_of({"repo": "octo/intake", "candidate_id": "c"}) == "octo/intake"
    assert lane_of({"installation": {"id": 1}}) is None
    assert lane_of({"repository": "not-a-dict"}) is None
    assert lane_of({"repository": {"full_name": 7}}) is None


def test_a_queue_left_in_a_redis_list_is_kept_in_order(tmp_path: Path) -> None:
    """An earlier release queued in a Redis list; the priority queue reads a sorted set.
    The jobs left behind are moved, oldest first, ahead of any new one."""
    with redis_db() as url:
        old = RedisHuey("rsi-bot", url=url, blocking=False)
        ran: list[str] = []
        task = old.task(name="start")(ran.append)
        for i in range(3):
            task(f"old-{i}")
        assert redis.Redis.from_url(url).type(old.storage.queue_key) == b"list"

        settings = appkit.settings(tmp_path, "http://127.0.0.1:9", REDIS_URL=url)
        new = make_huey(settings)
        new.storage.blocking = False
        new.task(name="start")(ran.append)("new")
        while (t := new.dequeue()) is not None:
            new.execute(t)
        assert ran == ["old-0", "old-1", "old-2", "new"]
