"""The PR's outbox: what a handler says on a PR (a reply, a reaction) is a row written in
the same transaction as the state it answers, and carried out after it through a narrow
port. A GitHub outage delays a reply, never loses it nor fails the delivery; a row that
keeps failing is given up after `RSI_EFFECT_ATTEMPTS`, its error kept.

Rows of one PR are carried out in the order written, by one drainer at a time: each
row is claimed before it is sent, and a drain stops at the first row another drainer
holds or that is not due yet.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from bot.db import Database
from bot.models import PullWrite, utcnow

log = logging.getLogger(__name__)

CLAIM_S = 120


class Writer(Protocol):
    """The GitHub writes a PR's outbox needs (`bot.github.api.GitHub` is one)."""

    def create_comment(
        self, repo: str, number: int, body: str, link: str | None = None
    ) -> int: ...  # pragma: no cover - a protocol

    def react(
        self, repo: str, number: int, comment_id: int, content: str
    ) -> None: ...  # pragma: no cover - a protocol

    def add_labels(
        self, repo: str, number: int, labels: list[str]
    ) -> None: ...  # pragma: no cover - a protocol

    def create_issue(
        self, repo: str, title: str, body: str, labels: list[str]
    ) -> int: ...  # pragma: no cover - a protocol

    def remove_label(
        self, repo: str, number: int, name: str
    ) -> None: ...  # pragma: no cover - a protocol

    def update_check_run(
        self,
        repo: str,
        check_run_id: int,
        *,
        title: str,
        summary: str,
        details_url: str | None = None,
    ) -> None: ...  # pragma: no cover - a protocol


@dataclass(frozen=True)
class Retry:
    """How often a row is tried and how long between tries (the settings' effect rules)."""

    attempts: int
    backoff_s: float


def comment(s: Session, repo: str, number: int, body: str) -> None:
    """Say `body` on the PR once the session commits."""
    s.add(PullWrite(repo=repo, pr_number=number, kind="comment", params={"body": body}))


def react(s: Session, repo: str, number: int, comment_id: int, content: str) -> None:
    """React to a comment (`eyes`: seen) once the session commits."""
    params = {"comment_id": comment_id, "content": content}
    s.add(PullWrite(repo=repo, pr_number=number, kind="react", params=params))


# The number of the repository's own outbox: writes that belong to no PR (a new issue).
REPOSITORY = 0
# The outbox of check-run words: a check update GitHub keeps refusing never holds up an
# alert issue queued behind it.
CHECKS = -1


def opened_issues(s: Session, repo: str) -> dict[int, int]:
    """Issue number → `about` of the issues this repository's outbox opened."""
    rows = s.scalars(
        select(PullWrite.params).where(
            PullWrite.repo == repo,
            PullWrite.pr_number == REPOSITORY,
            PullWrite.kind == "issue",
            PullWrite.done_at.is_not(None),
        )
    )
    return {
        int(p["number"]): int(p["about"])
        for p in rows
        if isinstance(p.get("number"), int) and isinstance(p.get("about"), int)
    }


def label(s: Session, repo: str, number: int, name: str) -> None:
    """Add a label to the PR (or issue) once the session commits."""
    s.add(PullWrite(repo=repo, pr_number=number, kind="label", params={"labels": [name]}))


def unlabel(s: Session, repo: str, number: int, name: str) -> None:
    """Take a label off the PR (or issue) once the session commits (gone already: done)."""
    s.add(PullWrite(repo=repo, pr_number=number, kind="unlabel", params={"name": name}))


def check(
    s: Session, repo: str, check_run_id: int, title: str, summary: str, details_url: str
) -> None:
    """Rewrite a check run's words (its conclusion stays) once the session commits, in
    the repository's outbox of check words (`CHECKS`)."""
    params = {"check_run_id": check_run_id, "title": title, "summary": summary}
    params["details_url"] = details_url
    s.add(PullWrite(repo=repo, pr_number=CHECKS, kind="check", params=params))


def issue(
    s: Session, repo: str, title: str, body: str, labels: list[str], about: int | None = None
) -> None:
    """Open an issue once the session commits (the repository's outbox); `about` (an
    inquiry's id) is kept with the row, and the issue's number once it is open."""
    params: dict[str, Any] = {"title": title, "body": body, "labels": labels, "about": about}
    s.add(PullWrite(repo=repo, pr_number=REPOSITORY, kind="issue", params=params))


