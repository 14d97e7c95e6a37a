"""`/rsi` commands in PR comments, parsed: pure, so every form is a unit test.

A command is a line of its own starting with `/rsi`, outside fenced or indented code
blocks and quotes (a quoted or pasted command is not a request).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NAMES = ("reverify", "status", "cancel", "help")
_LINE = re.compile(r"^/rsi(?:\s+(.*))?$")
_GPU = re.compile(r"^h\d{3}$")


@dataclass
class Command:
    name: str
    gpus: list[str] | None = None  # None: the GPUs of the PR's last verification
    all_gpus: bool = False  # `all`: every GPU the repository's configuration lists
    rounds: int | None = None
    base_main: bool = False
    errors: list[str] = field(default_factory=list)


def _command_line(text: str) -> str | None:
    fence: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"^(`{3,}|~{3,})", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
            elif line.startswith(fence):
                fence = None
            continue
        # Inside a fence, a quote, or an indented code block: shown, not asked.
        if fence is not None or line.startswith(">") or raw.startswith(("    ", "\t")):
            continue
        if _LINE.match(line):
            return line
    return None


def parse(text: str) -> Command | None:
    """The first command in a comment, or None when there is none."""
    line = _command_line(text)
    if line is None:
        return None
    m = _LINE.match(line)
    assert m is not None
    words = (m.group(1) or "").split()
    if not words:
        return Command("help")
    name, args = words[0].lower(), words[1:]
    if name not in NAMES:
        return Command("help", errors=[f"unknown command `{words[0][:40]}`"])
    cmd = Command(name)
    for arg in args if name == "reverify" else []:
        low = arg.lower()
        if _GPU.match(low):
            cmd.gpus, cmd.all_gpus = [*(cmd.gpus or []), low.upper()], False
        elif low == "all":
            cmd.gpus, cmd.all_gpus = None, True
        elif low.startswith("rounds="):
            value = low.removeprefix("rounds=")
            if value.isdigit() and len(value) <= 3:
                cmd.rounds = int(value)
            else:
                cmd.errors.append(f"`{arg[:40]}`: rounds must be a whole number")
        elif low == "base=main":
            cmd.base_main = True
        else:
            cmd.errors.append(f"unknown argument `{arg[:40]}`")
    return cmd
