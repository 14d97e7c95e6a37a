"""How a run or a verification ends other than well: what the designs and the verifier
raise and catch (runners/verify.py, runners/resident.py, runners/crossover.py)."""

from __future__ import annotations

import signal
from typing import Any


class Interrupted(BaseException):
    """SIGTERM/SIGINT: finish the current run as failed, skip the rest, write the manifest."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.record: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"


class RunFailure(Exception):
    """One run failed; `kind` is a short code, `last` the log whose tail matters most."""

    def __init__(self, kind: str, message: str, last: str = "server") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.last = last


class RunnerBug(Exception):
    def __init__(self, record: dict[str, Any], exc: BaseException) -> None:
        super().__init__(str(exc))
        self.record = record
        self.exc = exc
