"""The queued jobs of a verification: start, apply an event, drain the effects outbox,
reconcile. Each is claim → machine → carry out the effects.

Effects are carried out in the order they were stored, one verification at a time (its
lease). An effect that fails is retried later (a scheduled job, never a sleeping
worker) and, after `RSI_EFFECT_ATTEMPTS`, given up: the machine then ends the
verification `failed` with the reason, so no state lasts for ever.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from bot import approvals, estimate, inquiries, leases, observability, pool, triggers, watch
from bot.models import Effect, PullRequest, Verification, utcnow
from bot.repo_config import Budget, Plan, RepoConfig
from bot.verification import fresh, store
from bot.verification import machine as M
from bot.verification import reasons as R
from bot.verification.effects import EXECUTORS, Outcome, find_run
from bot.verification.reasons import Reason

if TYPE_CHECKING:
    from bot.verification.ports import StepPorts

log = logging.getLogger(__name__)


def apply(svc: StepPorts, vid: str, event: M.Event, also: store.Also | None = None) -> None:
    """One event: the transition is stored with its effects; the effects are queued."""
    _, effects = store.transition(svc.db, vid, event, also)
    if effects:
        svc.queue.drain(vid)


def start(svc: StepPorts, vid: str) -> None:
    """Start a queued verification unless a budget, its repository's runners or the
    pool's caps hold it back. What GitHub must say (the repository's config, its
    installation) is read first; the decision itself reads only the database and is
    taken under one lease for every worker, since what may start is read from what
    runs and two starts decided at once could both take the last free runner. The
    effects it queues run after the lease is given back."""
    with svc.db.session() as s:
        v = store.get(s, vid)
        if v is None or v.state != M.State.QUEUED.value:
            return
        repo, known = v.repo, v.installation_id
    config = svc.repo_config(repo).config
    if known is None:
        _note_installation(svc, vid, repo)
    with leases.named(svc.db, "pool-start") as held:
        if not held:  # another worker's decision is stuck: the reconciler tries again
            log.warning("%s not started: the pool's start lease could not be taken", vid)
            return
        effects = _decide(svc, vid, config)
    if effects:
        svc.queue.drain(vid)


def _decide(svc: StepPorts, vid: str, config: RepoConfig) -> tuple[M.Effect, ...]:
    """Cancel, hold or start `vid` from what the database says now; the effects."""
    with svc.db.session() as s:
        v = store.get(s, vid)
        if v is None or v.state != M.State.QUEUED.value:
            return ()
        repo = v.repo
        busy = store.running_count(s, repo, vid)
        over = over_budget(s, v, config.budget, svc.settings.RSI_REPO_MAX_QUEUED)
    if over is not None:
        # A command's own refusal is in its reply (bot/features/commands.py decides
        # before it queues the start): one refused here was answered "queued", so
        # whoever asked is told.
        log.info("%s of %s not started: %s", vid, repo, over.params)
        event: M.Event = M.Cancel(Reason(over.code, dict(over.params)))
        return store.transition(svc.db, vid, event)[1]
    limit = config.budget.max_running

    def cap(other: str) -> int:
        if other == repo:
            return limit
        known = svc.known_config(other)
        return (known.config if known else RepoConfig()).budget.max_running

    caps = pool.Caps.parse(
        svc.settings.RSI_INSTALLATION_MAX_RUNNING, svc.settings.RSI_POOL_MAX_RUNNING
    )
    with svc.db.session() as s:
        v = store.get(s, vid)
        wait = pool.waits(s, v, caps, cap) if v is not None else None
    if wait is not None:
        log.info("%s of %s waits its turn: the %s cap (%d running here)", vid, repo, wait, busy)
    event = M.Start(busy=busy, max_running=limit, turn=wait is None)
    return store.transition(svc.db, vid, event)[1]


def _note_installation(svc: StepPorts, vid: str, repo: str) -> None:
    """Record the installation of a verification made without one (a PR the App adopted,
    a push to it), so that the installation's cap counts it."""
    try:
        iid = svc.github.installation_id(repo)
    except Exception:  # GitHub down: the repository's and the pool's caps still hold
        log.warning("%s: the installation of %s could not be read", vid, repo, exc_info=True)
        return
    with svc.db.session() as s:
        v = store.get(s, vid)
        if v is not None and v.installation_id is None:
            v.installation_id = iid


