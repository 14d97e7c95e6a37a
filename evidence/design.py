"""Which measurement design a bundle's runs followed, in the engine's own words.

The manifest's `design` (docs/bundle.md) is written by the runner, so it is untrusted
like every other manifest string. What a maintainer reads about a design the engine
knows comes from the table here, keyed by name; the runner's own summary and
assumptions are kept apart, bounded, and only ever shown quoted. A name the engine does
not know is shown as the text it is and its runs are analysed unpaired.
"""

from __future__ import annotations

from dataclasses import dataclass

from evidence import inert
from evidence.model import BurstSizing, DesignResult, DesignServerResult, Manifest

LISTED = 16  # assumptions, server starts per side and rows per start kept from a manifest


@dataclass(frozen=True)
class Words:
    title: str  # what the design is called where a maintainer reads it
    unit: str  # the unit of replication: "round" or "burst"
    summary: str  # how it measured; "{burst}" becomes " of N requests" when recorded
    assumes: tuple[str, ...]


DESIGNS: dict[str, Words] = {
    "sequential": Words(
        "sequential rounds",
        "round",
        "servers started anew every round; base and head rounds interleaved base, head, head, base",
        (
            "the machine's speed drifts alike for both sides over the rounds (the "
            "interleaving balances a slow drift; a faster one widens the interval)",
        ),
    ),
    "alternate": Words(
        "alternating bursts",
        "burst",
        "both servers started once and kept resident on one GPU, the idle one frozen while "
        "the other serves a burst{burst}; bursts alternate base, head, head, base",
        (
            "the host's speed drifts more slowly than a pair of bursts (seconds)",
            "the two resident servers do not disturb each other while one is frozen",
        ),
    ),
    "crossover": Words(
        "simultaneous crossover on two GPUs",
        "burst",
        "base and head servers kept resident on each of two GPUs of one host; a pair is two "
        "bursts{burst} at the same time, base on one GPU and head on the other, the GPUs "
        "swapped every pair; analysed with the GPU as a block",
        (
            "the host's drift at one instant falls on both GPUs alike (the two bursts of a "
            "pair run at the same time)",
            "the two GPUs' speed difference stays the same over two pairs (the GPU term "
            "removes it)",
            "the frozen servers do not slow the two that serve",
        ),
    ),
}

UNKNOWN_SUMMARY = "not a design this engine knows; its runs are analysed unpaired"
UNKNOWN_ASSUMES = ("base and head runs are independent samples of one steady machine",)


def title(name: str) -> str:
    """A design's name as a maintainer reads it ("alternating bursts")."""
    w = DESIGNS.get(name)
    return w.title if w else name


def analysed(paired: bool, unit: str, rounds: bool = False) -> str:
    """How the engine compared the runs, in a few words."""
    if paired and rounds:
        return f"analysed as pairs (each {unit}'s base run against its head run)"
    if paired:
        return f"analysed as pairs (each base {unit} against the head {unit} beside it)"
    return f"analysed unpaired (Welch's test on the {unit}s)"


def _text(value: object, limit: int = inert.TEXT_LIMIT) -> str:
    return inert.bound(inert.clean(value).strip(), limit)


SIZING_FIGURES = {
    "initial",
    "chosen",
    "pairs",
    "within_cv",
    "between_sd_pct",
    "request_s",
    "overhead_s",
    "probed",
    "probe_pairs",
    "initial_sd_pct",
    "probe_sd_pct",
}


def _sized(z: BurstSizing) -> str:
    """How the burst length was chosen, in the design summary's words."""
    if z.probed is not None and z.probe_pairs:
        tried = (
            f"the task's {z.initial} requests for {z.pairs} pairs and {z.probed} for "
            f"{z.probe_pairs} (pairs' spread {z.initial_sd_pct or 0:.1f}% against "
            f"{z.probe_sd_pct or 0:.1f}%)"
        )
        if z.chosen == z.initial:
            return f"{tried}, then the task's length again"
        return f"{tried}, then {z.chosen} (where the spread measured at both lengths costs least)"
    if z.chosen == z.initial:
        return (
            f"{z.initial} requests (kept after {z.pairs} pairs measured the server: "
            "another length promised too little)"
        )
    return (
        f"the task's {z.initial} requests for {z.pairs} pairs, then {z.chosen} (sized to "
        f"the server: requests' spread {100 * (z.within_cv or 0):.0f}%, pairs' "
        f"{z.between_sd_pct or 0:.1f}% beyond it, {z.overhead_s or 0:.1f} s a burst "
        "besides its requests)"
    )


def design_result(m: Manifest) -> DesignResult:
    """The evidence's account of `m`'s design: the engine's words for a known name, the
    runner's own bounded and kept apart."""
    d = m.measured_by
    words = DESIGNS.get(d.name)
    burst = f" of {d.burst_requests} requests" if d.burst_requests else ""
    z = d.burst_sizing
    if z is not None:
        burst = f" of {_sized(z)}"
    servers = [
        DesignServerResult(
            side=side,
            rows=[_text(r, inert.NAME_LIMIT) for r in s.rows[:LISTED]],
            startup_s=s.startup_s,
            vram_mib=s.vram_mib,
            memory_fraction=s.memory_fraction,
            gpu_memory_total_mib=s.gpu_memory_total_mib,
        )
        for side in ("base", "head")
        for s in d.servers.get(side, [])[:LISTED]
    ]
    return DesignResult(
        name=_text(d.name, inert.NAME_LIMIT),
        recorded=m.design is not None,
        known=words is not None,
        paired=d.analysed_paired,
        rounds=d.analysed_rounds,
        unit=words.unit if words else "run",  # the manifest's own unit is not echoed
        summary=words.summary.format(burst=burst) if words else UNKNOWN_SUMMARY,
        assumes=list(words.assumes if words else UNKNOWN_ASSUMES),
        burst_requests=d.burst_requests,
        # the figures only: the runner's own words (`reason`) are not carried
        burst_sizing=BurstSizing(**z.model_dump(include=SIZING_FIGURES)) if z else None,
        servers=servers,
        runner_summary=_text(d.summary) if d.summary else None,
        runner_assumes=[_text(a) for a in d.assumes[:LISTED]],
    )
