"""Words from outside, made inert for GitHub.

Every string that comes from a bundle (manifest fields, environment keys and values, the
runner's name, image, task, sample and run ids, log tails, errors), a candidate (title,
summary, caveats) or a GitHub user is untrusted: it is shown as the text it is, never as
Markdown or HTML that GitHub would act on. In a Markdown text that means:

- a mention (`@team`) notifies nobody, and `#123`, `GH-1`, `owner/repo#1`, bare URLs and
  `www.` names link nowhere: a zero-width space (U+200B) goes after the `@`, the `#`, the
  `GH-`, the scheme's colon and the `www`, so the text reads the same but GitHub's
  mention, reference and autolink scanners do not match it (in the raw text too, which
  is what e-mail replies read);
- links, images, HTML, comments (`<!--`, `-->`), code spans, tables (`|`), emphasis and
  math cannot open or close anything: the characters that would are written as numeric
  character references (`&#91;`, `&lt;`, `&#96;`, …), which CommonMark never reads as
  structure and which work alike in Markdown text and inside an HTML block such as
  `<summary>`;
- control characters (NUL, bidirectional overrides, lone surrogates) are dropped and the
  value is kept on one line, so it cannot start a heading, a list item or a new row;
- each value has a length bound (`NAME_LIMIT`, `TEXT_LIMIT`, `LOG_LIMIT`), past which it
  ends with an ellipsis.

Every result is `Markup`, the template environment's mark of text that is safe as it is:
the environment escapes every other value by default (`render._env`), so a value a
template forgets to filter is escaped all the same. Only numbers formatted by the
engine's own filters, URLs checked here and what this module returns are marked safe.
"""

from __future__ import annotations

import html
import re
from urllib.parse import quote

from markupsafe import Markup

NAME_LIMIT = 200  # a GPU, runner, task, key, id, image name
TEXT_LIMIT = 1_000  # a sentence: a reason, a finding, a caveat, an environment value
LOG_LIMIT = 2_000  # a log tail or a command, in a code block
BLOCK_LIMIT = 4_000  # a candidate's summary (several paragraphs)

ZWSP = "\u200b"
ELLIPSIS = "…"

# C0 and C1 controls but tab and line breaks, DEL, bidirectional marks, embeddings,
# overrides and isolates, the byte-order mark, and lone surrogates (which cannot be sent
# as UTF-8 at all).
_DROP = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f"
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)
_LINE_BREAK = re.compile("\r\n|[\r\x85\u2028\u2029]")
_SPACES = re.compile(r"\s+")

# Inside a line: a character CommonMark or GitHub would read as structure.
_ENTITY = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    "`": "&#96;",
    "\\": "&#92;",
    "|": "&#124;",
    "*": "&#42;",
    "~": "&#126;",
    "$": "&#36;",  # math
    "[": "&#91;",
    "]": "&#93;",
    "_": "&#95;",
}
_SPECIAL = re.compile(
    r"&(?=[#A-Za-z0-9])"  # an entity of the text's own would be decoded
    r"|[<>`\\|*~$]"
    r"|\](?=[(\[:]|$)"  # the end of a link, image or reference
    r"|^\["  # a reference definition can only start a block
    r"|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])"  # emphasis; snake_case stays as it is
)
# At the start of a value: what would open a block if the value began a line.
_BLOCK_START = re.compile(
    r"^(?:#{1,6}(?=\s|$)|[-+](?=\s|$)|\d{1,9}(?=[.)](?:\s|$))|[-=](?=[-= ]*$))"
)
_BLOCK_ENTITY = {"#": "&#35;", "-": "&#45;", "+": "&#43;", "=": "&#61;"}

# What GitHub links or notifies on its own; a zero-width space after the first part.
_GITHUB_AUTO = re.compile(
    r"@(?=[A-Za-z0-9])"  # @user, @org/team, user@host
    r"|#(?=\d)"  # #123, owner/repo#123
    r"|\bGH-(?=\d)"  # GH-123
    r"|(?<=[A-Za-z0-9]):(?=//)"  # https://, ftp://, …
    r"|\bwww(?=\.)",  # www.example.com
    re.IGNORECASE,
)

_LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]*)\)")
_CODE = re.compile(r"(`+)(.*?)\1", re.DOTALL)
_SAFE_URL = re.compile(r"^https?://[^\s]+$", re.IGNORECASE)
_URL_SAFE = ":/?#@!$&'*+,;=%-._~"  # kept as they are; anything else is percent-encoded


# ----------------------------------------------------------------------- the pieces


def clean(text: object, *, lines: bool = False) -> str:
    """`text` as a string without control characters; unless `lines`, on one line, each
    run of white space one space (a space at either end is kept: `", "` stays a
    separator)."""
    s = _DROP.sub("", _LINE_BREAK.sub("\n", str(text)))
    if lines:
        return s.replace("\t", "    ")
    return _SPACES.sub(" ", s)


