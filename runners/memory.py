"""A server's share of GPU memory, and whether a second one fits beside it.

Two resident servers share one GPU (runners/resident.py), so each must be told its share.
Serving engines read that share in one of two ways, and a task's server command names
the placeholder that matches its flag:

- `{memory_fraction}` — the server's share of the *whole* GPU. Right for a budget of
  total memory such as
  SGLang-Omni's `--<stage>.gpu_memory_fraction`.
- `{memory_fraction_<stage>}` — a stage's part of it, when the task declares how its GPU
  stages split the server's share (`[server.memory] shares`, summing to at most 1).
- `{mem_fraction_static}` — for SGLang's `--mem-fraction-static`, which is a fraction of
  the memory *free when the engine starts*, not of the GPU: the second server of a pair
  would get about half of the first one's share. The runner reads the GPU just before
  each start and sets it so that the engine's weights and pool come to the server's
  share of the whole GPU less the stages' budgets (`shares`) and `other_gib` (what the
  server holds outside any flag: a vocoder's pool, CUDA graphs, activations).

The share is 0.45 for each of two resident servers, 0.30 with the null control (three
servers), 0.85 for the one server of a sequential run.

A task run `alternate` whose command fixes a memory flag to a number is refused when read:
the second server would be told the first one's share of a GPU it no longer has.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FREE_PLACEHOLDER = "mem_fraction_static"
TOTAL_PLACEHOLDER = "memory_fraction"
STAGE_PREFIX = "memory_fraction_"
STAGE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
# Flags that size a serving engine's GPU memory, however it spells them: SGLang's
# --mem-fraction-static (also per stage: --asr.engine.mem_fraction_static), SGLang-Omni's
# --<stage>.gpu_memory_fraction, vLLM's --gpu-memory-utilization.
MEMORY_FLAG = re.compile(
    r"^--(?:[A-Za-z0-9_]+\.)*(mem[-_]fraction[-_]static|gpu[-_]memory[-_]fraction"
    r"|gpu[-_]memory[-_]utilization|memory[-_]fraction)$"
)
RESIDENT_TOTAL = 0.9  # what the resident servers of one GPU share between them
RESIDENT = 0.45  # `{memory_fraction}` of each of the two resident servers
SEQUENTIAL = 0.85  # … and of the one server of a sequential run (or a crossover's GPU)
FREE_FLAG = re.compile(r"mem[-_]fraction[-_]static$")  # read as a fraction of free memory
MIN_FRACTION, MAX_FRACTION = 0.02, 0.95
HEADROOM = 1.05  # the head may need this much more than the base measured …
HEADROOM_MIB = 1024  # … and this much for what a first burst allocates


@dataclass(frozen=True)
class Memory:
    """`[server.memory]`: how the server's GPU stages take its share."""

    shares: dict[str, float] = field(default_factory=dict)  # stage → part of the share
    other_gib: float = 0.0  # held outside `--mem-fraction-static`'s pool
    unmanaged: str | None = None  # why the command sets no share (a small server)

    def placeholders(self) -> frozenset[str]:
        return frozenset(
            {TOTAL_PLACEHOLDER, FREE_PLACEHOLDER, *(STAGE_PREFIX + s for s in self.shares)}
        )

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.shares:
            out["shares"] = dict(self.shares)
        if self.other_gib:
            out["other_gib"] = self.other_gib
        if self.unmanaged is not None:
            out["unmanaged"] = self.unmanaged
        return out


def resident_share(servers: int) -> float:
    """Each resident server's share when `servers` of them share one GPU."""
    return math.floor(RESIDENT_TOTAL / servers * 1000) / 1000


def check(shares: Mapping[str, object], other_gib: object) -> str | None:
    """What is wrong with a `[server.memory]` table's values, or None."""
    for stage, share in shares.items():
        if not STAGE_NAME.fullmatch(stage):
            return f"shares: {stage!r} is not a stage name (lower case, digits, _)"
        if not isinstance(share, int | float) or isinstance(share, bool):
            return f"shares.{stage} must be a number"
        if not 0.0 < share <= 1.0:
            return f"shares.{stage} must lie in (0, 1]"
    if sum(float(s) for s in shares.values() if isinstance(s, int | float)) > 1.0 + 1e-9:
        return "shares must sum to at most 1 (they split the server's one share)"
    if not isinstance(other_gib, int | float) or isinstance(other_gib, bool):
        return "other_gib must be a number"
    if not 0.0 <= other_gib < 1024.0:
        return "other_gib must lie in [0, 1024)"
    return None


def flags(command: str) -> list[tuple[str, str]]:
    """(flag, value template) of each GPU-memory flag in a command template, also inside a
    script it hands a shell (`sh -c '…'`, `bash -lc "…"`, `env X=1 sh -c …`): every
    argument with spaces in it is read as a command line of its own."""
    return _flags(command, depth=3)


