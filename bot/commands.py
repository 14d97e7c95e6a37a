"""`/rsi` commands in PR comments, parsed: pure, so every form is a unit test.

A command is a line of its own starting with `/rsi`, outside fenced or indented code
blocks, `<pre>` blocks, HTML comments and quotes, a quote's lazy continuation lines
included (a quoted, pasted or hidden command is not a request: only what reads as a
command on GitHub is one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NAMES = ("reverify", "status", "cancel", "help")
_LINE = re.compile(r"^/rsi(?:\s+(.*))?$")
_GPU = re.compile(r"^h\d{3}$")
_SHA = re.compile(r"^[0-9a-f]{7,40}$")
_FENCE = re.compile(r"^(`{3,}|~{3,})")


@dataclass
class Command:
    name: str
    gpus: list[str] | None = None  # None: the GPUs of the PR's last verification
    all_gpus: bool = False  # `all`: every GPU the repository's configuration lists
    rounds: int | str | None = None  # a number a side, or "auto"
    base_main: bool = False
    errors: list[str] = field(default_factory=list)
    sha: str | None = None  # `/rsi reverify <sha>`: exactly this commit (a prefix of it)


def _indent(raw: str) -> int:
    """Leading columns of white space, a tab to the next multiple of four."""
    n = 0
    for ch in raw:
        if ch == " ":
            n += 1
        elif ch == "\t":
            n += 4 - n % 4
        else:
            break
    return n


def _command_line(text: str) -> str | None:
    fence: str | None = None  # the open fence's characters (closed by as many or more)
    hidden: str | None = None  # the end of an open HTML comment or <pre> block
    quoted = False  # the previous line was in a quote: a lazy continuation stays in it
    # Markdown's line endings only (str.splitlines also breaks at \x85, \u2028, …), and
    # only spaces and tabs around a line (a no-break space after a fence keeps it open).
    for raw in re.split(r"\r\n|\r|\n", text):
        line = raw.strip(" \t")
        # Indented four columns or more, a fence line is code, not a fence (CommonMark).
        fence_line = _indent(raw) < 4
        if fence is not None:
            # A closing fence is the fence character alone, at least as long (no info).
            if fence_line and re.fullmatch(rf"{re.escape(fence[0])}{{{len(fence)},}}", line):
                fence = None
            continue
        if hidden is not None:
            if hidden in line.lower():
                hidden = None
            continue
        m = _FENCE.match(line) if fence_line else None
        if m and not (m.group(1)[0] == "`" and "`" in line[m.end() :]):  # not inline code
            fence, quoted = m.group(1), False
            continue
        low = line.lower()
        if low.startswith("<pre"):
            hidden = None if "</pre>" in low else "</pre>"
            quoted = False
            continue
        if not line:
            quoted = False
            continue
        # An HTML comment opened on this line hides the lines after it (and all of this
        # one when it starts it).
        opens = low.find("<!--")
        if opens >= 0 and "-->" not in low[opens + 4 :]:
            hidden = "-->"
        if opens == 0:
            continue
        # In a quote (or its lazy continuation) or an indented code block: shown, not asked.
        if line.startswith(">") or quoted:
            quoted = True
            continue
        if raw.startswith(("    ", "\t")):
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
        if _SHA.match(low) and cmd.sha is None:
            cmd.sha = low
        elif _GPU.match(low):
            cmd.gpus, cmd.all_gpus = [*(cmd.gpus or []), low.upper()], False
        elif low == "all":
            cmd.gpus, cmd.all_gpus = None, True
        elif low.startswith("rounds="):
            value = low.removeprefix("rounds=")
            if value.isascii() and value.isdigit() and len(value) <= 3:
                cmd.rounds = int(value)
            elif value == "auto":
                cmd.rounds = "auto"
            else:
                cmd.errors.append(f"`{arg[:40]}`: rounds must be a whole number or auto")
        elif low == "base=main":
            cmd.base_main = True
        else:
            cmd.errors.append(f"unknown argument `{arg[:40]}`")
    return cmd
