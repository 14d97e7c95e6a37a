"""The numbers of the engine's input bounds, importable without NumPy.

`evidence.limits` checks input against these (and re-exports every name here); the
`rsi-bot evidence` command line reads its `--max-*` defaults from this module, so
`import bot.cli` stays free of NumPy. Standard library only: keep it that way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeGuard

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 2 * GiB
    max_members: int = 20_000
    max_member_bytes: int = 512 * MiB
    max_ratio: float = 200.0
    max_json_bytes: int = 64 * MiB
    max_runs: int = 10_000
    # Entries of one request's list of gaps (`inter_chunk_s`, `itls`): one per chunk or
    # token it streamed. Real streaming TTS requests have tens; an LLM's longest outputs
    # tens of thousands of tokens.
    max_list_values: int = 100_000
    # Per-request numbers a bundle's run files hold in all (each request's figures and
    # every entry of its lists): 1,000,000 requests of real shape hold about 20 million.
    max_values: int = 50_000_000

    def __post_init__(self) -> None:
        for name in (
            "max_bytes",
            "max_members",
            "max_member_bytes",
            "max_json_bytes",
            "max_list_values",
            "max_values",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if not self.max_ratio >= 1:
            raise ValueError("max_ratio must be at least 1")
        if self.max_runs < 1:
            raise ValueError("max_runs must be at least 1")


DEFAULT = Limits()


def finite(x: object) -> TypeGuard[int | float]:
    """A number that can be used: not a bool, not NaN or infinite, nor an integer too
    large for a float (JSON allows any length)."""
    if not isinstance(x, int | float) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False
