"""`/rsi` commands in PR comments: reverify, verify, status, cancel, help, and the answers
to a regression alert (justified, false-alarm), carried out on the App's ports.

For users with write, maintain or admin on the repository, or listed under
`trigger.allow` (who may run commands but approve code for the runners only with write
access). A reaction acknowledges at once; a refusal is polite and says who may, once per
user and PR an hour: later commands of a refused user cost no request at all. A comment
acts once (a re-delivery or replay finds it done).

`/rsi reverify` approves the head the PR had when the comment was written (the comment's
own `created_at`, never the delivery's time), or exactly the commit `<sha>` names among
the heads known then: a comment older than a push approves nothing newer.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

from sqlalchemy.orm import Session

from bot import approvals, inquiries, messages, pull_lease, pull_writes, triggers, watch
from bot.commands import ANSWERS, ON_ISSUES, Command
from bot.github.api import Pull
from bot.models import Inquiry, utcnow
from bot.repo_config import Budget, Plan, RepoConfig
from bot.verification import machine as M
from bot.verification import reasons as R
from bot.verification import steps, store
from bot.verification.ports import StepPorts
from bot.verification.reasons import Reason

log = logging.getLogger(__name__)

PERMISSION_AGE_S = 60.0


@dataclass(frozen=True)
class Comment:
    """A command's comment, as the webhook told of it: where (`on_pull`: on a PR, else on
    an issue), by whom, when it was written (None: GitHub did not say), and the delivery
    that brought it (a comment acts once whichever delivery brings it again)."""

    repo: str
    number: int
    on_pull: bool
    comment_id: int
    user: str
    written_at: dt.datetime | None
    delivery: str

    @property
    def claim(self) -> str:
        return self.delivery or f"comment:{self.comment_id}"


def commented(p: StepPorts, c: Comment, cmd: Command) -> None:
    """Act on a parsed command; whatever it says is written to the PR's outbox and carried
    out after, however the command ended."""
    if not c.on_pull and cmd.name not in ON_ISSUES:
        return  # on an issue, only an answer to an alert issue the App opened
    if not c.on_pull:
        with p.db.session() as s:
            if c.number not in pull_writes.opened_issues(s, c.repo):
                return  # someone else's issue: not the App's to answer on
    if cmd.name in ANSWERS and not cmd.errors:  # an answer to an alert on a merged PR
        with _then_carried_out(p, c):
            _answer(p, c, cmd.name)
        return
    if cmd.name == "bisect":  # resume a hunt left unresolved, on its alert issue
        with _then_carried_out(p, c):
            _bisect(p, c, cmd)
        return
    with p.db.session() as s:
        tracked = store.pull_request(s, c.repo, c.number) is not None
    if not tracked:
        if cmd.name == "verify":  # a PR the App did not open: a writer may have it measured
            with _then_carried_out(p, c):
                _adopt(p, c, cmd)
        return
    # One command of a PR at a time (`Busy` retries the delivery).
    with _then_carried_out(p, c), pull_lease.held(p.db, c.repo, c.number, p.settings.RSI_LEASE_S):
        _command(p, c, cmd)


@contextmanager
def _then_carried_out(p: StepPorts, c: Comment) -> Iterator[None]:
    """What the command wrote to the PR's outbox is carried out after, however it ended."""
    try:
        yield
    finally:
        p.queue.write(c.repo, c.number)


def _command(p: StepPorts, c: Comment, cmd: Command) -> None:
    with p.db.session() as s:
        if not approvals.claim_comment(s, c.repo, c.number, c.comment_id, c.claim, c.user):
            log.info("%s#%s: comment %s acted on already", c.repo, c.number, c.comment_id)
            return
        quiet = approvals.recently_refused(s, c.repo, c.number, c.user)
    # Read once: who may, and what a command runs, come from the same file.
    config = p.repo_config(c.repo).config
    allowed = config.allows(c.user)
    if quiet and not allowed:
        return  # refused within the hour: no reaction, lookup or reply this time
    with p.db.session() as s:
        pull_writes.react(s, c.repo, c.number, c.comment_id, "eyes")
    p.queue.write(c.repo, c.number)  # seen, at once
    permission = None
    if not allowed:
        permission = p.github.permission(c.repo, c.user, max_age_s=PERMISSION_AGE_S)
        if permission not in approvals.WRITERS:
            with p.db.session() as s:
                _refuse(s, c, permission)
            return
    if cmd.errors or cmd.name == "help":
        _say(p, c, messages.help_text(cmd.errors))
        return
    act = {"reverify": _reverify, "verify": _reverify, "status": _status, "cancel": _cancel}[
        cmd.name
    ]
    reply = act(p, c, cmd, config, permission)
    if reply is not None:
        _say(p, c, reply)


