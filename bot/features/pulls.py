"""A tracked PR's state as GitHub tells of it: closing or merging it cancels what is still
running for it; a review that requests changes opens a review round, which the author's
next push answers."""

from __future__ import annotations

from bot.verification import machine as M
from bot.verification import reasons as R
from bot.verification import steps, store
from bot.verification.ports import StepPorts
from bot.verification.reasons import Reason


def closed(p: StepPorts, repo: str, number: int, *, merged: bool) -> None:
    with p.db.session() as s:
        pr = store.pull_request(s, repo, number)
        if pr is None:
            return
        pr.state = state = "merged" if merged else "closed"
    steps.cancel_active(p, repo, number, M.Cancel(Reason(R.PR_CLOSED, {"state": state})))


def reopened(p: StepPorts, repo: str, number: int) -> None:
    with p.db.session() as s:
        pr = store.pull_request(s, repo, number)
        if pr is not None:
            pr.state = "open"


def changes_requested(p: StepPorts, repo: str, number: int) -> None:
    with p.db.session() as s:
        pr = store.pull_request(s, repo, number)
        if pr is not None:
            pr.review_pending = True
