"""`runners.host.loop_ms`: the host CPU's speed on one core, and the runner's own
affinity given back on every path."""

from __future__ import annotations

import os

import pytest

from runners import host


def test_loop_ms_times_on_the_core_asked_and_gives_the_cores_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = os.sched_getaffinity(0)
    core = max(before)
    seen: list[set[int]] = []
    real = os.sched_setaffinity

    def spy(pid: int, cpus: set[int]) -> None:
        seen.append(set(cpus))
        real(pid, cpus)

    monkeypatch.setattr(os, "sched_setaffinity", spy)
    ms = host.loop_ms(core, reps=3, n=10_000)
    assert ms > 0
    assert seen == [{core}, before]
    assert os.sched_getaffinity(0) == before


def test_an_interrupt_right_after_pinning_still_gives_the_cores_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = os.sched_getaffinity(0)
    real = os.sched_setaffinity
    calls = []

    def pin_then_interrupt(pid: int, cpus: set[int]) -> None:
        real(pid, cpus)
        calls.append(set(cpus))
        if len(calls) == 1:
            raise KeyboardInterrupt  # a signal handler's exception, just after pinning

    monkeypatch.setattr(os, "sched_setaffinity", pin_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        host.loop_ms(min(before), reps=3, n=10_000)
    assert os.sched_getaffinity(0) == before
