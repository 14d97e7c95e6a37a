"""`bot.bodies`: what a web worker holds of request bodies not yet signed is bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.bodies import CHUNK, MEMORY_PER_BODY, Budget, BudgetSpent, SpooledBody


def feed(body: SpooledBody, size: int) -> None:
    for start in range(0, size, CHUNK):
        body.write(bytes([start % 251]) * min(CHUNK, size - start))


def test_a_small_body_stays_in_memory_and_reads_back_whole() -> None:
    budget = Budget(memory=1 << 20, disk=0)
    body = SpooledBody(budget)
    body.write(b'{"zen": "hi"}')
    assert (budget.memory, budget.disk) == (13, 0)
    assert body.reader().read() == b'{"zen": "hi"}'
    body.release()
    assert (budget.memory, budget.disk) == (0, 0)


def test_a_large_body_keeps_one_chunk_of_memory_at_most_and_spools_the_rest() -> None:
    budget = Budget(memory=1 << 20, disk=64 << 20)
    body = SpooledBody(budget, spool_dir=None)
    feed(body, 25 << 20)
    assert budget.memory == 0  # rolled over: what it held in memory went to the file
    assert budget.disk == 25 << 20
    data = body.reader().read()
    assert len(data) == 25 << 20
    assert data[CHUNK : CHUNK + 1] == bytes([CHUNK % 251])
    body.release()
    assert (budget.memory, budget.disk) == (0, 0)


def test_many_bodies_share_the_memory_budget_then_go_to_disk() -> None:
    budget = Budget(memory=4 * MEMORY_PER_BODY, disk=1 << 30)
    bodies = [SpooledBody(budget) for _ in range(10)]
    for b in bodies:
        feed(b, MEMORY_PER_BODY)
    assert budget.memory == 4 * MEMORY_PER_BODY
    assert budget.disk == 6 * MEMORY_PER_BODY
    assert all(len(b.reader().read()) == MEMORY_PER_BODY for b in bodies)
    for b in bodies:
        b.release()
    assert (budget.memory, budget.disk) == (0, 0)


def test_past_the_disk_budget_a_body_is_refused_and_gives_back_what_it_held() -> None:
    budget = Budget(memory=MEMORY_PER_BODY, disk=3 * CHUNK)
    held = SpooledBody(budget)
    feed(held, 2 * CHUNK)
    refused = SpooledBody(budget)
    with pytest.raises(BudgetSpent):
        feed(refused, 4 * CHUNK)
    refused.release()
    assert budget.disk == 2 * CHUNK
    held.release()
    assert (budget.memory, budget.disk) == (0, 0)


def test_the_disk_budget_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_BODY_DISK_BYTES", "12345")
    assert Budget().disk_limit == 12345
    monkeypatch.setenv("WEB_BODY_DISK_BYTES", "lots")
    assert Budget().disk_limit == 2 * 1024**3


def test_a_body_that_cannot_be_spooled_is_refused_like_a_spent_budget(tmp_path: Path) -> None:
    """No spool folder (or a full disk): the same 503 as a spent budget, nothing held."""
    budget = Budget(memory=MEMORY_PER_BODY, disk=1 << 30)
    body = SpooledBody(budget, spool_dir=str(tmp_path / "gone"))
    with pytest.raises(BudgetSpent, match="could not be spooled"):
        feed(body, 4 * CHUNK)
    body.release()
    assert (budget.memory, budget.disk) == (0, 0)
