"""The repository's documentation stands on its own.

A user's clone has only what git tracks: no notes beside the project (`../shared`), and
no way to read "issue #5" as anything but a dangling reference. So no tracked file may
point at either, and every relative link in the README files and `docs/` must lead to a
file that exists.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()

# Notes that live outside the repository.
OUTSIDE = re.compile(r"\.\./shared|shared/design")
# This project's own issue and pull-request numbers, in the forms they were written:
# "issue #5", "Issue 7", "issues #2, #3", "(#10)", "see #4", "PR #12". An upstream
# reference names its project: "sgl-project/sglang-omni#1331", "SGLang-Omni PR 609".
# A URL path (`/issues/7/comments`) is not a reference.
OUR_NUMBER = re.compile(
    r"(?<![/\w])[Ii]ssues?\s*#?\d+"
    r"|\(#\d+\)"
    r"|(?<![/\w])[Ss]ee #\d+"
    r"|(?<![/\w])PRs? #\d+"
)
# Upstream's own files, recorded byte for byte as test data, speak of upstream's pull
# requests in upstream's words; they are checked for OUTSIDE only.
RECORDED = ("tests/fixtures/real/",)

LINKED_DOCS = ("README.md", "runners/README.md", "docs/*.md")


def tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def text_of(rel: str) -> str | None:
    """The file's text, or None for a binary file (or one deleted in the working tree)."""
    path = ROOT / rel
    if not path.is_file() or path.is_symlink():
        return None
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def offences(rel: str, text: str) -> list[str]:
    found = []
    check_numbers = not rel.startswith(RECORDED)
    for n, line in enumerate(text.splitlines(), 1):
        hits = [m.group(0) for m in OUTSIDE.finditer(line)]
        if check_numbers:
            hits += [m.group(0) for m in OUR_NUMBER.finditer(line)]
        found += [f"{rel}:{n}: {h!r}" for h in hits]
    return found


def test_no_tracked_file_points_outside_the_repository_or_at_our_issue_numbers() -> None:
    files = [p for p in tracked() if p != SELF]
    assert len(files) > 50, "git ls-files found almost nothing: not run from the repository?"
    bad = []
    for rel in files:
        text = text_of(rel)
        if text is not None:
            bad += offences(rel, text)
    assert not bad, "references a user's clone cannot follow:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ("see issue #5", True),
        ("(issue 7)", True),
        ("Issue #12: the dry task", True),
        ("as in #10 (see #10)", True),
        ("fixed in (#10)", True),
        ("the article's result is PR #3136", True),
        ("Design notes in ../shared/design/bundle.md", True),
        ("(shared/design/architecture.md)", True),
        ("sgl-project/sglang-omni#3136", False),
        ("SGLang-Omni PR 3136", False),
        ("GET /repos/o/r/issues/7/comments", False),
        ("`#123` does not link", False),
        ("a shared folder", False),
    ],
)
def test_the_check_tells_our_references_from_others(line: str, bad: bool) -> None:
    assert bool(offences("x.md", line)) is bad


# [text](target) and ![alt](target), and reference definitions `[label]: target`.
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)[^`].*?\1", re.S)


def relative_links(markdown: str) -> list[str]:
    """Targets of the document's links that are paths in this repository."""
    prose = CODE_SPAN.sub("", FENCE.sub("", markdown))
    targets = INLINE_LINK.findall(prose) + REFERENCE.findall(prose)
    out = []
    for t in targets:
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t) or t.startswith(("#", "//")):
            continue  # a URL, a mail address, an anchor in the same page
        path = t.split("#", 1)[0].split("?", 1)[0]
        if path:
            out.append(path)
    return out


def linked_docs() -> list[str]:
    found: set[str] = set()
    for pattern in LINKED_DOCS:
        found.update(p.relative_to(ROOT).as_posix() for p in ROOT.glob(pattern))
    return sorted(found)


def test_the_documents_checked_for_links_exist() -> None:
    docs = linked_docs()
    for required in ("README.md", "runners/README.md", "docs/architecture.md", "docs/bundle.md"):
        assert required in docs
    for required in ("docs/statistics.md", "docs/threat-model.md", "docs/bounds.md"):
        assert required in docs


@pytest.mark.parametrize("doc", linked_docs())
def test_every_relative_link_leads_to_a_file(doc: str) -> None:
    source = ROOT / doc
    missing = []
    for target in relative_links(source.read_text(encoding="utf-8")):
        where = ROOT / target.lstrip("/") if target.startswith("/") else source.parent / target
        if not where.resolve().exists():
            missing.append(target)
    assert not missing, f"{doc} links to files that do not exist: {missing}"


def test_links_are_found_in_prose_only() -> None:
    md = (
        "See [the format](docs/bundle.md#layout) and ![plot](plots/a.png 'x').\n"
        "[ref]: ../runners/README.md\n"
        "`[not](a-link.md)`\n"
        "```\n[nor](this.md)\n```\n"
        "[web](https://example.org/x.md) [anchor](#top) [mail](mailto:a@b.c)\n"
    )
    assert relative_links(md) == ["docs/bundle.md", "plots/a.png", "../runners/README.md"]