def over_budget(
    s: Session, v: Verification, budget: Budget, max_queued: int | None = None
) -> Reason | None:
    """Why `v` may not start, whatever asked for it (intake, a push, a command, the
    approve button, a re-run): `max_queued` requests of its repository wait before it,
    or the least its estimate says it spends passes the cap of a
    verification with fixed rounds, or, on a PR rsi-bot did not open, the minutes left of
    that PR's budget or of the day's (`spent` counts what is queued or running at its
    cap or estimate, so requests made together cannot each find the budget free). A
    budget already spent refuses even a verification without an estimate. The watch and
    the hunt for a culprit keep their own daily budget."""
    if v.watch or v.inquiry_id is not None:
        return None
    if max_queued is not None and v.state == M.State.QUEUED.value:
        ahead = store.queued_before(s, v)
        if ahead >= max_queued:
            return Reason(R.QUEUE_FULL, {"queued": str(ahead), "most": str(max_queued)})
    est = estimate.Estimate.from_json(v.estimate)
    if est is not None and not v.adaptive and budget.gpu_minutes is not None:
        worst = max(g.low for g in est.gpus.values())
        if worst > budget.gpu_minutes:
            return Reason(
                R.OVER_BUDGET,
                {
                    "which": "verification",
                    "low": f"{worst:.0f}",
                    "budget": f"{budget.gpu_minutes:g}",
                },
            )
    if v.pr_number is None:
        return None
    pr = store.pull_request(s, v.repo, v.pr_number)
    if pr is None or pr.opened_by_app:
        return None
    low = est.low if est is not None else 0.0
    on_pr, today = watch.verify_minutes(s, v.repo, v.pr_number, utcnow(), but=v.id)
    for which, spent, most in (
        ("pr", on_pr, budget.pr_gpu_minutes),
        ("day", today, budget.day_gpu_minutes),
    ):
        if spent >= most or spent + low > most:
            return Reason(
                R.OVER_BUDGET,
                {
                    "which": which,
                    "low": f"{low:.0f}",
                    "spent": f"{spent:.0f}",
                    "budget": f"{most:g}",
                },
            )
    return None


def drain(svc: StepPorts, vid: str) -> None:
    """Carry out the verification's due effects; come back when the next one is due."""
    while True:
        token = store.claim(svc.db, vid, svc.settings.RSI_LEASE_S)
        if token is None:
            return  # another worker has it; it looks again after releasing
        try:
            wait = _drain_claimed(svc, vid, token)
        except _LeaseLost:
            return  # the worker that took it carries on
        finally:
            store.release(svc.db, vid, token)
        if wait is not None:
            svc.queue.drain_later(vid, wait)
            return
        if not _due(svc, vid):
            inquiries.follow(svc, vid)  # a step of one ended, or an alarm opened one
            return


class _LeaseLost(Exception):
    """The lease expired mid-drain and another worker took it."""


def _due(svc: StepPorts, vid: str) -> bool:
    now = utcnow()
    with svc.db.session() as s:
        return any(
            e.next_at is None or store.aware(e.next_at) <= now
            for e in store.pending_effects(s, vid, now)
        )


