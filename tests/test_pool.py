"""The shared runner pool's turns (bot/pool.py): classes, fair shares between
repositories, and caps per installation and per runner kind."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from bench import fair_share
from bot import pool
from bot.db import Database
from bot.models import RunnerJob

T = fair_share.T0


@pytest.fixture
def db() -> Iterator[Database]:
    with fair_share.database() as d:
        yield d


def add(
    s: Session,
    vid: str,
    repo: str,
    kind: str,
    minute: int,
    *,
    running: bool = False,
    installation: int = 1,
    gpu: str = "H100",
) -> None:
    v = fair_share._queued(vid, repo, kind, T + dt.timedelta(minutes=minute), installation)
    v.gpus = [gpu]
    if running:
        v.state = "running"
        s.add(RunnerJob(verification_id=vid, gpu=gpu, state="running"))
    s.add(v)
    s.flush()


def turn(s: Session, vid: str, caps: pool.Caps, repo_cap: int = 2) -> str | None:
    from bot.models import Verification

    v = s.get(Verification, vid)
    assert v is not None
    return pool.waits(s, v, caps, lambda _r: repo_cap)


def test_a_maintainer_s_request_goes_before_the_watch_and_the_watch_before_a_hunt(
    db: Database,
) -> None:
    with db.session() as s:
        add(s, "v-hunt", "a/r", "push", 0)
        s.get(fair_share.Verification, "v-hunt").inquiry_id = 7  # type: ignore[union-attr]
        add(s, "v-watch", "a/r", "watch", 1)
        add(s, "v-ask", "a/r", "maintainer", 2)
        one = pool.Caps(installation=1)
        assert turn(s, "v-ask", one) is None
        assert turn(s, "v-watch", one) == "installation"
        assert turn(s, "v-hunt", one) == "installation"
        two = pool.Caps(installation=2)
        assert turn(s, "v-watch", two) is None
        assert turn(s, "v-hunt", two) == "installation"


def test_the_repository_holding_fewer_runners_goes_first(db: Database) -> None:
    with db.session() as s:
        add(s, "v-a1", "a/r", "push", 0, running=True)
        add(s, "v-a2", "a/r", "push", 1)  # older, but its repository holds one already
        add(s, "v-b1", "b/r", "push", 2)
        caps = pool.Caps(installation=2)
        assert turn(s, "v-b1", caps) is None
        assert turn(s, "v-a2", caps) == "installation"


def test_work_its_own_repository_holds_back_does_not_stand_in_line(db: Database) -> None:
    """A flood of requests past its repository's cap never blocks another repository."""
    with db.session() as s:
        add(s, "v-f1", "flood/r", "maintainer", 0, running=True)
        add(s, "v-f2", "flood/r", "maintainer", 0, running=True)
        for i in range(20):
            add(s, f"v-fq{i}", "flood/r", "maintainer", 1 + i)
        add(s, "v-b", "b/r", "watch", 30)
        caps = pool.Caps(installation=4, kinds=(("H100", 3),))
        assert turn(s, "v-fq0", caps) == "repository"
        assert turn(s, "v-b", caps) is None


def test_a_runner_kind_s_cap_counts_jobs_of_every_installation(db: Database) -> None:
    with db.session() as s:
        add(s, "v-x", "x/r", "push", 0, running=True, installation=1)
        add(s, "v-y", "y/r", "push", 0, running=True, installation=2, gpu="H200")
        add(s, "v-z", "z/r", "push", 1, installation=3)
        add(s, "v-w", "w/r", "push", 1, installation=3, gpu="H200")
        caps = pool.Caps.parse(None, "H100=1, h200=2")
        assert caps.kinds == (("H100", 1), ("H200", 2))
        assert turn(s, "v-z", caps) == "H100"
        assert turn(s, "v-w", caps) is None


@pytest.mark.parametrize("bad", ["H100", "H100=x", "=3", "H100=4,H200"])
def test_a_pool_setting_that_is_not_kind_equals_n_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="expected KIND=N"):
        pool.Caps.parse(None, bad)


def test_under_a_flood_the_others_wait_a_bounded_time_and_the_flooder_its_share() -> None:
    """bench/fair_share.py's load (fewer ticks): one repository asks every ten seconds,
    nine others now and then; the pool has 6 H100s, 4 a installation, 2 a repository."""
    got = fair_share.simulate(45, seed=3, caps=pool.Caps.parse(4, "H100=6"))
    assert max(got.flood_held) <= 2  # its repository's cap, however much it asks
    others = [w for (who, _), ws in got.waits.items() if who == "other" for w in ws]
    assert others
    assert max(others) <= 600
    assert any(who == "flood" for who, _ in got.waits)  # it gets its share, not nothing