def _take(s: Session, c: Comment) -> bool:
    """Claim the comment (a comment acts once: False when it did already) and acknowledge
    it with a reaction, carried out after the session commits."""
    if not approvals.claim_comment(s, c.repo, c.number, c.comment_id, c.claim, c.user):
        log.info("%s#%s: comment %s acted on already", c.repo, c.number, c.comment_id)
        return False
    pull_writes.react(s, c.repo, c.number, c.comment_id, "eyes")
    return True


def _refuse(s: Session, c: Comment, permission: str | None) -> None:
    """Refuse a user without the access a command needs: told who may, once an hour."""
    approvals.refuse(s, c.repo, c.comment_id, permission or "none")
    pull_writes.comment(s, c.repo, c.number, messages.refusal(c.user, c.repo))


def _adopt(p: StepPorts, c: Comment, cmd: Command) -> None:
    """`/rsi verify` on a PR the App does not track: a writer's command (asked afresh:
    it approves the head for the runners) makes it tracked and measures its head against
    its base branch on the repository's watched task; anyone else is told who may, once
    an hour. Two such commands at once take turns on the PR's lease: one measures, the
    other joins it."""
    with p.db.session() as s:
        if approvals.recently_refused(s, c.repo, c.number, c.user):
            return  # refused within the hour: no lookup, reaction or reply this time
    permission = p.github.permission(c.repo, c.user, max_age_s=0.0)
    writer = permission in approvals.WRITERS
    # A triager's request is queued for a writer's approval: it runs nothing by itself.
    asks = writer or permission == "triage"
    pull = p.github.pull(c.repo, c.number) if asks else None
    facts = None
    if pull is not None and pull.state == "open" and pull.head_repo:
        facts = steps.PullFacts(
            pull.number,
            pull.head_sha,
            pull.head_ref,
            pull.head_repo,
            pull.base_ref,
            pull.base_sha,
            pull.html_url,
        )
        steps.track_pull(p, c.repo, facts)
    lease = pull_lease.held(p.db, c.repo, c.number, p.settings.RSI_LEASE_S)
    with lease if facts is not None else nullcontext():
        with p.db.session() as s:
            if not _take(s, c):
                return
            if not asks:
                _refuse(s, c, permission)
                return
        _say(p, c, _verify_pull(p, c, cmd, pull, facts, approved=writer))


@contextmanager
def _writer(p: StepPorts, c: Comment) -> Iterator[Session | None]:
    """The session of a command only writers may give (it judges an alert or spends the
    watch's GPU minutes: `trigger.allow` is not enough), the comment taken; None when it
    was seen already or its author is refused (told once an hour)."""
    with p.db.session() as s:
        if approvals.recently_refused(s, c.repo, c.number, c.user):
            yield None
            return
    permission = p.github.permission(c.repo, c.user, max_age_s=0.0)
    with p.db.session() as s:
        if not _take(s, c):
            yield None
        elif permission not in approvals.WRITERS:
            _refuse(s, c, permission)
            yield None
        else:
            yield s


def _answer(p: StepPorts, c: Comment, answer: str) -> None:
    """`/rsi justified` or `/rsi false-alarm`: a writer's verdict on the PR's regression
    alert, kept in the alert-quality ledger; anyone else is told who may."""
    with _writer(p, c) as s:
        if s is None:
            return
        found = inquiries.triage(s, c.repo, c.number, answer, c.user)
        reply = messages.triaged(c.user, answer, found[0]) if found else messages.no_alert(c.user)
        pull_writes.comment(s, c.repo, c.number, reply)
        places = sorted({n for q in found for n in inquiries.labelled(s, q)} | {c.number})
        for n in places if found and answer == "false-alarm" else []:
            pull_writes.unlabel(s, c.repo, n, inquiries.LABEL)  # not a regression: it goes
        told = [inquiries.tell_check(p, s, q) for q in found]
    for n in places if found and answer == "false-alarm" else []:
        if n != c.number:
            p.queue.write(c.repo, n)
    if any(told):
        p.queue.write(c.repo, pull_writes.CHECKS)