def _drain_claimed(svc: StepPorts, vid: str, token: str) -> float | None:
    """Seconds until the first pending effect is due, or None when none is left;
    `_LeaseLost` when another worker took the lease meanwhile."""
    with observability.verification_context(vid):
        while True:
            now = utcnow()
            with svc.db.session() as s:
                pending = store.pending_effects(s, vid, now)
                if not pending:
                    return None
                row = pending[0]
                if row.next_at is not None and store.aware(row.next_at) > now:
                    return (store.aware(row.next_at) - now).total_seconds()
                eid, kind, params, attempts = row.id, row.kind, row.params, row.attempts
            if not store.renew(svc.db, vid, token, svc.settings.RSI_LEASE_S):
                log.warning("%s: lease lost before %s; another worker carries on", vid, kind)
                raise _LeaseLost
            try:
                effect = M.effect_from_json(kind, params)
                follow = EXECUTORS[type(effect)](svc, vid, effect)
            except Exception as exc:
                _failed(svc, vid, eid, kind, attempts + 1, exc)
                continue
            # Done and its outcome in one transaction: a crash between the two would
            # leave, say, a dispatched run that no job knows of.
            if follow is None:
                _done(svc, eid)
            elif isinstance(follow, Outcome):
                store.transition(svc.db, vid, follow.event, _both(follow.also, _mark_done(eid)))
            else:
                store.transition(svc.db, vid, follow, _mark_done(eid))


def _set_done(s: Session, eid: int, error: str | None) -> None:
    row = s.get(Effect, eid)
    if row is not None:
        row.done_at, row.error = utcnow(), error


def _mark_done(eid: int, error: str | None = None) -> store.Also:
    return lambda s, _v: _set_done(s, eid, error)


def _both(first: store.Also, then: store.Also) -> store.Also:
    def also(s: Session, v: Verification) -> None:
        first(s, v)
        then(s, v)

    return also


def _done(svc: StepPorts, eid: int, error: str | None = None) -> None:
    with svc.db.session() as s:
        _set_done(s, eid, error)


def _failed(svc: StepPorts, vid: str, eid: int, kind: str, attempts: int, exc: Exception) -> None:
    """Try again later, or give up; giving up an essential step ends the verification."""
    error = f"{type(exc).__name__}: {exc}"[:2000]
    limit = svc.settings.RSI_EFFECT_ATTEMPTS
    with svc.db.session() as s:
        row = s.get(Effect, eid)
        assert row is not None
        repo = row.verification.repo
        row.attempts, row.error = attempts, error
        if attempts < limit:
            delay = min(svc.settings.RSI_EFFECT_BACKOFF_S * 2 ** (attempts - 1), 600.0)
            row.next_at = utcnow() + dt.timedelta(seconds=delay)
    if attempts < limit:
        log.warning(
            "%s of %s: %s failed (attempt %d of %d), retrying: %s",
            vid,
            repo,
            kind,
            attempts,
            limit,
            error,
        )
        return
    log.error("%s of %s: %s failed %d times, giving up: %s", vid, repo, kind, attempts, error)
    # Given up: the row keeps the error.
    if kind in M.ESSENTIAL:
        store.transition(svc.db, vid, M.StepFailed(kind, error, attempts), _mark_done(eid, error))
    else:
        _done(svc, eid, error)


def reconcile(svc: StepPorts) -> None:
    """What a lost job or a silent runner left behind: effects nobody carries out,
    queued verifications never started, runners that never reported back."""
    now = utcnow()
    with svc.db.session() as s:
        due = store.with_pending_effects(s, now)
        queued = store.queued(s)
        limit = now - dt.timedelta(seconds=svc.settings.RSI_RUN_TIMEOUT_S)
        overdue = store.overdue_jobs(s, limit)
        unlocated = store.unlocated_jobs(s, now - dt.timedelta(seconds=30))
    for vid, gpu, at in unlocated:
        try:
            found = find_run(svc, vid, gpu, at - dt.timedelta(minutes=2))
        except Exception as exc:
            log.warning("reconcile: could not list the runs of %s %s: %s", vid, gpu, exc)
            continue
        if found is not None:
            apply(svc, vid, M.RunLocated(gpu, found[0], found[1]))
    minutes = svc.settings.RSI_RUN_TIMEOUT_S // 60
    for vid, gpu in overdue:
        store.transition(svc.db, vid, M.RunTimedOut(gpu, minutes))
        due.append(vid)
    for vid in queued:
        try:
            start(svc, vid)
        except Exception:
            log.exception("reconcile: could not start %s", vid)
    for vid in dict.fromkeys(due):
        svc.queue.drain(vid)


