"""`/rsi` commands in PR comments, parsed: pure, so every form is a unit test.

A command is a line of its own starting with `/rsi` in a top-level paragraph, as a
CommonMark parser with GitHub's tables and strikethrough (markdown-it, as GitHub's
cmark-gfm) reads the comment: never in code, HTML blocks (`<pre>`, `<script>`,
comments), a collapsed `<details>`, quotes, lists, headings, tables, struck-through or
math text, or link reference definitions (a quoted, pasted or hidden command is not a
request: only what reads as a command on GitHub is one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

NAMES = ("reverify", "verify", "status", "cancel", "help", "justified", "false-alarm", "bisect")
# A maintainer's answer to a regression alert on a merged PR (`bot.inquiries`).
ANSWERS = ("justified", "false-alarm")
ON_ISSUES = (*ANSWERS, "bisect")  # what an alert issue the App opened may be told
_LINE = re.compile(r"^/rsi(?:\s+(.*))?$")
_GPU = re.compile(r"^h[0-9]{3}$")
_SHA = re.compile(r"^[0-9a-f]{7,40}$")
MAX_DIGITS = 40  # of rounds=N


@dataclass(frozen=True)
class Mistake:
    """What was wrong with a command, as data: `pr_templates/app.md.j2` words it."""

    code: str  # unknown-command, unknown-argument or bad-rounds
    word: str  # the user's word, at most 40 characters

    def __str__(self) -> str:
        return f"{self.code}: {self.word}"


@dataclass
class Command:
    name: str
    gpus: list[str] | None = None  # None: the GPUs of the PR's last verification
    all_gpus: bool = False  # `all`: every GPU the repository's configuration lists
    rounds: int | str | None = None  # a number a side, or "auto"
    base_main: bool = False
    errors: list[Mistake] = field(default_factory=list)
    sha: str | None = None  # `/rsi reverify <sha>`: exactly this commit (a prefix of it)


_MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
_DETAILS_OPEN = re.compile(r"<details[\s>]", re.IGNORECASE)
_DETAILS_CLOSE = re.compile(r"</details\s*>", re.IGNORECASE)


def _visible(inline: Token) -> list[str]:
    """A paragraph's lines as GitHub shows them: text and line breaks; what sits in
    inline HTML (a comment spanning lines), code spans, link texts and struck-through text
    is not a command, so those lines are marked with a character no command can start
    with. A text's own line ends (`&#10;` decodes to one) are shown as spaces."""
    out: list[str] = []
    depth = 0  # inside a link or a strikethrough
    for t in inline.children or []:
        if t.type in ("softbreak", "hardbreak"):
            out.append("\n")
        elif t.type in ("link_open", "s_open"):
            depth += 1
            out.append("\0")
        elif t.type in ("link_close", "s_close"):
            depth -= 1
        elif t.type in ("html_inline", "code_inline", "image"):
            out.append("\0" + "\n" * t.content.count("\n"))
        elif t.type == "text" and not depth:
            out.append(t.content.replace("\n", " "))
    return "".join(out).split("\n")


def _command_line(text: str) -> str | None:
    """The first `/rsi` line that GitHub shows as a paragraph of its own at the top level:
    not in a code block, an HTML block (`<pre>`, `<script>`, a comment), a quote, a list,
    a heading or a link reference definition (whose title can hide lines), parsed as
    CommonMark (markdown-it) rather than line by line."""
    # Markdown's line endings only (str.splitlines also breaks at \x85, \u2028, …).
    text = re.sub(r"\r\n|\r", "\n", text)
    nested = 0  # quotes and lists around the current token
    folded = 0  # collapsed `<details>` around it
    prev = ""
    for tok in _MD.parse(text):
        in_paragraph, prev = prev == "paragraph_open", tok.type
        if tok.type in ("blockquote_open", "bullet_list_open", "ordered_list_open"):
            nested += 1
        elif tok.type in ("blockquote_close", "bullet_list_close", "ordered_list_close"):
            nested -= 1
        elif tok.type == "html_block":
            folded += len(_DETAILS_OPEN.findall(tok.content))
            folded = max(0, folded - len(_DETAILS_CLOSE.findall(tok.content)))
        elif tok.type == "inline" and in_paragraph and not nested and not folded:
            raw = tok.content.split("\n")
            if any(line.strip(" \t") == "$$" for line in raw):
                continue  # a math block: GitHub shows it typeset, not as a command
            shown = _visible(tok)
            for line, seen in zip(raw, shown, strict=False):
                line = line.strip(" \t")
                if _LINE.match(line) and seen.strip(" \t") == line:
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
        return Command("help", errors=[Mistake("unknown-command", words[0][:40])])
    cmd = Command(name)
    if name == "bisect":  # resumes the range the hunt narrowed: it takes nothing more
        cmd.errors += [Mistake("unknown-argument", arg[:40]) for arg in args]
    for arg in args if name in ("reverify", "verify") else []:
        low = arg.lower()
        if _SHA.match(low) and cmd.sha is None:
            cmd.sha = low
        elif _GPU.match(low):
            cmd.gpus, cmd.all_gpus = [*(cmd.gpus or []), low.upper()], False
        elif low == "all" or low == "gpus=all":
            cmd.gpus, cmd.all_gpus = None, True
        elif low.startswith("gpus=") and all(_GPU.match(g) for g in low[5:].split(",")):
            named = [g.upper() for g in low.removeprefix("gpus=").split(",")]
            cmd.gpus, cmd.all_gpus = [*(cmd.gpus or []), *named], False
        elif low.startswith("rounds="):
            value = low.removeprefix("rounds=")
            # Any whole number (the repository's budget says which are allowed); the
            # length bound keeps int() from a thousands-digit word.
            if value.isascii() and value.isdigit() and len(value) <= MAX_DIGITS:
                cmd.rounds = int(value)
            elif value == "auto":
                cmd.rounds = "auto"
            else:
                cmd.errors.append(Mistake("bad-rounds", arg[:40]))
        elif low == "base=main":
            cmd.base_main = True
        else:
            cmd.errors.append(Mistake("unknown-argument", arg[:40]))
    return cmd