def _send(github: Writer, row: tuple[str, int, str, dict[str, Any]]) -> int | None:
    """Carry out one row; the number of the issue it opened, if it opened one."""
    repo, number, kind, params = row
    if kind == "comment":
        github.create_comment(repo, number, str(params["body"]))
    elif kind == "react":
        github.react(repo, number, int(params["comment_id"]), str(params["content"]))
    elif kind == "label":
        github.add_labels(repo, number, [str(x) for x in params["labels"]])
    elif kind == "unlabel":
        github.remove_label(repo, number, str(params["name"]))
    elif kind == "check":
        github.update_check_run(
            repo,
            int(params["check_run_id"]),
            title=str(params["title"]),
            summary=str(params["summary"]),
            details_url=str(params.get("details_url") or "") or None,
        )
    elif kind == "issue":
        labels = [str(x) for x in params.get("labels") or []]
        return github.create_issue(repo, str(params["title"]), str(params["body"]), labels)
    else:
        raise ValueError(f"no such PR write: {kind}")
    return None


def drain(db: Database, github: Writer, retry: Retry, repo: str, number: int) -> float | None:
    """Carry out the PR's due rows in order; seconds until the next row is due (the
    caller comes back then), or None when nothing is left for this drainer."""
    while True:
        now = utcnow()
        with db.session() as s:
            row = s.scalars(
                select(PullWrite)
                .where(
                    PullWrite.repo == repo,
                    PullWrite.pr_number == number,
                    PullWrite.done_at.is_(None),
                )
                .order_by(PullWrite.id)
                .limit(1)
            ).first()
            if row is None:
                return None
            if row.next_at is not None and _aware(row.next_at) > now:
                return (_aware(row.next_at) - now).total_seconds()
            claimed = s.execute(
                update(PullWrite)
                .where(
                    PullWrite.id == row.id,
                    PullWrite.done_at.is_(None),
                    (PullWrite.claimed_until.is_(None)) | (PullWrite.claimed_until < now),
                )
                .values(claimed_until=now + dt.timedelta(seconds=CLAIM_S))
                .execution_options(synchronize_session=False)
            ).rowcount  # type: ignore[attr-defined]
            if not claimed:
                return None  # another drainer has it, and carries on after it
            rid, attempts = row.id, row.attempts
            what = (row.repo, row.pr_number, row.kind, dict(row.params))
        try:
            made = _send(github, what)
        except Exception as exc:
            _failed(db, retry, rid, attempts + 1, exc)
            continue
        with db.session() as s:
            done = s.get(PullWrite, rid)
            assert done is not None
            done.done_at, done.claimed_until, done.error = utcnow(), None, None
            if made is not None:  # the issue's number: what answers to it are matched by
                done.params = {**done.params, "number": made}


def _failed(db: Database, retry: Retry, rid: int, attempts: int, exc: Exception) -> None:
    error = f"{type(exc).__name__}: {exc}"[:2000]
    with db.session() as s:
        row = s.get(PullWrite, rid)
        assert row is not None
        row.attempts, row.error, row.claimed_until = attempts, error, None
        where = f"{row.kind} on {row.repo}#{row.pr_number}"
        if attempts < retry.attempts:
            delay = min(retry.backoff_s * 2 ** (attempts - 1), 600.0)
            row.next_at = utcnow() + dt.timedelta(seconds=delay)
        else:
            row.done_at = utcnow()
    if attempts < retry.attempts:
        log.warning(
            "%s failed (attempt %d of %d), retrying: %s", where, attempts, retry.attempts, error
        )
    else:
        log.error("%s failed %d times, giving up: %s", where, attempts, error)


def due(db: Database, now: dt.datetime | None = None) -> list[tuple[str, int]]:
    """The PRs with a row due and unclaimed: the reconciler drains them."""
    now = now or utcnow()
    with db.session() as s:
        rows = s.execute(
            select(PullWrite.repo, PullWrite.pr_number)
            .where(
                PullWrite.done_at.is_(None),
                (PullWrite.next_at.is_(None)) | (PullWrite.next_at <= now),
                (PullWrite.claimed_until.is_(None)) | (PullWrite.claimed_until < now),
            )
            .distinct()
        ).all()
    return [(str(r[0]), int(r[1])) for r in rows]


def stuck(db: Database) -> list[tuple[str, int, str, int]]:
    """(repo, PR, kind, attempts) of rows not done: for `/metrics` and tests."""
    with db.session() as s:
        rows = s.execute(
            select(PullWrite.repo, PullWrite.pr_number, PullWrite.kind, PullWrite.attempts).where(
                PullWrite.done_at.is_(None)
            )
        ).all()
    return [(str(r[0]), int(r[1]), str(r[2]), int(r[3])) for r in rows]


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