def _bisect(p: StepPorts, c: Comment, cmd: Command) -> None:
    """`/rsi bisect` on the issue that said a confirmed regression was not traced: the
    hunt goes on from the range it narrowed (writers only: it spends the watch's GPU
    minutes); the hunt's own words follow on its check run and, when it ends, here."""
    with _writer(p, c) as s:
        if s is None:
            return
        if cmd.errors:  # `/rsi bisect A..B`: it resumes the hunt's own range, nothing else
            pull_writes.comment(s, c.repo, c.number, messages.help_text(cmd.errors))
            return
        about = pull_writes.opened_issues(s, c.repo).get(c.number)
        q = s.get(Inquiry, about) if about is not None else None
        why = inquiries.resume_hunt(q, c.user) if q is not None else "no-hunt"
        pull_writes.comment(s, c.repo, c.number, messages.bisect_reply(c.user, q, why))
        qid = q.id if q is not None and why is None else None
    if qid is not None:
        inquiries.advance(p, qid)


def _verify_pull(
    p: StepPorts,
    c: Comment,
    cmd: Command,
    pull: Pull | None,
    facts: steps.PullFacts | None,
    *,
    approved: bool,
) -> str:
    """The measurement `/rsi verify` asked for, queued (held for a writer's approval when
    `approved` is false) or joined, within the repository's `/rsi verify` budgets; the
    reply."""
    if cmd.errors:
        return messages.help_text(cmd.errors)
    if pull is None or facts is None:
        return messages.not_measurable(
            c.user, pull.state if pull else "gone", bool(pull and pull.head_repo)
        )
    config = p.repo_config(c.repo).config
    plan = config.plan(gpus=cmd.gpus or None, rounds=cmd.rounds)
    if not isinstance(plan, Plan):
        return messages.refused(c.user, plan)
    over = _over_budget(p, c, config.budget)
    if over is not None:
        return messages.verify_budget(c.user, *over)
    got = steps.verify_pull(
        p,
        c.repo,
        facts,
        plan,
        config=config,
        user=c.user,
        comment_id=c.comment_id,
        approved=approved,
        start_now=False,
    )
    if got is None:
        return messages.no_task(c.user)
    v, joined = got
    if joined:
        return messages.reverify_joined(c.user, v, True)
    refused = _not_started(p, v.id, config)
    if refused is not None:
        return messages.not_started(c.user, v, refused)
    if not approved:
        return messages.verify_held(c.user, v)
    p.queue.start(v.id)
    return messages.reverify_queued(c.user, v)


REFUSALS = (R.OVER_BUDGET, R.QUEUE_FULL)  # the start gate's reasons (steps.over_budget)


def _not_started(p: StepPorts, vid: str, config: RepoConfig) -> Reason | None:
    """Why the verification just queued may not start (its estimate passes a budget),
    decided once, before its start is queued: it is ended with that reason, and the reply
    says so (`told`: no second word to whoever asked). A refusal at its start, later,
    is news to them, and they are told."""
    with p.db.session() as s:
        v = store.get(s, vid)
        if v is None:
            return None
        ended = Reason.from_json(v.end_reason)
        if v.state == M.State.CANCELLED.value and ended and ended.code in REFUSALS:
            return ended  # its start step found it already
        if M.State(v.state).final:
            return None
        why = steps.over_budget(s, v, config.budget, p.settings.RSI_REPO_MAX_QUEUED)
    if why is None:
        return None
    steps.apply(p, vid, M.Cancel(Reason(why.code, {**why.params, "told": True})))
    return why


def _over_budget(p: StepPorts, c: Comment, budget: Budget) -> tuple[str, str, str] | None:
    """(which, spent, budget) when `/rsi verify` spent its minutes on this PR or today."""
    with p.db.session() as s:
        on_pr, today = watch.verify_minutes(s, c.repo, c.number, utcnow())
    if on_pr >= budget.pr_gpu_minutes:
        return "pr", f"{on_pr:.0f}", f"{budget.pr_gpu_minutes:g}"
    if today >= budget.day_gpu_minutes:
        return "day", f"{today:.0f}", f"{budget.day_gpu_minutes:g}"
    return None


def _say(p: StepPorts, c: Comment, body: str) -> None:
    with p.db.session() as s:
        pull_writes.comment(s, c.repo, c.number, body)


