"""Verifications in the database: the one way to create one, transitions as
compare-and-set on a version, the effects outbox, the lease for carrying effects out,
and the queries the handlers and the reconciler need.

A transition reads the snapshot, asks the machine, and writes the new state with its
effects only if nobody moved the verification meanwhile; otherwise it reads again. Two
GPUs finishing at the same instant are therefore two transitions one after the other,
and the second sees both bundles.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, func, or_, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from bot import estimate, leases
from bot.db import Database
from bot.models import (
    ACTIVE_STATES,
    Effect,
    PullRequest,
    RunnerJob,
    Verification,
    utcnow,
)
from bot.verification import machine as M
from bot.verification.reasons import Reason

log = logging.getLogger(__name__)

Also = Callable[[Session, Verification], None]


class _Conflict(Exception):
    """Someone else moved the verification first: read it again."""


def new_id() -> str:
    return f"v-{secrets.token_hex(5)}"


@dataclass(frozen=True)
class NewVerification:
    repo: str
    task: str
    base_sha: str
    head_sha: str
    head_repo: str
    head_ref: str
    gpus: list[str]
    rounds: int  # a side; with `adaptive`, the most a side
    modes: list[str]
    candidate: dict[str, Any]
    trigger: str
    adaptive: bool = False  # rounds until decided
    gpu_minutes: float | None = None  # adaptive: the budget per GPU kind (None: no limit)
    pr_number: int | None = None
    candidate_id: str | None = None
    requested_by: str | None = None
    review_round: bool = False
    installation_id: int | None = None
    held: bool = False  # a head awaiting approval: see `first_step`
    watch: bool = False  # a merge to the default branch against its parent
    inquiry_id: int | None = None  # a step of the hunt for a regression's culprit
    control: bool | None = None  # with a null control (None: not known; for the estimate)


def create(s: Session, new: NewVerification) -> Verification:
    """The one way a verification comes to be: queued, one pending job per GPU kind."""
    gpus = list(dict.fromkeys(g.upper() for g in new.gpus))
    v = Verification(
        id=new_id(),
        candidate_id=new.candidate_id,
        repo=new.repo,
        pr_number=new.pr_number,
        task=new.task,
        base_sha=new.base_sha,
        head_sha=new.head_sha,
        head_repo=new.head_repo,
        head_ref=new.head_ref,
        gpus=gpus,
        rounds=new.rounds,
        adaptive=new.adaptive,
        gpu_budget_minutes=new.gpu_minutes,
        modes=list(new.modes),
        candidate=new.candidate,
        trigger=new.trigger,
        requested_by=new.requested_by,
        review_round=new.review_round,
        installation_id=new.installation_id,
        held_for_approval=new.held,
        watch=new.watch,
        inquiry_id=new.inquiry_id,
        state=M.State.QUEUED.value,
        version=0,
    )
    est = estimate.for_verification(s, v, control=new.control)
    v.estimate = est.to_json() if est is not None else None
    s.add(v)
    s.flush()
    for gpu in gpus:
        s.add(RunnerJob(verification_id=v.id, gpu=gpu, state=M.JobState.PENDING.value))
    s.flush()
    return v


def track_pull(
    s: Session,
    repo: str,
    number: int,
    *,
    head_repo: str,
    head_ref: str,
    head_sha: str,
    base_ref: str,
    html_url: str | None,
    opened_by_app: bool,
) -> None:
    """Track PR `number` of `repo` from now on (nothing when it is tracked already)."""
    if pull_request(s, repo, number) is not None:
        return
    s.add(
        PullRequest(
            repo=repo,
            number=number,
            head_repo=head_repo,
            head_ref=head_ref,
            head_sha=head_sha,
            base_ref=base_ref,
            html_url=html_url,
            opened_by_app=opened_by_app,
        )
    )
    s.flush()


def first_step(s: Session, v: Verification, event: M.Event) -> None:
    """The first transition of a verification created in this session, written with it
    (nobody else sees it before the commit: no compare-and-set), its effects included: a
    head awaiting approval is never queued, not for an instant the reconciler could see."""
    s.flush()
    s.expire(v, ["jobs"])
    after, effects = M.step(snapshot(v), event)
    _write(v, after)
    for e in effects:
        kind, params = M.effect_to_json(e)
        s.add(Effect(verification_id=v.id, kind=kind, params=params, attempts=0))


# ----------------------------------------------------------------------- snapshots


def snapshot(v: Verification) -> M.Verification:
    return M.Verification(
        state=M.State(v.state),
        jobs=tuple(
            M.Job(
                gpu=j.gpu,
                state=M.JobState(j.state),
                run_id=j.workflow_run_id,
                url=j.html_url,
                reason=Reason.from_json(j.end_reason),
            )
            for j in sorted(v.jobs, key=lambda j: j.gpu)
        ),
        requested_by=v.requested_by,
        reason=Reason.from_json(v.end_reason),
        watch=bool(v.watch),
        step=v.inquiry_id is not None,
    )


def _write(v: Verification, snap: M.Verification) -> None:
    now = utcnow()
    # The lease belongs to whoever carries out the effects: a transition never touches it.
    if snap.state in (M.State.DISPATCHED, M.State.RUNNING) and v.dispatched_at is None:
        v.dispatched_at = now
    v.state = snap.state.value
    v.end_reason = snap.reason.to_json() if snap.reason else None
    v.requested_by = snap.requested_by
    by_gpu = {j.gpu: j for j in v.jobs}
    for sj in snap.jobs:
        row = by_gpu[sj.gpu]
        if row.state != sj.state.value:
            # A run that starts before its dispatch is recorded is dispatched all the same.
            live = sj.state in (M.JobState.DISPATCHED, M.JobState.RUNNING)
            if live and row.dispatched_at is None:
                row.dispatched_at = now
            if sj.state.over or sj.state == M.JobState.COMPLETED:
                row.completed_at = row.completed_at or now
        row.state = sj.state.value
        row.workflow_run_id = sj.run_id
        row.html_url = sj.url
        row.end_reason = sj.reason.to_json() if sj.reason else None
    v.updated_at = now


def transition(
    db: Database, vid: str, event: M.Event, also: Also | None = None, *, tries: int = 20
) -> tuple[M.Verification | None, tuple[M.Effect, ...]]:
    """Apply one event: the new state, `also` (extra columns of the same change) and the
    effects are written together, or not at all. None when there is no such
    verification."""
    for attempt in range(tries):
        try:
            with db.session() as s:
                v = s.get(Verification, vid)
                if v is None:
                    return None, ()
                before = snapshot(v)
                after, effects = M.step(before, event)
                if after == before and not effects:
                    if also is not None:
                        also(s, v)
                    return before, ()
                moved = s.execute(
                    update(Verification)
                    .where(Verification.id == vid, Verification.version == v.version)
                    .values(version=v.version + 1)
                    .execution_options(synchronize_session=False)
                ).rowcount  # type: ignore[attr-defined]
                if not moved:
                    raise _Conflict
                v.version += 1
                _write(v, after)
                if also is not None:
                    also(s, v)
                for e in effects:
                    kind, params = M.effect_to_json(e)
                    s.add(Effect(verification_id=vid, kind=kind, params=params, attempts=0))
            if effects:
                log.debug("%s: %s → %s, %d effect(s)", vid, before.state, after.state, len(effects))
            return after, effects
        except _Conflict:
            pass
        except OperationalError as exc:  # SQLite: a stale read snapshot cannot write
            if "locked" not in str(exc) and "busy" not in str(exc).lower():
                raise
        time.sleep(min(0.01 * 2**attempt, 0.2))
    raise RuntimeError(f"{vid}: could not apply {type(event).__name__} after {tries} tries")


# ----------------------------------------------------------------------- effects


def pending_effects(s: Session, vid: str, now: dt.datetime) -> list[Effect]:
    return list(
        s.scalars(
            select(Effect)
            .where(Effect.verification_id == vid, Effect.done_at.is_(None))
            .order_by(Effect.id)
        )
    )


def with_pending_effects(s: Session, now: dt.datetime) -> list[str]:
    """Verifications with effects due and nobody carrying them out."""
    rows = s.execute(
        select(Effect.verification_id)
        .join(Verification, Verification.id == Effect.verification_id)
        .where(
            Effect.done_at.is_(None),
            (Effect.next_at.is_(None)) | (Effect.next_at <= now),
            (Verification.lease_until.is_(None)) | (Verification.lease_until < now),
        )
        .distinct()
    )
    return [r[0] for r in rows]


def claim(db: Database, vid: str, lease_s: int) -> str | None:
    """Take the verification's lease in a transaction of its own (visible while the
    effects are carried out); its token, or None when another worker holds it. An
    expired lease is the reconciler's cue."""
    return leases.take(db, Verification, Verification.id == vid, lease_s)


