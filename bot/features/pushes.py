"""A head seen on a tracked PR (opened, reopened, pushed to); on a push, verify the new
head when its code is trusted, else ask a maintainer to approve exactly that commit. The
push ends a review round that asked for changes: it is the answer to that review, later
pushes are plain pushes.

Trust follows the code, not the pusher. A head runs without a new approval when it was
approved or verified before, when the repository never requires approval, or when a
trusted account pushed it and every commit it brings since the PR's last trusted head
was written and committed by trusted accounts: a writer's "Update branch" merge that
brings in an outsider's commit waits for approval like the outsider's own push did.

Every head a tracked PR has is recorded with the time the App learnt of it (opened,
reopened, synchronize): a `/rsi reverify` approves the head its comment saw.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from sqlalchemy import select

from bot import approvals, messages, pull_writes, triggers
from bot.approvals import Outsider
from bot.github.api import CommitPeople, Commits, GitHubError
from bot.models import Delivery, utcnow
from bot.repo_config import RepoConfig
from bot.verification import steps, store
from bot.verification.ports import StepPorts

log = logging.getLogger(__name__)

MAX_LOOKUPS = 5  # commit authors looked up per push; more unknown accounts wait
GITHUB_COMMITTER = "web-flow"  # GitHub's own committer of web edits and "Update branch"


@dataclass(frozen=True)
class Head:
    """A PR's head as a webhook told of it: the PR, its head and base branch, who sent
    it, the PR's `updated_at` (None: not said) and the delivery (empty: not from one)."""

    repo: str
    number: int
    sha: str
    base_ref: str
    sender: str
    updated_at: dt.datetime | None
    delivery: str
    event: str


def _learnt_at(p: StepPorts, h: Head) -> dt.datetime:
    """When the head became known: no earlier than the push (the PR's `updated_at`) nor
    than the delivery's arrival, whichever is later (a comment written before either
    cannot have seen it)."""
    times = [h.updated_at]
    if h.delivery:
        with p.db.session() as s:
            got = s.scalar(select(Delivery.received_at).where(Delivery.id == h.delivery))
        times.append(store.aware(got) if got is not None else None)
    known = [t for t in times if t is not None]
    return max(known) if known else utcnow()


def seen(p: StepPorts, h: Head) -> bool:
    """Record the head of a tracked PR; whether the PR is tracked."""
    when = _learnt_at(p, h)
    with p.db.session() as s:
        if store.pull_request(s, h.repo, h.number) is None:
            return False
        source = h.delivery or f"{h.event}:{h.sha}"
        approvals.record_head(s, h.repo, h.number, h.sha, source, when)
    return True


def pushed(p: StepPorts, h: Head) -> None:
    """A push: the head recorded, then verified or held for approval."""
    repo, number, sha, sender = h.repo, h.number, h.sha, h.sender
    if not seen(p, h):
        return
    # A late or redelivered push must not replace the verification of a newer head.
    if p.github.pull(repo, number).head_sha != sha:
        log.info("%s#%s: push of %s is not the head any more; ignored", repo, number, sha[:10])
        return
    with p.db.session() as s:
        pr = store.pull_request(s, repo, number)
        assert pr is not None
        pr.head_sha = sha
        answers_review, pr.review_pending = pr.review_pending, False
        prev = store.latest(s, repo, number)
        prev_gpus = list(prev.gpus) if prev else None
        known = approvals.trusted(s, repo, number, sha)
        anchor = approvals.last_trusted(s, repo, number, sha)
        unseen = approvals.untrusted_heads(s, repo, number) - {sha}
        # A PR rsi-bot did not open is measured on a writer's word: until a writer has
        # approved one of its heads (a triager's `/rsi verify` only asks), no policy lets
        # its pushes run by themselves.
        vouched = pr.opened_by_app or anchor is not None
    config = p.repo_config(repo).config
    outsiders: list[Outsider] = []
    if (config.approval == "never-required" and vouched) or known:
        trusted = True
    elif _trusted_account(p, repo, config, sender, {}):
        outsiders = _outsiders(p, repo, config, sender, h.base_ref, anchor, sha, unseen)
        trusted = not outsiders
    else:
        trusted = False
    plan = config.plan_like(prev_gpus)
    if not trusted:
        with p.db.session() as s:
            pull_writes.comment(s, repo, number, messages.approval_needed(sender, sha, outsiders))
        p.queue.write(repo, number)
        # The head waits, saying so on the comment and on an `action_required` check run
        # whose Approve and verify a writer can press; the older heads' runs stop.
        steps.verify_head(
            p,
            repo,
            number,
            head_sha=sha,
            trigger=triggers.of("push-awaiting", sender),
            plan=plan,
            awaiting=sender,
        )
        return
    base_sha = None
    if config.base == "main":
        base_sha = p.github.branch_sha(repo, h.base_ref)
    trigger = triggers.of("push-after-review" if answers_review else "push", sender)
    steps.verify_head(
        p,
        repo,
        number,
        head_sha=sha,
        trigger=trigger,
        plan=plan,
        base_sha=base_sha,
        review_round=answers_review,
    )


