"""The ledger at the top of the evidence comment: every verified commit of the PR, with
its per-GPU headline, verdict and how the claim fared — at a glance, across review."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.models import Verification
from bot.texts import _env
from evidence.model import Evidence

CLAIM_WORDS = {
    "confirmed": "claim holds",
    "weakened": "claim weakened",
    "not-reproduced": "claim gone",
    "none": "no claim",
}


@dataclass
class Row:
    sha: str
    when: str
    trigger: str
    cells: dict[str, str] = field(default_factory=dict)
    claim: str = ""
    current: bool = False


def _cell(h: dict[str, Any] | None) -> str:
    if not h:
        return "—"
    d, lo, hi = h.get("delta_pct"), h.get("ci_low_pct"), h.get("ci_high_pct")
    figure = "n/a" if d is None else f"{d:+.1f}%"
    if lo is not None and hi is not None:
        figure += f" [{lo:+.1f}, {hi:+.1f}]"
    return f"{figure} {h.get('verdict', '')}".strip()


def rows_for(s: Session, v: Verification, ev: Evidence) -> list[Row]:
    """Earlier verifications of the PR from the database, then the one being published."""
    earlier = s.scalars(
        select(Verification)
        .where(
            Verification.repo == v.repo,
            Verification.pr_number == v.pr_number,
            Verification.id != v.id,
        )
        .order_by(Verification.created_at)
    )
    out = []
    for e in earlier:
        row = Row(sha=e.head_sha, when=e.created_at.strftime("%Y-%m-%d %H:%M"), trigger=e.trigger)
        if e.state == "published":
            row.cells = {g: _cell(h) for g, h in (e.headline or {}).items()}
            row.claim = CLAIM_WORDS.get(e.claim_status or "none", "")
        else:
            row.claim = e.state
        out.append(row)
    cur = Row(
        sha=v.head_sha,
        when=v.created_at.strftime("%Y-%m-%d %H:%M"),
        trigger=v.trigger,
        current=True,
        claim=CLAIM_WORDS[ev.claim.status],
    )
    for g, r in ev.gpus.items():
        cur.cells[g] = _cell(
            {**(r.headline.model_dump() if r.headline else {}), "verdict": r.verdict}
        )
    out.append(cur)
    return out


def render(
    rows: list[Row], *, main_moved: int = 0, base_ref: str = "main", base_sha: str = ""
) -> str:
    gpus = sorted({g for r in rows for g in r.cells})
    return (
        _env()
        .get_template("ledger.md.j2")
        .render(rows=rows, gpus=gpus, main_moved=main_moved, base_ref=base_ref, base_sha=base_sha)
    )


def compose(ledger: str, evidence_comment: str) -> str:
    """The marker line stays first; the ledger, then the current commit's evidence."""
    marker, _, rest = evidence_comment.partition("\n")
    return f"{marker}\n{ledger}\n{rest}"
