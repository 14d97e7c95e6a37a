"""The GPU reference server's continuous batcher, with a stand-in model (no PyTorch).

A request takes a free slot between chunks of decoding and leaves as soon as its own
frames are out, so a short request never waits for a long one and freed slots refill:
that is what keeps the reference task's rounds steady (runners/README.md, noise)."""

from __future__ import annotations

import queue
import threading
from typing import Any

from runners.reference import server


class Model:
    """Records each slot's admissions and counts decode calls."""

    def __init__(self) -> None:
        self.admitted: list[tuple[int, int]] = []
        self.decodes = 0
        self.release = threading.Semaphore(0)

    def admit(self, slot: int, first: int) -> None:
        self.admitted.append((slot, first))

    def decode(self, steps: int) -> None:
        assert steps == server.CHUNK
        self.release.acquire()
        self.decodes += 1


def engine(batch: int) -> tuple[server.Engine, Model]:
    e = object.__new__(server.Engine)
    m = Model()
    e.model = m
    e.pending = queue.Queue()
    e.batch = batch
    e.stats = {"batches": 0, "jobs": 0, "sizes": {}, "busy_s": 0.0}
    threading.Thread(target=e._loop, daemon=True).start()
    return e, m


def drain(job: server.Job) -> list[dict[str, Any]]:
    items = []
    while (item := job.chunks.get(timeout=5)) is not None:
        items.append(item)
    return items


def test_a_short_request_leaves_before_a_long_one_and_its_slot_is_reused() -> None:
    e, m = engine(batch=2)
    long, short, late = (server.Job("x" * 140, True), server.Job("", True), server.Job("", False))
    assert (long.frames, short.frames) == (86, 16)
    e.pending.put(long)
    e.pending.put(short)
    for _ in range(2):
        m.release.release()
    got = drain(short)  # out after its own 16 frames: two chunks, then the end
    assert [g.get("done", False) for g in got] == [False, False, True]
    assert got[-1]["audio_duration_s"] == round(16 * server.FRAME_S, 4)
    e.pending.put(late)  # takes the short one's slot while the long one goes on
    for _ in range(12):
        m.release.release()
    assert len(drain(late)) == 1  # non-streaming: one answer
    chunks = drain(long)
    assert len(chunks) == 86 // server.CHUNK + 1
    assert chunks[-1] == {"done": True, "frames": 86, "audio_duration_s": 6.88}
    assert [slot for slot, _ in m.admitted] == [0, 1, 1]
    assert e.stats["jobs"] == 3
    assert e.stats["batches"] == m.decodes == 11  # ceil(86 / 8) chunks in all
    assert e.stats["sizes"] == {2: 4, 1: 7}