def _flags(command: str, depth: int) -> list[tuple[str, str]]:
    try:
        tokens = shlex.split(command)
    except ValueError:
        return []
    out: list[tuple[str, str]] = []
    for i, tok in enumerate(tokens):
        if depth > 0 and any(c.isspace() for c in tok):
            out += _flags(tok, depth - 1)
            continue
        name, eq, value = tok.partition("=")
        if not MEMORY_FLAG.match(name):
            continue
        if not eq:
            value = tokens[i + 1] if i + 1 < len(tokens) else ""
        out.append((name, value))
    return out


def unshared(command: str, memory: Memory) -> list[str]:
    """The memory flags of a command that do not take the server's share in the form the
    flag reads it: SGLang's mem_fraction_static (a fraction of free memory) only
    `{mem_fraction_static}`, a budget of the whole GPU only `{memory_fraction}` or a
    stage's `{memory_fraction_<stage>}`; a fixed number is neither."""
    free = {"{" + FREE_PLACEHOLDER + "}"}
    total = {"{" + p + "}" for p in memory.placeholders()} - free
    return [
        f"{flag} {value}".strip()
        for flag, value in flags(command)
        if value not in (free if FREE_FLAG.search(flag) else total)
    ]


def values(
    memory: Memory, fraction: float, total_mib: int | None, used_mib: int | None
) -> dict[str, object]:
    """The memory placeholders for a server about to start with `fraction` of the GPU,
    which has `total_mib` and `used_mib` in use now (None: unknown, as with no GPU)."""
    out: dict[str, object] = {TOTAL_PLACEHOLDER: fraction}
    for stage, share in memory.shares.items():
        out[STAGE_PREFIX + stage] = _fmt(fraction * share)
    out[FREE_PLACEHOLDER] = _fmt(free_fraction(memory, fraction, total_mib, used_mib))
    return out


def free_fraction(
    memory: Memory, fraction: float, total_mib: int | None, used_mib: int | None
) -> float:
    """SGLang's `mem_fraction_static` that sizes weights + pool to this server's share of
    the whole GPU less the stage budgets and `other_gib`, given what is free now (the
    base SGLang takes the fraction of)."""
    if not total_mib:
        return _clamp(fraction)
    free = total_mib - (used_mib or 0)
    if free <= 0:
        return MIN_FRACTION
    rest = max(0.0, 1.0 - sum(memory.shares.values()))  # what the stage budgets leave
    want = fraction * total_mib * rest - memory.other_gib * 1024.0
    return _clamp(want / free)


def _clamp(x: float) -> float:
    return min(MAX_FRACTION, max(MIN_FRACTION, x))


def _fmt(x: float) -> str:
    return f"{math.floor(x * 1000) / 1000:.3f}"  # rounded down: never more than the share


def others_fit(
    first: str, first_mib: int, used_mib: int, total_mib: int, others: list[str]
) -> str | None:
    """Why the `others`' servers would not fit beside `first`'s (None: they fit): each is
    taken to need what the first took, plus a margin for what its first burst allocates."""
    each = math.ceil(first_mib * HEADROOM) + HEADROOM_MIB
    need = each * len(others)
    free = total_mib - used_mib
    if free >= need:
        return None
    names = " and ".join(others)
    verb = "servers need" if len(others) > 1 else "server needs"
    return (
        f"after the {first} server started, {free} MiB of the GPU's {total_mib} MiB were "
        f"free; the {names} {verb} about {need} MiB (the {first_mib} MiB the {first} took, "
        f"+{round((HEADROOM - 1) * 100)}% and {HEADROOM_MIB} MiB for first requests, each)"
    )


def summary(commands: list[tuple[str, str]], memory: Memory, share: float) -> str:
    """One line for `rsi-runner tasks`: what each memory flag or placeholder is given."""
    parts: list[str] = []
    seen: set[str] = set()
    for _, command in commands:
        named = {value: flag for flag, value in flags(command)}
        for name in sorted(
            _placeholders(command) & memory.placeholders(), key=lambda n: command.index(n)
        ):
            if name in seen:
                continue
            seen.add(name)
            flag = named.get(f"{{{name}}}", "")
            said = f"{flag} {{{name}}}".strip()
            if name == TOTAL_PLACEHOLDER:
                parts.append(f"{said} = {share:g}")
            elif name == FREE_PLACEHOLDER:
                rest = max(0.0, 1.0 - sum(memory.shares.values()))
                less = f" less {memory.other_gib:g} GiB" if memory.other_gib else ""
                of = f"{rest:g} × " if rest < 1.0 else ""
                parts.append(f"{said} (of free memory, for {of}{share:g} of the GPU{less})")
            else:
                part = memory.shares[name[len(STAGE_PREFIX) :]]
                parts.append(f"{said} = {part:g} × {share:g} = {_fmt(part * share)}")
        for flag, value in flags(command):
            if value.strip("{}") not in memory.placeholders() and flag not in seen:
                seen.add(flag)
                parts.append(f"{flag} {value} (fixed)")
    if not parts:
        return f"memory not set ({memory.unmanaged})" if memory.unmanaged else "memory not set"
    return "memory " + "; ".join(parts)


def _placeholders(template: str) -> set[str]:
    import string

    try:
        return {f for _, f, _, _ in string.Formatter().parse(template) if f}
    except ValueError:
        return set()