def renew(db: Database, vid: str, token: str, lease_s: int) -> bool:
    """Extend the lease before each effect; False when it was lost (it expired and
    another worker took it): then stop, that worker carries on."""
    return leases.renew(db, Verification, Verification.id == vid, token, lease_s)


def release(db: Database, vid: str, token: str) -> None:
    """Give the lease back, if it is still ours."""
    leases.give_back(db, Verification, Verification.id == vid, token)


# ----------------------------------------------------------------------- queries


def get(s: Session, vid: str) -> Verification | None:
    return s.get(Verification, vid)


def pull_request(s: Session, repo: str, number: int | None) -> PullRequest | None:
    if number is None:
        return None
    return s.scalar(
        select(PullRequest).where(PullRequest.repo == repo, PullRequest.number == number)
    )


def pulls_at(s: Session, repo: str, head_sha: str) -> list[PullRequest | None]:
    return list(
        s.scalars(
            select(PullRequest).where(PullRequest.repo == repo, PullRequest.head_sha == head_sha)
        )
    )


def of_pull(s: Session, repo: str, number: int) -> list[Verification]:
    """Every verification of the PR, oldest first."""
    return list(
        s.scalars(
            select(Verification)
            .where(Verification.repo == repo, Verification.pr_number == number)
            .order_by(Verification.created_at, Verification.id)
        )
    )


