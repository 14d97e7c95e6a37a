"""The App's clock: UTC now, everywhere the App dates what it records.

One function, so a test can move the App's time forward instead of sleeping: GitHub
dates a comment to the whole second, and a test that needs a comment written after what
it did before moves the clock to the next second (`advance`) rather than waiting for it.
The clock only moves forward, so what the App records stays in order."""

from __future__ import annotations

import datetime as dt
import threading

_ahead = dt.timedelta(0)
_held: dt.datetime | None = None
_lock = threading.Lock()


def utcnow() -> dt.datetime:
    held = _held
    return (held if held is not None else dt.datetime.now(dt.UTC)) + _ahead


def hold() -> None:
    """Stop the clock where it is until `reset`: a test that asserts how long something
    took in the App's words ("dispatched as soon as it was queued") must not depend on
    how fast the machine ran it. `advance` still moves a held clock."""
    global _held
    with _lock:
        if _held is None:
            _held = dt.datetime.now(dt.UTC)


def advance(by: dt.timedelta) -> None:
    """Move the clock `by` forward (never back)."""
    global _ahead
    if by < dt.timedelta(0):
        raise ValueError("the clock only moves forward")
    with _lock:
        _ahead += by


def reset() -> None:
    """Real time again (a test's start; nothing the App recorded outlives a test)."""
    global _ahead, _held
    with _lock:
        _ahead = dt.timedelta(0)
        _held = None
