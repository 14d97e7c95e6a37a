"""Texts the App writes besides the evidence itself: the opening PR body and the status
shown while a verification is queued, running or has failed. Templates only render."""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from evidence.model import Candidate
from evidence.render import COMMENT_MARKER, SECTION_END, SECTION_START


@cache
def _env() -> Environment:
    return Environment(
        loader=PackageLoader("pr_templates", ""),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def status(v: Any, state: str, message: str, *, retry: bool = False, marker: str = "") -> str:
    return (
        _env()
        .get_template("status.md.j2")
        .render(v=v, state=state, message=message, jobs=list(v.jobs), retry=retry, marker=marker)
    )


def status_comment(v: Any, state: str, message: str, *, retry: bool = False) -> str:
    return status(v, state, message, retry=retry, marker=COMMENT_MARKER)


def status_section(v: Any, state: str, message: str, *, retry: bool = False) -> str:
    return f"{SECTION_START}\n{status(v, state, message, retry=retry)}{SECTION_END}\n"


def pr_body(candidate: Candidate, compare_url: str, section: str) -> str:
    return (
        _env()
        .get_template("pr_open.md.j2")
        .render(candidate=candidate, compare_url=compare_url, status_section=section)
    )