def bound(text: str, limit: int) -> str:
    """At most `limit` characters; a longer text ends with an ellipsis."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)].rstrip() + ELLIPSIS


def unlinked(text: str) -> str:
    """Mentions, references and autolinks broken with a zero-width space."""
    return _GITHUB_AUTO.sub(lambda m: m.group() + ZWSP, text)


def _escape_line(s: str) -> str:
    lead = s[: len(s) - len(s.lstrip())]
    s = s[len(lead) :]
    if _BLOCK_START.match(s):
        lead += _BLOCK_ENTITY.get(s[0], f"&#{ord(s[0])};")
        s = s[1:]
    return lead + _SPECIAL.sub(lambda m: _ENTITY[m.group()[0]], unlinked(s))


# ----------------------------------------------------------------------- the filters


def text(value: object, limit: int = TEXT_LIMIT) -> Markup:
    """Untrusted text for Markdown (a paragraph, a list item, a table cell, a heading or
    an HTML block's text): one line, bounded, inert. Markup (the App's own words) is
    only put on one line, its pipes escaped so it stays in its table cell."""
    if isinstance(value, Markup):
        return Markup(" ".join(str(value).split()).replace("|", "&#124;"))
    return Markup(_escape_line(bound(clean(value), limit)))


def name(value: object) -> Markup:
    """A name or an id: text bounded at `NAME_LIMIT`."""
    return text(value, NAME_LIMIT)


def block(value: object, limit: int = BLOCK_LIMIT) -> Markup:
    """Untrusted text of several lines (a candidate's summary): each line inert, blank
    lines kept (one at most), so paragraphs stay paragraphs and nothing else opens."""
    lines = [" ".join(ln.split()) for ln in bound(clean(value, lines=True), limit).split("\n")]
    out: list[str] = []
    for ln in lines:
        if ln or (out and out[-1]):
            out.append(_escape_line(ln) if ln else "")
    while out and not out[-1]:
        out.pop()
    return Markup("\n".join(out))


def code(value: object, limit: int = NAME_LIMIT) -> Markup:
    """Untrusted text as a code span: delimited by more backticks than any run inside,
    so it cannot be closed early. A value with a `|` (which would split a table row even
    inside a code span) or nothing in it is written as plain inert text instead."""
    s = unlinked(bound(clean(value).strip(), limit))
    if not s or "|" in s:
        return text(value, limit)
    ticks = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return Markup(f"{ticks}{pad}{s}{pad}{ticks}")


def fence_for(body: str) -> str:
    """A code fence longer than any run of backticks inside `body`."""
    runs = [len(m) for m in re.findall(r"`+", body)]
    return "`" * max(3, max(runs, default=0) + 1)


def fenced(value: object, lang: str = "", limit: int = LOG_LIMIT) -> Markup:
    """Untrusted text of several lines (a command, a log tail) as a fenced code block
    whose fence no line inside can close. Mentions are broken (an e-mail reply reads
    the raw text); everything else is kept as it is, so a command can be copied."""
    body = bound(clean(value, lines=True).strip("\n"), limit)
    body = re.sub(r"@(?=[A-Za-z0-9])", "@" + ZWSP, body)
    f = fence_for(body)
    return Markup(f"{f}{clean(lang)}\n{body}\n{f}")


def plain(value: object, limit: int = NAME_LIMIT) -> Markup:
    """Text for a place GitHub shows as plain text (a check run's title): one line,
    bounded, mentions and references broken. Markup (the App's own Markdown) loses its
    links, code spans and character references first."""
    s = markdown_to_plain(str(value)) if isinstance(value, Markup) else str(value)
    return Markup(unlinked(bound(clean(s).strip(), limit)))


def markdown_to_plain(md: str) -> str:
    """The App's own inline Markdown as plain text: `[run](url)` is "run: url", code
    spans lose their backticks, character references are decoded."""
    s = _LINK.sub(lambda m: f"{m.group(1)}: {m.group(2)}", md)
    s = _CODE.sub(lambda m: m.group(2).strip(" "), s)
    return html.unescape(s.replace("**", ""))


def href(url: str | None) -> Markup:
    """A link target: http(s) only (anything else is `#`, so nothing can smuggle in a
    `javascript:` URL), with every character that could end a Markdown destination or
    an HTML attribute percent-encoded. Safe in `[x](…)`, `![x](…)` and `href="…"`."""
    if not url or not _SAFE_URL.match(url):
        return Markup("#")
    return Markup(html.escape(quote(url, safe=_URL_SAFE), quote=True))


def own_url(url: str | None) -> Markup | None:
    """A URL of the App's own (the report's), written bare so GitHub links it: http(s)
    only, percent-encoded like `href` but without character references (an autolink
    does not decode them). None when there is none or it is not http(s)."""
    if not url or not _SAFE_URL.match(url):
        return None
    return Markup(quote(url, safe=_URL_SAFE))


def relative(path: str) -> Markup:
    """A relative path (a plot beside the report) as a link target: percent-encoded, so
    it cannot become a scheme or leave the destination."""
    return Markup(quote(clean(path), safe="/._-~"))
