"""Per-SHA approvals: a maintainer's word that exactly this commit may run on the GPU
runners (never sticky: a later push needs a new one), and what binds that word to what
the maintainer saw.

- Every head a tracked PR had is dated when the App learnt of it (`record_head`): a
  comment approves the newest head known before the comment was written (`head_at`),
  never one pushed after it, however late the comment is delivered or replayed.
- A head is trusted code when someone approved it or the App verified it (`trusted`).
- Each comment acts once (`claim_comment`); a refusal is dated, so a user is refused
  once an hour per PR (`recently_refused`) and their later commands cost nothing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from bot.models import Approval, PullCommand, PullHead, Verification, utcnow

WRITERS = frozenset({"admin", "maintain", "write"})
REFUSAL_QUIET = dt.timedelta(hours=1)  # one refusal per user per PR per hour
MIN_PREFIX = 7  # `/rsi reverify <sha>`: the shortest prefix taken


@dataclass(frozen=True)
class Outsider:
    """A commit a push brings that waits for approval: who wrote or committed it (None:
    no GitHub account), whether it was an unapproved head of the PR before, or
    `unchecked` when GitHub could not list the push's commits."""

    sha: str
    login: str | None
    earlier_head: bool = False
    unchecked: bool = False


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def approve(s: Session, repo: str, pr_number: int, sha: str, by: str) -> None:
    if approved(s, repo, pr_number, sha) is None:
        s.add(Approval(repo=repo, pr_number=pr_number, sha=sha, approved_by=by))


def approved(s: Session, repo: str, pr_number: int, sha: str) -> str | None:
    """Who approved exactly this SHA, if anyone."""
    row = s.scalar(
        select(Approval).where(
            Approval.repo == repo, Approval.pr_number == pr_number, Approval.sha == sha
        )
    )
    return row.approved_by if row else None


def _verified(s: Session, repo: str, pr_number: int) -> list[Verification]:
    """The PR's verifications of trusted heads: not those that awaited an approval."""
    return list(
        s.scalars(
            select(Verification)
            .where(
                Verification.repo == repo,
                Verification.pr_number == pr_number,
                Verification.held_for_approval.is_(False),
            )
            .order_by(Verification.created_at, Verification.id)
        )
    )


def trusted(s: Session, repo: str, pr_number: int, sha: str) -> bool:
    """Whether the code at `sha` was trusted before: approved, or verified (a verification
    is only ever started for a trusted head)."""
    if approved(s, repo, pr_number, sha) is not None:
        return True
    return any(v.head_sha == sha for v in _verified(s, repo, pr_number))


def last_trusted(s: Session, repo: str, pr_number: int, other_than: str) -> str | None:
    """The newest trusted head of the PR other than `other_than`: what a push is
    compared with to find the commits it brings."""
    dated = [(_aware(v.created_at), v.head_sha) for v in _verified(s, repo, pr_number)]
    rows = s.scalars(select(Approval).where(Approval.repo == repo, Approval.pr_number == pr_number))
    dated += [(_aware(a.approved_at), a.sha) for a in rows]
    found = [sha for _, sha in sorted(dated) if sha != other_than]
    return found[-1] if found else None


# ---------------------------------------------------------------------- heads


def record_head(
    s: Session, repo: str, pr_number: int, sha: str, source: str, seen_at: dt.datetime
) -> None:
    """`sha` was the PR's head at `seen_at` (no later than the App learnt of it), as told
    by `source` (a delivery id, or `read:…` for the App's own read); once per source."""
    row = s.scalar(
        select(PullHead).where(
            PullHead.repo == repo,
            PullHead.pr_number == pr_number,
            PullHead.sha == sha,
            PullHead.delivery_id == source[:100],
        )
    )
    if row is None:
        s.add(
            PullHead(
                repo=repo,
                pr_number=pr_number,
                sha=sha,
                delivery_id=source[:100],
                seen_at=_aware(seen_at).astimezone(dt.UTC),
            )
        )
        s.flush()


def _heads(s: Session, repo: str, pr_number: int) -> list[tuple[dt.datetime, str]]:
    rows = s.scalars(select(PullHead).where(PullHead.repo == repo, PullHead.pr_number == pr_number))
    return sorted((_aware(r.seen_at), r.sha) for r in rows)


def head_at(s: Session, repo: str, pr_number: int, at: dt.datetime) -> str | None:
    """The newest head the App knew of at `at` (None when it knew of none)."""
    before = [sha for when, sha in _heads(s, repo, pr_number) if when <= _aware(at)]
    return before[-1] if before else None


def known_heads(s: Session, repo: str, pr_number: int, at: dt.datetime) -> list[str]:
    """Every head the App knew of at `at`, oldest first, each once."""
    return list(
        dict.fromkeys(sha for when, sha in _heads(s, repo, pr_number) if when <= _aware(at))
    )


def untrusted_heads(s: Session, repo: str, pr_number: int) -> set[str]:
    """Heads the PR had that nobody approved and the App never verified."""
    return {sha for _, sha in _heads(s, repo, pr_number) if not trusted(s, repo, pr_number, sha)}


def resolve(s: Session, repo: str, pr_number: int, prefix: str, at: dt.datetime) -> list[str]:
    """The heads known at `at` that `prefix` names (a full SHA or a prefix of at least
    `MIN_PREFIX` characters); one means it names exactly that commit."""
    want = prefix.lower()
    if len(want) < MIN_PREFIX:
        return []
    return [sha for sha in known_heads(s, repo, pr_number, at) if sha.lower().startswith(want)]


# ---------------------------------------------------------------------- commands


def claim_comment(
    s: Session, repo: str, pr_number: int, comment_id: int, delivery_id: str, login: str
) -> bool:
    """Whether this delivery may act on the comment: the first to see it does (and a
    retry of that same delivery); a re-delivery or replay under another id does not."""
    row = s.scalar(
        select(PullCommand).where(PullCommand.repo == repo, PullCommand.comment_id == comment_id)
    )
    if row is not None:
        return row.delivery_id == delivery_id[:100]
    try:
        with s.begin_nested():
            s.add(
                PullCommand(
                    repo=repo,
                    pr_number=pr_number,
                    comment_id=comment_id,
                    delivery_id=delivery_id[:100],
                    login=login.lower()[:100],
                )
            )
    except IntegrityError:  # another delivery of the comment claimed it at this instant
        return False
    return True


def recently_refused(
    s: Session, repo: str, pr_number: int, login: str, now: dt.datetime | None = None
) -> bool:
    """Whether `login` was refused on this PR in the last hour (then they are not told,
    nor is their permission looked up, again)."""
    since = (now or utcnow()) - REFUSAL_QUIET
    rows = s.scalars(
        select(PullCommand).where(
            PullCommand.repo == repo,
            PullCommand.pr_number == pr_number,
            PullCommand.login == login.lower()[:100],
            PullCommand.refused.is_not(None),
        )
    )
    return any(_aware(r.at) >= since for r in rows)


def refuse(s: Session, repo: str, comment_id: int, permission: str) -> None:
    """The comment's command was refused; `permission` is the user's level then."""
    row = s.scalar(
        select(PullCommand).where(PullCommand.repo == repo, PullCommand.comment_id == comment_id)
    )
    if row is not None:
        row.refused, row.at = (permission or "none")[:20], utcnow()