def _trusted_account(
    p: StepPorts, repo: str, config: RepoConfig, login: str | None, asked: dict[str, bool]
) -> bool:
    """Whether `login` may put code on the runners: the configured trusted pushers, or a
    writer (looked up, at most `MAX_LOOKUPS` accounts a push; `asked` keeps the answers)."""
    if not login:
        return False  # an e-mail GitHub links to no account: anybody's
    who = login.lower()
    if who in asked:
        return asked[who]
    if config.trusts_pusher(who, p.settings.trusted_pushers):
        return True
    if len(asked) > MAX_LOOKUPS:
        return False
    # Asked afresh: trusting a push lets its code run, and a cached answer may predate
    # the removal of the account's access (`asked` still serves the rest of this push).
    perm = p.github.permission(repo, login, max_age_s=0.0)
    asked[who] = perm in approvals.WRITERS
    return asked[who]


def _outsiders(
    p: StepPorts,
    repo: str,
    config: RepoConfig,
    sender: str,
    base_ref: str,
    anchor: str | None,
    sha: str,
    unseen: set[str],
) -> list[Outsider]:
    """The commits a trusted push brings that no trusted account wrote or committed (or
    that were an unapproved head of this PR before). One compare in the ordinary case:
    the PR's last trusted head (else the base branch) to the new head; a second, base
    branch to head, only to clear commits the base branch has (a merge of main)."""
    asked: dict[str, bool] = {sender.lower(): True}

    def suspect(c: CommitPeople) -> Outsider | None:
        earlier = c.sha in unseen  # its author's name may be forged: its history is not
        if not _trusted_account(p, repo, config, c.author, asked):
            return Outsider(c.sha, c.author, earlier_head=earlier)
        web = c.committer is not None and c.committer.lower() == GITHUB_COMMITTER
        if not web and not _trusted_account(p, repo, config, c.committer, asked):
            return Outsider(c.sha, c.committer, earlier_head=earlier)
        return Outsider(c.sha, None, earlier_head=True) if earlier else None

    def listed(base: str) -> Commits | None:
        try:
            return p.github.new_commits(repo, base, sha)
        except GitHubError as exc:
            if exc.status not in (404, 422):
                raise
            return None  # the base is gone (a force-push): compare otherwise

    def bad(commits: list[CommitPeople]) -> list[Outsider]:
        return [o for o in map(suspect, commits) if o is not None]

    first = listed(anchor) if anchor is not None else None
    if first is not None and first.complete and not bad(first.listed):
        return []
    own = listed(base_ref)
    if own is None or not own.complete:
        if first is None or not first.complete:
            return [Outsider(sha, None, unchecked=True)]
        # The new commits alone are complete: the base branch cannot clear any of them.
        return bad(first.listed)
    if first is not None and first.complete:
        # New since the trusted head and not on the base branch.
        mine = {c.sha for c in own.listed}
        return bad([c for c in first.listed if c.sha in mine])
    return bad(own.listed)
