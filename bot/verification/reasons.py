"""Why a verification or one GPU's job ended, as a code with parameters.

Stored as data and rendered by a template (`pr_templates/reasons.md.j2`), so the words
can change without touching stored rows, and an untrusted parameter is never a format
string.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Codes: each has a template branch in pr_templates/reasons.md.j2.
RUN_FAILED = "run-failed"  # {gpu, conclusion, url}
RUN_CANCELLED = "run-cancelled"  # {gpu, url}
RUN_TIMED_OUT = "run-timed-out"  # {gpu, url}
NO_REPORT = "no-report"  # {gpu, minutes}: the runner never reported back
NO_BUNDLE = "no-bundle"  # {gpu, artifact}
BUNDLE_REJECTED = "bundle-rejected"  # {gpu, problem}
BUNDLE_UNREADABLE = "bundle-unreadable"  # {problem}: the engine refused the bundles
NO_EVIDENCE = "no-evidence"  # {}: every GPU failed; the jobs carry their own reasons
CANCELLED_BY = "cancelled-by"  # {user}
PR_CLOSED = "pr-closed"  # {state}: closed or merged
SUPERSEDED_BY = "superseded-by"  # {id, sha}
STEP_FAILED = "step-failed"  # {step, error, attempts}
HEAD_NOT_TIP = "head-not-tip"  # {sha, tip, branch}: the PR shows `tip`, not the promoted `sha`
AWAITING_APPROVAL = "awaiting-approval"  # {sha, pusher}: why it waits (no end)
APPROVAL_STALE = "approval-stale"  # {sha, head}: a press of Approve and verify on an old head
WATCH_BUDGET = "watch-budget"  # {spent, budget}: a push to main the day's GPU minutes did not cover
WATCH_BEHIND = "watch-behind"  # {tip}: a push to main already followed by another (`tip`)
# {which, low, budget, spent}: its estimated GPU minutes (at least `low`) do not fit a budget
OVER_BUDGET = "over-budget"
# {queued, most}: its repository already had `queued` verifications waiting for a runner
QUEUE_FULL = "queue-full"

CODES = frozenset(
    {
        RUN_FAILED,
        RUN_CANCELLED,
        RUN_TIMED_OUT,
        NO_REPORT,
        NO_BUNDLE,
        BUNDLE_REJECTED,
        BUNDLE_UNREADABLE,
        NO_EVIDENCE,
        CANCELLED_BY,
        PR_CLOSED,
        SUPERSEDED_BY,
        STEP_FAILED,
        HEAD_NOT_TIP,
        AWAITING_APPROVAL,
        APPROVAL_STALE,
        WATCH_BUDGET,
        WATCH_BEHIND,
        OVER_BUDGET,
        QUEUE_FULL,
    }
)


@dataclass(frozen=True)
class Reason:
    code: str
    params: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown reason code {self.code!r}")

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "params": dict(self.params)}

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> Reason | None:
        if not doc or doc.get("code") not in CODES:
            return None
        return cls(str(doc["code"]), dict(doc.get("params") or {}))
