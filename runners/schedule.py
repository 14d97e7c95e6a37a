"""The order of runs: per mode and concurrency, base and head interleaved and balanced.

Rounds go in pairs whose order alternates — base, head, head, base, base, head, … — so
that a drift of the machine (warming up, a neighbour arriving) falls on both sides
alike, and no side ever runs more than twice in a row.
"""

from __future__ import annotations

from dataclasses import dataclass

MODE_TAGS = {"streaming": "stream", "non-streaming": "nonstream"}


@dataclass(frozen=True)
class Planned:
    id: str
    side: str
    round: int
    mode: str
    concurrency: int
    requests: int
    warmup_requests: int
    accuracy: bool = False

    def record(self) -> dict[str, object]:
        """The manifest's fields for this run, before it has run."""
        return {
            "id": self.id,
            "side": self.side,
            "round": self.round,
            "mode": self.mode,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "warmup_requests": self.warmup_requests,
        }


def balanced(rounds: int) -> list[tuple[str, int]]:
    """`(side, round)` in execution order: pairs alternate base-head, head-base."""
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    pairs = (("base", "head"), ("head", "base"))
    return [(side, r) for r in range(1, rounds + 1) for side in pairs[(r - 1) % 2]]


def run_id(side: str, rnd: int, mode: str, concurrency: int) -> str:
    return f"r{rnd}-{side}-{MODE_TAGS[mode]}-c{concurrency}"


def plan(
    modes: list[str],
    concurrencies: list[int],
    rounds: int,
    requests: int,
    warmup_requests: int,
    accuracy: str | None = None,
) -> list[Planned]:
    """Every run of a verification, in execution order.

    `accuracy`: None (no accuracy command), "every_round", or "first" — once per side
    and mode, in the first round at the first concurrency.
    """
    out: list[Planned] = []
    for mode in modes:
        for ci, conc in enumerate(concurrencies):
            for side, rnd in balanced(rounds):
                acc = accuracy == "every_round" or (accuracy == "first" and rnd == 1 and ci == 0)
                out.append(
                    Planned(
                        id=run_id(side, rnd, mode, conc),
                        side=side,
                        round=rnd,
                        mode=mode,
                        concurrency=conc,
                        requests=requests,
                        warmup_requests=warmup_requests,
                        accuracy=acc,
                    )
                )
    return out
