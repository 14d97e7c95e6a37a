"""Request bodies the web worker holds before the application runs: bounded per worker.

Nothing is known about a body's sender until its signature is checked, and that needs
the whole body; so the bytes a worker holds for bodies not yet checked are budgeted:

* memory: at most `MEMORY_PER_BODY` of each body, and `MEMORY_BUDGET` for all of a
  worker's bodies together; past either, the body goes on to an unlinked temporary file
  (a webhook of GitHub's usual size, tens of KB, stays in memory);
* disk: at most `disk_budget()` bytes of spooled bodies per worker; a body that would
  pass it is answered 503 with `Retry-After` (GitHub records the delivery as failed and
  the reconciler asks for it again), and its connection closed.

Bytes are charged as they arrive, never as declared, so a client that declares 25 MB and
stalls holds one chunk of memory and what it really sent, for at most
`bot.serving.BODY_TIMEOUT_S`. `bench/body_memory.py` measures it.
"""

from __future__ import annotations

import io
import os
import tempfile
from typing import IO

CHUNK = 64 * 1024
"""A body is read in chunks of this size."""

MEMORY_PER_BODY = 64 * 1024
"""The part of one body kept in memory; the rest is spooled to disk."""

MEMORY_BUDGET = 16 * 1024 * 1024
"""Memory for all the bodies one worker holds at once."""

DISK_BUDGET_VAR = "WEB_BODY_DISK_BYTES"
DISK_BUDGET = 2 * 1024**3
"""Disk for all the bodies one worker holds at once (`WEB_BODY_DISK_BYTES`): room for 80
bodies of GitHub's largest size (25 MB) arriving together."""


def disk_budget() -> int:
    value = os.environ.get(DISK_BUDGET_VAR, "")
    return int(value) if value.isdigit() else DISK_BUDGET


class Budget:
    """The bytes of memory and disk that one worker's bodies hold now."""

    def __init__(self, memory: int = MEMORY_BUDGET, disk: int | None = None) -> None:
        self.memory_limit = memory
        self.disk_limit = disk_budget() if disk is None else disk
        self.memory = 0
        self.disk = 0

    def take_memory(self, n: int) -> bool:
        if self.memory + n > self.memory_limit:
            return False
        self.memory += n
        return True

    def take_disk(self, n: int) -> bool:
        if self.disk + n > self.disk_limit:
            return False
        self.disk += n
        return True


class BudgetSpent(Exception):
    """The worker's disk budget for bodies is spent: the request is answered 503."""


class SpooledBody:
    """One request's body as it arrives: in memory while it is small and the worker's
    memory budget allows, then in an unlinked temporary file. `release()` gives its
    bytes back to the budget (and closes the file); call it when the request is done."""

    def __init__(self, budget: Budget, spool_dir: str | None = None) -> None:
        self.budget = budget
        self.spool_dir = spool_dir
        self.size = 0
        self._memory = bytearray()
        self._file: IO[bytes] | None = None
        self._reader: IO[bytes] | None = None

    def write(self, chunk: bytes) -> None:
        """Keep `chunk`; `BudgetSpent` when the worker's disk budget cannot take it."""
        fits = len(self._memory) + len(chunk) <= MEMORY_PER_BODY
        if self._file is None and fits and self.budget.take_memory(len(chunk)):
            self._memory += chunk
            self.size += len(chunk)
            return
        if self._file is None:
            self._roll_over()
        if not self.budget.take_disk(len(chunk)):
            raise BudgetSpent(f"{self.budget.disk} bytes of request bodies spooled already")
        assert self._file is not None
        try:
            self._file.write(chunk)
        except OSError as exc:  # the disk is full: the same answer as a spent budget
            self.budget.disk -= len(chunk)
            raise BudgetSpent(f"a request body could not be spooled: {exc}") from exc
        self.size += len(chunk)

    def _roll_over(self) -> None:
        held = bytes(self._memory)
        if not self.budget.take_disk(len(held)):
            raise BudgetSpent(f"{self.budget.disk} bytes of request bodies spooled already")
        try:
            self._file = tempfile.TemporaryFile(dir=self.spool_dir)  # noqa: SIM115 (closed by release)
            self._file.write(held)
        except OSError as exc:  # no spool folder, or the disk is full
            self.budget.disk -= len(held)
            raise BudgetSpent(f"a request body could not be spooled: {exc}") from exc
        self.budget.memory -= len(self._memory)
        self._memory = bytearray()

    def reader(self) -> IO[bytes]:
        """The whole body, for the application to read from its start."""
        if self._file is None:
            self._reader = io.BytesIO(self._memory)
        else:
            self._file.seek(0)
            self._reader = self._file
        return self._reader

    def release(self) -> None:
        self.budget.memory -= len(self._memory)
        self._memory = bytearray()
        if self._file is not None:
            self.budget.disk -= self.size
            self._file.close()
            self._file = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