def stuck_effects(svc: StepPorts) -> list[tuple[str, str, int]]:
    """(verification, effect, attempts) of effects not done: for `/metrics` and tests."""
    with svc.db.session() as s:
        rows = s.execute(
            select(Effect.verification_id, Effect.kind, Effect.attempts)
            .join(Verification)
            .where(Effect.done_at.is_(None))
        ).all()
    return [(r[0], r[1], r[2]) for r in rows]


# ----------------------------------------------------------------------- review rounds


def verify_head(
    svc: StepPorts,
    repo: str,
    number: int,
    *,
    head_sha: str,
    trigger: str,
    plan: Plan,
    requested_by: str | None = None,
    base_sha: str | None = None,
    review_round: bool = False,
    awaiting: str | None = None,
    start_now: bool = True,
) -> Verification | None:
    """Queue a verification of the PR's head (a copy of the PR's last candidate with the
    new head) and supersede every earlier one still active. None when the PR has no
    earlier verification to copy. An active verification of the same head, base, GPUs,
    rounds (fixed, or until decided with the same cap and budget) and modes is returned
    as it is (with `requested_by` added to whoever asked before). `plan` is what it runs
    (GPU kinds, rounds, modes: `RepoConfig.plan`).

    With `awaiting` (who pushed the head), the head is not trusted: the verification
    waits for a maintainer's approval and runs nothing (its check run offers Approve and
    verify); the older heads' verifications are superseded all the same, their runs
    cancelled. An approval verifies the head anew and supersedes the waiting one."""
    with svc.db.session() as s:
        prev = store.latest(s, repo, number)
        pr = store.pull_request(s, repo, number)
        if prev is None or pr is None:
            return None
        base = base_sha or prev.base_sha
        wanted = M.Measurement(
            id="",
            head_sha=head_sha,
            base_sha=base,
            gpus=tuple(sorted(g.upper() for g in plan.gpus)),
            how_many=(plan.rounds, plan.adaptive, plan.gpu_minutes),
            modes=tuple(sorted(plan.modes)),
            awaiting=awaiting is not None,
        )
        active = tuple(_measurement(v) for v in store.active(s, repo, number))
        decided = M.plan_head(active, wanted)
        if decided.join is None:
            asked = _next_of(prev, pr, wanted, trigger, requested_by, review_round)
            new = store.create(
                s, replace(asked, gpus=plan.gpus, modes=plan.modes, control=plan.control)
            )
            if awaiting is not None:
                store.first_step(s, new, M.AwaitApproval(head_sha, awaiting))
            new_id = new.id
    if decided.join is not None:
        # The same measurement is under way: whoever asks is told when it ends (an event,
        # so that an end written meanwhile tells them too).
        if requested_by:
            apply(svc, decided.join, M.AlsoAsked(requested_by))
        with svc.db.session() as s:
            return store.get(s, decided.join)

    def mark(s: Session, old: Verification) -> None:
        old.superseded_by = new_id

    for vid in decided.supersede:
        apply(svc, vid, M.Supersede(new_id, head_sha), mark)
    log.info("%s of %s#%s at %s (%s)", new.id, repo, number, head_sha[:10], trigger)
    if awaiting is not None:
        svc.queue.drain(new_id)
    elif start_now:
        svc.queue.start(new_id)
    return new