def _reverify(
    p: StepPorts, c: Comment, cmd: Command, config: RepoConfig, permission: str | None
) -> str | None:
    repo, number, user = c.repo, c.number, c.user
    gpus = cmd.gpus
    if gpus is None and not cmd.all_gpus:
        with p.db.session() as s:
            prev = store.latest(s, repo, number)
            gpus = [g for g in prev.gpus if g in config.gpus] if prev else None
    plan = config.plan(gpus=gpus or None, rounds=cmd.rounds)
    if not isinstance(plan, Plan):
        return messages.refused(user, plan)
    with p.db.session() as s:
        pr = store.pull_request(s, repo, number)
        adopted = pr is not None and not pr.opened_by_app
    over = _over_budget(p, c, config.budget) if adopted else None
    if over is not None:
        return messages.verify_budget(user, *over)
    pull = p.github.pull(repo, number)
    head = pull.head_sha
    with p.db.session() as s:
        pr = store.pull_request(s, repo, number)
        assert pr is not None
        pr.head_sha = head
        # The head read now is known from now on (its push may not be delivered yet):
        # a comment written before this instant does not approve it by itself.
        now = utcnow()
        if approvals.head_at(s, repo, number, now) != head:
            approvals.record_head(s, repo, number, head, f"read:{c.comment_id}", now)
        seen: str | None = None
        if c.written_at is not None:
            if cmd.sha is not None:
                named = approvals.resolve(s, repo, number, cmd.sha, c.written_at)
                seen = named[0] if len(named) == 1 else None
            else:
                seen = approvals.head_at(s, repo, number, c.written_at)
        needs_writer = seen is not None and not approvals.trusted(s, repo, number, seen)
        quiet = approvals.recently_refused(s, repo, number, user)
    if seen is None:
        return messages.reverify_which(user, cmd.sha, head)
    if needs_writer:
        # Listed under `trigger.allow`: approving untrusted code still takes write access.
        if permission is None and quiet:
            return None
        # Asked afresh: a cached answer may predate the removal of the user's access.
        permission = p.github.permission(repo, user, max_age_s=0.0)
    if needs_writer and permission not in approvals.WRITERS:
        with p.db.session() as s:
            approvals.refuse(s, repo, c.comment_id, permission or "none")
        return messages.approval_refused(user, seen)
    if permission in approvals.WRITERS:
        with p.db.session() as s:
            approvals.approve(s, repo, number, seen, user)
    if seen != head:
        return messages.reverify_moved(user, seen, head, named=cmd.sha is not None)
    base_sha = None
    if cmd.base_main or config.base == "main":
        base_sha = p.github.branch_sha(repo, pull.base_ref)
    with p.db.session() as s:
        under_way = {a.id for a in store.active(s, repo, number)}
    v = steps.verify_head(
        p,
        repo,
        number,
        head_sha=head,
        trigger=triggers.of("reverify", user),
        plan=plan,
        requested_by=user,
        base_sha=base_sha,
        start_now=False,
    )
    if v is None:
        return messages.nothing_to_repeat(user)
    if v.id in under_way:
        # The same measurement was under way: the request joined it.
        return messages.reverify_joined(user, v, user in (v.requested_by or "").split())
    refused = _not_started(p, v.id, config)
    if refused is not None:
        return messages.not_started(user, v, refused)
    p.queue.start(v.id)
    return messages.reverify_queued(user, v)


def _status(
    p: StepPorts, c: Comment, cmd: Command, config: RepoConfig, permission: str | None
) -> str:
    with p.db.session() as s:
        v = store.latest(s, c.repo, c.number)
        if v is None:
            return messages.nothing_verified(c.user)
        _ = list(v.jobs)
        end = store.aware(v.dispatched_at) if v.dispatched_at else utcnow()
        queued = (end - store.aware(v.created_at)).total_seconds()
        return messages.status_reply(v, c.user, queued, v.dispatched_at is None)


def _cancel(
    p: StepPorts, c: Comment, cmd: Command, config: RepoConfig, permission: str | None
) -> str:
    event = M.Cancel(Reason(R.CANCELLED_BY, {"user": c.user}))
    ids = steps.cancel_active(p, c.repo, c.number, event)
    return messages.cancelled(c.user, ids) if ids else messages.nothing_running(c.user)
