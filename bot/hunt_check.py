"""The suspect merge's `rsi/watch` check run tells its hunt.

The watch's check run on a merge says what the push measured ("regressed −8.1%"). When
that point raised a hunt (`bot.inquiries`), the maintainer who opens the check must see
where the hunt is — confirming, bisecting step k of n, traced to its PR, cleared by the
rerun, left unresolved, answered — not the first measurement alone. Each change of the
hunt's words rewrites the check run's title and summary through the repository's outbox
of check words (`pull_writes.CHECKS`), in the transaction that changed the hunt (its
conclusion stays: the measurement did regress; the words say what became of it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot import messages, pull_writes
from bot.artifacts import report_text
from bot.models import Inquiry, SeriesPoint, Verification
from bot.verification.ports import EffectPorts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hunt:
    """Where a hunt is, as its check run says it."""

    state: str
    good: str
    bad: str
    lo: str
    hi: str
    commits: int  # in the suspect range (0: not read yet)
    bisected: int  # bisection steps measured or measuring
    max_steps: int | None
    confirm_pct: float | None  # the confirming rerun's change
    confirm_verdict: str | None
    culprit: str | None
    culprit_pr: int | None
    triage: str | None
    triaged_by: str | None
    why: dict[str, Any] | None
    history_url: str
    pr_url: str | None  # the culprit PR's page


def suspect_run(s: Session, q: Inquiry) -> Verification | None:
    """The watch verification whose point raised the hunt (not the hunt's own rerun),
    if it has a check run."""
    return s.scalar(
        select(Verification)
        .join(SeriesPoint, SeriesPoint.verification_id == Verification.id)
        .where(
            SeriesPoint.series_id == q.series_id,
            SeriesPoint.sha == q.bad_sha,
            Verification.inquiry_id.is_(None),
            Verification.check_run_id.is_not(None),
        )
        .order_by(SeriesPoint.id)
        .limit(1)
    )


def tell(svc: EffectPorts, s: Session, q: Inquiry, hunt: Hunt) -> bool:
    """Write the suspect merge's check run anew when the hunt's words changed; whether a
    write was queued (the caller has the repository's outbox carried out)."""
    v = suspect_run(s, q)
    if v is None or v.check_run_id is None:
        return False
    suffix, paragraph = messages.hunt_check(hunt)
    said = suffix[:300]
    if q.check_said == said:
        return False
    try:
        check_md = report_text(svc.store, v.id, "check.md") or ""
    except Exception:  # the store is down: the hunt's words, the evidence by its link
        log.warning("%s: %s's check.md unreadable; the check links the report", q.repo, v.id)
        check_md = ""
    if not check_md.strip():
        check_md = messages.evidence_linked(svc.report_url(v.id))
    title, summary = messages.check_published(v, check_md)
    pull_writes.check(
        s,
        q.repo,
        v.check_run_id,
        f"{suffix} · {title}",  # the hunt first: a long title is cut at its end
        f"{paragraph}\n\n{summary}",
        hunt.history_url.partition("#")[0],  # the series' filters, as the check run had
    )
    q.check_said = said
    log.info("%s: the check run of %s tells the hunt: %s", q.repo, v.head_sha[:10], suffix)
    return True