def _measurement(v: Verification) -> M.Measurement:
    return M.Measurement(
        id=v.id,
        head_sha=v.head_sha,
        base_sha=v.base_sha,
        gpus=tuple(sorted(v.gpus)),
        how_many=(v.rounds, bool(v.adaptive), v.gpu_budget_minutes),
        modes=tuple(sorted(v.modes)),
        awaiting=v.state == M.State.AWAITING_APPROVAL.value,
    )


def _next_of(
    prev: Verification,
    pr: PullRequest,
    wanted: M.Measurement,
    trigger: str,
    requested_by: str | None,
    review_round: bool,
) -> store.NewVerification:
    """A copy of the PR's last verification's candidate with the new head and base (GPU
    kinds and modes as `wanted` sorts them: the caller gives them in its own order)."""
    cand = dict(prev.candidate)
    cand["head"] = {
        **cand.get("head", {}),
        "sha": wanted.head_sha,
        "repo": pr.head_repo,
        "ref": pr.head_ref,
    }
    cand["base_sha"] = wanted.base_sha
    rounds, adaptive, gpu_minutes = wanted.how_many
    return store.NewVerification(
        repo=prev.repo,
        pr_number=pr.number,
        task=prev.task,
        base_sha=wanted.base_sha,
        head_sha=wanted.head_sha,
        head_repo=pr.head_repo,
        head_ref=pr.head_ref,
        gpus=list(wanted.gpus),
        rounds=rounds,
        adaptive=adaptive,
        gpu_minutes=gpu_minutes,
        modes=list(wanted.modes),
        candidate=cand,
        candidate_id=prev.candidate_id,
        trigger=trigger,
        requested_by=requested_by,
        review_round=review_round,
        installation_id=prev.installation_id,
        held=wanted.awaiting,
    )


def cancel_active(svc: StepPorts, repo: str, number: int, event: M.Cancel) -> list[str]:
    """Cancel every active verification of the PR; their ids."""
    with svc.db.session() as s:
        ids = [v.id for v in store.active(s, repo, number)]
    for vid in ids:
        apply(svc, vid, event)
    return ids


# ----------------------------------------------------------------------- the watch


def watch_push(
    svc: StepPorts,
    repo: str,
    *,
    before: str,
    after: str,
    branch: str,
    tip: str,
    config: RepoConfig,
    installation_id: int | None = None,
) -> list[str]:
    """Queue the watch's verifications of a push to the default branch (`after` against
    `before`), one per task; their ids. A watch verification of the same task still
    queued is superseded and its base kept, so the new one measures the whole range."""
    now = utcnow()
    with svc.db.session() as s:
        p = watch.plan(s, repo, config)
        if p is None:
            log.info("%s: push to %s not watched (off, or no task to measure)", repo, branch)
            return []
        if watch.measured(s, repo, after):
            log.info("%s: push of %s is watched already", repo, after[:10])
            return []
        how = config.plan(gpus=p.gpus)
        if not isinstance(how, Plan):
            log.warning("%s: push of %s not watched: %s", repo, after[:10], how)
            return []
        spent = watch.minutes_today(s, repo, now)
        skip: Reason | None = None
        if tip != after:  # the branch moved on: the push after this one covers its range
            if watch.covered(s, repo, after):
                return []
            skip = Reason(R.WATCH_BEHIND, {"tip": tip})
        elif spent >= config.watch.gpu_minutes_per_day:
            skip = Reason(
                R.WATCH_BUDGET,
                {"spent": f"{spent:.0f}", "budget": f"{config.watch.gpu_minutes_per_day:g}"},
            )
        made: list[tuple[str, list[str]]] = []
        skipped: list[str] = []
        for task in p.tasks:
            base, queued = watch.base_for(s, repo, task, before)
            new = fresh.verification(
                s,
                repo=repo,
                task=task,
                base=base,
                head=after,
                head_repo=repo,
                head_ref=branch,
                plan=how,
                modes=p.modes,
                title=fresh.title("watch", branch=branch, sha=after),
                trigger=triggers.of("watch", branch),
                installation_id=installation_id,
                watch=True,
            )
            if skip is not None:
                # Not measured, and said so: the next push measured starts from its base.
                store.first_step(s, new, M.Cancel(skip))
                log.warning("%s: push of %s not measured: %s", repo, after[:10], skip.code)
                skipped.append(new.id)
                continue
            made.append((new.id, [q.id for q in queued]))
    for vid in skipped:
        svc.queue.drain(vid)
    for new_id, older in made:

        def mark(s: Session, old: Verification, by: str = new_id) -> None:
            old.superseded_by = by

        for vid in older:
            apply(svc, vid, M.Supersede(new_id, after), mark)
        log.info("%s of %s: watching %s at %s", new_id, repo, branch, after[:10])
        svc.queue.start(new_id)
    return [new_id for new_id, _ in made]


