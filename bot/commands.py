"""`/rsi` commands in PR comments, parsed: pure, so every form is a unit test.

A command is a line of its own starting with `/rsi` in a top-level paragraph of the
comment as GitHub shows it: the comment is rendered by GitHub's own Markdown parser
(cmark-gfm, with its extensions) and the HTML walked. Never in code, an HTML comment, a
collapsed `<details>` (however its end tag is disguised), quotes, lists, headings,
tables, struck-through or math text, or link reference definitions: a quoted, pasted or
hidden command is not a request, only what reads as a command on GitHub is one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

import cmarkgfm
from cmarkgfm.cmark import Options

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


_GITHUB = Options.CMARK_OPT_UNSAFE | Options.CMARK_OPT_HARDBREAKS  # as a comment renders
_HIDING = frozenset(
    # Collapsed until clicked, or never shown: GitHub's sanitizer drops these with what
    # they hold (script, style, …), or the browser does not draw it (template, hidden).
    {"details", "script", "style", "template", "noscript", "iframe", "noembed", "noframes"}
    | {"plaintext", "xmp", "svg", "math", "textarea", "select", "object", "title", "rp"}
)
_SCOPE = frozenset({"table", "td", "th", "caption", "template", "html", "marquee", "object"})
"""An end tag never closes an element outside these (HTML's "in scope" rule)."""
_NOT_OWN_LINE = frozenset(
    # Shown, but not a request of the commenter's own: quoted, listed, a heading, a
    # table cell, code, a link's text, struck through.
    {"blockquote", "ul", "ol", "li", "table", "h1", "h2", "h3", "h4", "h5", "h6", "pre"}
    | {"code", "kbd", "samp", "a", "del", "s", "strike", "summary", "dl", "dt", "dd"}
)
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
    | {"track", "wbr", "param"}
)


class _Shown(HTMLParser):
    """Walks the comment's HTML as GitHub renders it, collecting each paragraph's lines
    as a reader sees them. A `\0` marks text that cannot be a command (code, a link's
    text, struck-through text): no command line may hold one.

    Raw HTML in a comment need not be well formed, so the walk keeps a stack of open
    elements and errs toward hiding: an end tag closes nothing across a `<details>` it
    does not name (a browser would show the rest inside the collapsed block), and an
    unclosed `<details>` hides everything after it. HTML comments are never text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.paragraphs: list[list[str]] = []  # each a list of lines
        self._open: list[str] | None = None  # the paragraph being read, if it counts

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br":
            if self._open is not None:
                self._open.append("")
            return
        if tag in _VOID:
            self._text("\0")
            return
        hidden = any(name == "hidden" for name, _ in attrs)
        self.stack.append("details" if hidden else tag)
        if tag == "p" and self._counts():
            self._open = [""]
            self.paragraphs.append(self._open)
        elif tag != "p":
            self._text("\0")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """`<details/>`: HTML ignores the slash of an element that is not void, so the
        element stays open (HTMLParser would close it at once)."""
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] == tag:
                del self.stack[i:]
                break
            if self.stack[i] == "details" or self.stack[i] in _SCOPE:
                return  # not across a collapsed block, nor out of a table's cell
        else:
            return
        if tag == "p":
            self._open = None

    def handle_data(self, data: str) -> None:
        # A line of a paragraph ends only at a <br>: a character reference's line end
        # (`&#10;`) or the HTML's own newlines are spaces on the page.
        self._text(data.replace("\n", " ") if self._visible() else "\0")

    def _text(self, text: str) -> None:
        if self._open is not None:
            self._open[-1] += text

    def _counts(self) -> bool:
        """A paragraph at the top: not hidden, quoted, listed, in a table or a heading."""
        return not any(t in _HIDING or t in _NOT_OWN_LINE for t in self.stack[:-1])

    def _visible(self) -> bool:
        inner = self.stack[self.stack.index("p") + 1 :] if "p" in self.stack else self.stack
        return not any(t in _HIDING or t in _NOT_OWN_LINE for t in inner)


def _command_line(text: str) -> str | None:
    """The first `/rsi` line that GitHub shows as a line of its own in a paragraph at the
    top of the comment: the comment is rendered as GitHub renders it (cmark-gfm, raw HTML
    kept for the walk to judge), and only what a reader sees counts."""
    html = cmarkgfm.github_flavored_markdown_to_html(text, options=_GITHUB)
    shown = _Shown()
    shown.feed(html)
    shown.close()
    for lines in shown.paragraphs:
        if any("$$" in line for line in lines):
            continue  # a math block: GitHub shows it typeset, not as a command
        before = ""
        for line in lines:
            # Inside `$…$` math opened on an earlier line: typeset, not a command.
            math = len(re.findall(r"(?<!\\)\$", before)) % 2 == 1
            before += line + "\n"
            line = line.strip(" \t\u00a0")
            if "\0" not in line and not math and _LINE.match(line):
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