def latest(s: Session, repo: str, number: int) -> Verification | None:
    rows = of_pull(s, repo, number)
    return rows[-1] if rows else None


def latest_published(s: Session, repo: str, number: int) -> Verification | None:
    rows = [v for v in of_pull(s, repo, number) if v.state == M.State.PUBLISHED.value]
    return max(rows, key=lambda v: v.published_at or v.created_at) if rows else None


def active(s: Session, repo: str, number: int) -> list[Verification]:
    return [v for v in of_pull(s, repo, number) if v.state in ACTIVE_STATES]


def _queued_requests(repo: str) -> Select[Any]:
    """Requested verifications of `repo` that wait (the watch's and the hunt's steps are
    not requests)."""
    return select(func.count(Verification.id)).where(
        Verification.repo == repo,
        Verification.state == M.State.QUEUED.value,
        Verification.watch.is_(False),
        Verification.inquiry_id.is_(None),
    )


def queued_requests(s: Session, repo: str) -> int:
    return int(s.scalar(_queued_requests(repo)) or 0)


def queued_before(s: Session, v: Verification) -> int:
    """Requested verifications of `v`'s repository queued before it."""
    n = s.scalar(
        _queued_requests(v.repo).where(
            or_(
                Verification.created_at < v.created_at,
                and_(Verification.created_at == v.created_at, Verification.id < v.id),
            ),
        )
    )
    return int(n or 0)


def running_count(s: Session, repo: str, other_than: str) -> int:
    """Active verifications of the repository with a run on a GPU or on its way there."""
    live = (M.JobState.DISPATCHING.value, M.JobState.DISPATCHED.value, M.JobState.RUNNING.value)
    n = s.scalar(
        select(func.count(func.distinct(Verification.id)))
        .select_from(Verification)
        .join(RunnerJob)
        .where(
            Verification.repo == repo,
            Verification.id != other_than,
            Verification.state.in_(ACTIVE_STATES),
            RunnerJob.state.in_(live),
        )
    )
    return int(n or 0)


def queued(s: Session) -> list[str]:
    return list(
        s.scalars(select(Verification.id).where(Verification.state == M.State.QUEUED.value))
    )


def overdue_jobs(s: Session, dispatched_before: dt.datetime) -> list[tuple[str, str]]:
    """(verification, GPU) of live jobs dispatched before the limit."""
    rows = s.execute(
        select(RunnerJob.verification_id, RunnerJob.gpu, RunnerJob.dispatched_at)
        .join(Verification)
        .where(
            Verification.state.in_(ACTIVE_STATES),
            RunnerJob.state.in_((M.JobState.DISPATCHED.value, M.JobState.RUNNING.value)),
        )
    )
    out = []
    for vid, gpu, at in rows:
        if at is not None and aware(at) < dispatched_before:
            out.append((vid, gpu))
    return out


def unlocated_jobs(
    s: Session, dispatched_before: dt.datetime
) -> list[tuple[str, str, dt.datetime]]:
    """(verification, GPU, dispatched at) of dispatched jobs whose run is not known yet
    (GitHub Enterprise returns no run id and its `requested` event may be lost)."""
    rows = s.execute(
        select(RunnerJob.verification_id, RunnerJob.gpu, RunnerJob.dispatched_at)
        .join(Verification)
        .where(
            Verification.state.in_(ACTIVE_STATES),
            RunnerJob.state == M.JobState.DISPATCHED.value,
            RunnerJob.workflow_run_id.is_(None),
        )
    )
    return [
        (vid, gpu, aware(at))
        for vid, gpu, at in rows
        if at is not None and aware(at) < dispatched_before
    ]


def job_by_run_id(s: Session, run_id: int) -> RunnerJob | None:
    return s.scalar(select(RunnerJob).where(RunnerJob.workflow_run_id == run_id))


def aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