@dataclass(frozen=True)
class PullFacts:
    """What a PR is, as GitHub said when the command came (the fields of
    `bot.github.api.Pull` a verification needs)."""

    number: int
    head_sha: str
    head_ref: str
    head_repo: str
    base_ref: str
    base_sha: str
    html_url: str


def track_pull(svc: StepPorts, repo: str, pull: PullFacts) -> None:
    """Track a PR rsi-bot did not open (nothing when it is tracked: two commands racing
    to track it both find it tracked)."""
    try:
        with svc.db.session() as s:
            store.track_pull(
                s,
                repo,
                pull.number,
                head_repo=pull.head_repo,
                head_ref=pull.head_ref,
                head_sha=pull.head_sha,
                base_ref=pull.base_ref,
                html_url=pull.html_url,
                opened_by_app=False,
            )
    except IntegrityError:
        log.info("%s#%s: tracked meanwhile by another command", repo, pull.number)


def verify_pull(
    svc: StepPorts,
    repo: str,
    pull: PullFacts,
    plan: Plan,
    *,
    config: RepoConfig,
    user: str,
    comment_id: int,
    approved: bool = True,
    start_now: bool = True,
) -> tuple[Verification, bool] | None:
    """Queue a verification of a tracked PR's head against its base branch's tip, on the
    first task the repository watches (approved by `user`, a writer, for the runners; held
    for a writer's approval when not `approved`), or join the one of that head under way;
    (it, whether joined), or None when there is no task to measure. The caller holds the
    PR's lease."""
    now = utcnow()
    with svc.db.session() as s:
        p = watch.plan(s, repo, config, even_if_off=True)
        if p is None:
            return None
        task = p.tasks[0]
        for v in store.active(s, repo, pull.number):
            if v.head_sha == pull.head_sha:
                joined = v.id
                break
        else:
            joined = None
    if joined is not None:
        apply(svc, joined, M.AlsoAsked(user))
        with svc.db.session() as s:
            found = store.get(s, joined)
            return (found, True) if found is not None else None
    with svc.db.session() as s:
        approvals.record_head(s, repo, pull.number, pull.head_sha, f"read:{comment_id}", now)
        if approved:
            approvals.approve(s, repo, pull.number, pull.head_sha, user)
        new = fresh.verification(
            s,
            repo=repo,
            task=task,
            base=pull.base_sha,
            head=pull.head_sha,
            head_repo=pull.head_repo,
            head_ref=pull.head_ref,
            plan=plan,
            modes=plan.modes,
            title=fresh.title("pull", number=pull.number),
            trigger=triggers.of("verify", user),
            pr_number=pull.number,
            requested_by=user,
            held=not approved,
        )
        if not approved:  # runs nothing until a writer approves this head
            store.first_step(s, new, M.AwaitApproval(pull.head_sha, ""))
        vid = new.id
    if not approved:
        svc.queue.drain(vid)
    elif start_now:
        svc.queue.start(vid)
    with svc.db.session() as s:
        made = store.get(s, vid)
        return (made, False) if made is not None else None
