"""The verification state machine: pure, so every case is a unit test.

`step(v, event)` returns the next snapshot and the effects to carry out. Effects are
plain values; `bot.verification.steps` stores them with the new state in one
transaction (an outbox) and carries them out afterwards, so a crash between the two
loses nothing and a transition is never half applied.

Per-GPU jobs move on their own: one GPU failing does not end the verification while
another still runs. When every job is over, the verification publishes the evidence of
the GPUs that produced any, or ends without evidence when none did.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from bot.verification import reasons as R
from bot.verification.reasons import Reason


class State(StrEnum):
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    INGESTING = "ingesting"
    PUBLISHED = "published"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    TIMED_OUT = "timed-out"
    # A head nobody trusted pushed: nothing runs until a maintainer approves that commit
    # (which starts a verification of its own and supersedes this one).
    AWAITING_APPROVAL = "awaiting-approval"

    @property
    def final(self) -> bool:
        return self in FINAL


FINAL = frozenset(
    {State.PUBLISHED, State.FAILED, State.CANCELLED, State.SUPERSEDED, State.TIMED_OUT}
)
ACTIVE = tuple(s for s in State if s not in FINAL)


class JobState(StrEnum):
    PENDING = "pending"  # not dispatched yet
    DISPATCHING = "dispatching"  # the dispatch is an effect waiting to be carried out
    DISPATCHED = "dispatched"  # GitHub accepted it
    RUNNING = "running"  # a runner picked it up
    COMPLETED = "completed"  # the run succeeded; its bundle is being taken in
    KEPT = "kept"  # its bundle is checked and kept: evidence for this GPU
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed-out"

    @property
    def over(self) -> bool:
        return self in JOB_OVER

    @property
    def live(self) -> bool:
        """A run may be going on GitHub: cancel it when the verification ends."""
        return self in (JobState.DISPATCHING, JobState.DISPATCHED, JobState.RUNNING)


JOB_OVER = frozenset({JobState.KEPT, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT})


@dataclass(frozen=True)
class Job:
    gpu: str
    state: JobState = JobState.PENDING
    run_id: int | None = None
    url: str | None = None
    reason: Reason | None = None


@dataclass(frozen=True)
class Verification:
    """What the machine needs to know of a verification (the database has the rest)."""

    state: State
    jobs: tuple[Job, ...]
    requested_by: str | None = None  # whoever asked to be told, space-separated
    reason: Reason | None = None
    # A merge to the default branch measured against its parent: no PR to open, comment
    # on or notify; its check run is `rsi/watch`, its result a point of its series.
    watch: bool = False
    # A step of the hunt for a regression's culprit (a watch verification too): no check
    # run on the commits it measures; the alert and the history page link its evidence.
    step: bool = False

    def job(self, gpu: str) -> Job | None:
        return next((j for j in self.jobs if j.gpu == gpu.upper()), None)

    def with_job(self, job: Job) -> Verification:
        return replace(self, jobs=tuple(job if j.gpu == job.gpu else j for j in self.jobs))


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Start:
    """The start step looked: `busy` of the repository's `max_running` are running, and
    whether the shared runner pool gives it its `turn` (bot/pool.py)."""

    busy: int = 0
    max_running: int = 1_000
    turn: bool = True


@dataclass(frozen=True)
class Dispatched:
    gpu: str
    run_id: int | None = None
    url: str | None = None


@dataclass(frozen=True)
class RunLocated:
    gpu: str
    run_id: int
    url: str | None = None


@dataclass(frozen=True)
class RunStarted:
    gpu: str


@dataclass(frozen=True)
class RunCompleted:
    gpu: str
    conclusion: str
    url: str | None = None
    step: str | None = None  # a failed run's failed step
    log: tuple[str, ...] = ()  # and the last lines of its job's log


@dataclass(frozen=True)
class BundleKept:
    gpu: str


@dataclass(frozen=True)
class BundleRejected:
    gpu: str
    reason: Reason


@dataclass(frozen=True)
class RunTimedOut:
    """The reconciler: this GPU's runner did not report back in time."""

    gpu: str
    minutes: int


@dataclass(frozen=True)
class EvidenceBuilt:
    verdict: str  # improved, regressed, no-change, inconclusive or invalid


@dataclass(frozen=True)
class EvidenceFailed:
    reason: Reason


@dataclass(frozen=True)
class Cancel:
    """`/rsi cancel`, or the PR was closed."""

    reason: Reason


@dataclass(frozen=True)
class Supersede:
    by: str
    sha: str


@dataclass(frozen=True)
class AwaitApproval:
    """The new verification is of a head `pusher` pushed that no trusted account vouches
    for: it waits, with a check run a maintainer can approve from, and runs nothing."""

    sha: str
    pusher: str


@dataclass(frozen=True)
class AlsoAsked:
    """`user` asked for the measurement this verification is: they are told when it
    ends (at once, if it has ended)."""

    user: str


@dataclass(frozen=True)
class StalePress:
    """`user` pressed Approve and verify on this verification's check run of `sha`, and
    the PR's head is `head` now: nothing is approved, and the user is told so (whatever
    state the verification is in)."""

    user: str
    sha: str
    head: str


@dataclass(frozen=True)
class HeadNotTip:
    """The PR shows `tip`, not the promoted `sha` (the branch moved, or the PR it names
    is elsewhere): evidence of `sha` would be of a commit the PR does not show."""

    sha: str
    tip: str
    branch: str

    @property
    def reason(self) -> Reason:
        return Reason(R.HEAD_NOT_TIP, {"sha": self.sha, "tip": self.tip, "branch": self.branch})


@dataclass(frozen=True)
class StepFailed:
    """An effect failed its last attempt: end rather than retry for ever."""

    step: str
    error: str
    attempts: int


Event = (
    Start
    | Dispatched
    | RunLocated
    | RunStarted
    | RunCompleted
    | BundleKept
    | BundleRejected
    | RunTimedOut
    | EvidenceBuilt
    | EvidenceFailed
    | Cancel
    | Supersede
    | HeadNotTip
    | StepFailed
    | AwaitApproval
    | StalePress
    | AlsoAsked
)

# --------------------------------------------------------------------------- effects


@dataclass(frozen=True)
class EnsurePullRequest:
    """Open the PR from the candidate's branch, or attach to the one that exists."""


@dataclass(frozen=True)
class EnsureCheckRun:
    pass


@dataclass(frozen=True)
class Dispatch:
    gpu: str


@dataclass(frozen=True)
class CheckRunInProgress:
    pass


@dataclass(frozen=True)
class CancelRun:
    gpu: str
    run_id: int | None


@dataclass(frozen=True)
class Ingest:
    gpu: str


@dataclass(frozen=True)
class BuildEvidence:
    pass


@dataclass(frozen=True)
class RecordHistory:
    """Add the watch's published result to the series of each fingerprint it measured."""


@dataclass(frozen=True)
class UpsertComment:
    """Render the PR's one evidence comment from what is true now (ledger, the latest
    good evidence, this verification's status) and put it in place."""


@dataclass(frozen=True)
class UpdatePrBody:
    pass


@dataclass(frozen=True)
class CompleteCheckRun:
    conclusion: str
    drop_actions: bool = False  # the run offered Approve and verify: take the button away


@dataclass(frozen=True)
class Notify:
    """One short reply that mentions whoever asked for the verification."""

    user: str


@dataclass(frozen=True)
class Reply:
    """One short reply that mentions `user`, saying `reason`."""

    user: str
    reason: Reason


@dataclass(frozen=True)
class EndVerification:
    """Logged and counted; the words reach GitHub through the other effects."""

    state: State
    reason: Reason | None = None


Effect = (
    EnsurePullRequest
    | EnsureCheckRun
    | Dispatch
    | CheckRunInProgress
    | CancelRun
    | Ingest
    | BuildEvidence
    | RecordHistory
    | UpsertComment
    | UpdatePrBody
    | CompleteCheckRun
    | Notify
    | Reply
    | EndVerification
)
# Effects without which a verification cannot go on: giving one up ends it (`StepFailed`).
# Any other effect that keeps failing (a check-run or comment update, a notification) is
# given up on its own: the verification's evidence does not depend on it.
ESSENTIAL = frozenset({"EnsurePullRequest", "Dispatch", "Ingest", "BuildEvidence"})
EFFECTS: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        EnsurePullRequest,
        EnsureCheckRun,
        Dispatch,
        CheckRunInProgress,
        CancelRun,
        Ingest,
        BuildEvidence,
        RecordHistory,
        UpsertComment,
        UpdatePrBody,
        CompleteCheckRun,
        Notify,
        Reply,
        EndVerification,
    )
}


def effect_to_json(e: Effect) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {}
    for name, value in vars(e).items():
        params[name] = value.to_json() if isinstance(value, Reason) else value
    return type(e).__name__, params


def effect_from_json(kind: str, params: dict[str, Any]) -> Effect:
    cls = EFFECTS[kind]
    if cls is EndVerification:
        return EndVerification(State(params["state"]), Reason.from_json(params.get("reason")))
    if cls is Reply:
        said = Reason.from_json(params["reason"])
        assert said is not None
        return Reply(params["user"], said)
    effect: Effect = cls(**params)
    return effect


# --------------------------------------------------------------------------- the step


def step(v: Verification, event: Event) -> tuple[Verification, tuple[Effect, ...]]:
    """The next snapshot and the effects. An event that does not apply in the current
    state (a late runner event after the end, a second start) changes nothing, except
    that a run learnt of for a job already over is cancelled (a dispatch that was under
    way when the verification was cancelled or superseded), and so is a second run for
    a job that has one (a dispatch repeated after a crash)."""
    if isinstance(event, Dispatched | RunLocated) and event.run_id is not None:
        j = v.job(event.gpu)
        if (
            j is not None
            and j.run_id != event.run_id
            and (j.run_id is not None or j.state.over or v.state.final)
        ):
            return v, (CancelRun(j.gpu, event.run_id),)
    if isinstance(event, AlsoAsked):
        return _also_asked(v, event.user)
    if isinstance(event, StalePress):
        said = Reason(R.APPROVAL_STALE, {"sha": event.sha, "head": event.head})
        return v, (Reply(event.user, said),)
    if v.state.final:
        return v, ()
    match event:
        case Start():
            return _start(v, event)
        case Dispatched():
            return _dispatched(v, event)
        case RunLocated():
            return _located(v, event)
        case RunStarted():
            return _run_started(v, event)
        case RunCompleted():
            return _run_completed(v, event)
        case BundleKept():
            return _bundle(v, event.gpu, JobState.KEPT, None)
        case BundleRejected():
            return _bundle(v, event.gpu, JobState.FAILED, event.reason)
        case RunTimedOut():
            return _timed_out(v, event)
        case EvidenceBuilt():
            return _built(v, event)
        case EvidenceFailed():
            if v.state != State.INGESTING:
                return v, ()
            return _end(v, State.FAILED, event.reason, conclusion="failure")
        case Cancel():
            # Whoever cancels is answered by the command; anyone else who asked is told.
            # A request ended before dispatch for its estimate was answered when asked.
            by = event.reason.params.get("user")
            told = event.reason.params.get("told") is True  # the command's reply said it
            return _end(v, State.CANCELLED, event.reason, but=by, notify=not told)
        case Supersede():
            reason = Reason(R.SUPERSEDED_BY, {"id": event.by, "sha": event.sha})
            return _end(v, State.SUPERSEDED, reason, comment=False, notify=False)
        case HeadNotTip():
            return _end(v, State.FAILED, event.reason)
        case AwaitApproval():
            return _await(v, event)
        case StepFailed():
            reason = Reason(
                R.STEP_FAILED,
                {"step": event.step, "error": event.error, "attempts": event.attempts},
            )
            return _end(v, State.FAILED, reason)
    raise TypeError(f"not an event: {event!r}")  # pragma: no cover - exhaustive above


def _await(v: Verification, e: AwaitApproval) -> tuple[Verification, tuple[Effect, ...]]:
    if v.state != State.QUEUED or any(j.state != JobState.PENDING for j in v.jobs):
        return v, ()  # only a verification that never started waits
    reason = Reason(R.AWAITING_APPROVAL, {"sha": e.sha, "pusher": e.pusher})
    v = replace(v, state=State.AWAITING_APPROVAL, reason=reason)
    return v, (EnsureCheckRun(), UpsertComment())


def _start(v: Verification, e: Start) -> tuple[Verification, tuple[Effect, ...]]:
    pending = [j for j in v.jobs if j.state == JobState.PENDING]
    if v.state != State.QUEUED or not pending or e.busy >= e.max_running or not e.turn:
        return v, ()  # already started, or over the GPU budget: the reconciler retries
    effects: list[Effect] = (
        []
        if v.step
        else [EnsureCheckRun()]
        if v.watch
        else [EnsurePullRequest(), EnsureCheckRun(), UpdatePrBody()]
    )
    for j in pending:
        v = v.with_job(replace(j, state=JobState.DISPATCHING))
        effects.append(Dispatch(j.gpu))
    return v, tuple(effects)


def _dispatched(v: Verification, e: Dispatched) -> tuple[Verification, tuple[Effect, ...]]:
    j = v.job(e.gpu)
    if j is None or j.state != JobState.DISPATCHING:
        return v, ()
    v = v.with_job(
        replace(j, state=JobState.DISPATCHED, run_id=e.run_id or j.run_id, url=e.url or j.url)
    )
    effects: tuple[Effect, ...] = ()
    if all(x.state != JobState.DISPATCHING for x in v.jobs):
        effects = (CheckRunInProgress(),)
    if v.state == State.QUEUED:
        v = replace(v, state=State.DISPATCHED)
    return v, effects


def _located(v: Verification, e: RunLocated) -> tuple[Verification, tuple[Effect, ...]]:
    j = v.job(e.gpu)
    if j is None or j.run_id is not None or j.state.over:
        return v, ()
    return v.with_job(replace(j, run_id=e.run_id, url=e.url or j.url)), (CheckRunInProgress(),)


def _run_started(v: Verification, e: RunStarted) -> tuple[Verification, tuple[Effect, ...]]:
    j = v.job(e.gpu)
    if j is None or j.state not in (JobState.DISPATCHING, JobState.DISPATCHED):
        return v, ()
    v = v.with_job(replace(j, state=JobState.RUNNING))
    if v.state in (State.QUEUED, State.DISPATCHED):
        v = replace(v, state=State.RUNNING)
    return v, ()


_RUN_ENDINGS = {
    "cancelled": (JobState.CANCELLED, R.RUN_CANCELLED),
    "timed_out": (JobState.TIMED_OUT, R.RUN_TIMED_OUT),
}


def _run_completed(v: Verification, e: RunCompleted) -> tuple[Verification, tuple[Effect, ...]]:
    j = v.job(e.gpu)
    if j is None or not j.state.live:
        return v, ()
    url = e.url or j.url
    if e.conclusion == "success":
        return v.with_job(replace(j, state=JobState.COMPLETED, url=url)), (Ingest(j.gpu),)
    state, code = _RUN_ENDINGS.get(e.conclusion, (JobState.FAILED, R.RUN_FAILED))
    params: dict[str, Any] = {"gpu": j.gpu, "url": url}
    if code == R.RUN_FAILED:
        params["conclusion"] = e.conclusion
    if e.step:
        params["step"] = e.step
    if e.log:
        params["log"] = list(e.log)
    return _settle(v.with_job(replace(j, state=state, url=url, reason=Reason(code, params))))


def _bundle(
    v: Verification, gpu: str, state: JobState, reason: Reason | None
) -> tuple[Verification, tuple[Effect, ...]]:
    j = v.job(gpu)
    if j is None or j.state != JobState.COMPLETED:
        return v, ()
    return _settle(v.with_job(replace(j, state=state, reason=reason)))


def _timed_out(v: Verification, e: RunTimedOut) -> tuple[Verification, tuple[Effect, ...]]:
    j = v.job(e.gpu)
    if j is None or not j.state.live:
        return v, ()
    reason = Reason(R.NO_REPORT, {"gpu": j.gpu, "minutes": e.minutes})
    v = v.with_job(replace(j, state=JobState.TIMED_OUT, reason=reason))
    v, effects = _settle(v)
    return v, (CancelRun(j.gpu, j.run_id), *effects)


def _settle(v: Verification) -> tuple[Verification, tuple[Effect, ...]]:
    """When every job is over: publish what was measured, or end without evidence."""
    if not all(j.state.over for j in v.jobs):
        return v, ()
    if any(j.state == JobState.KEPT for j in v.jobs):
        return replace(v, state=State.INGESTING), (BuildEvidence(),)
    over = [j for j in v.jobs if j.reason is not None]
    if len(over) == 1 and over[0].reason is not None:
        reason = over[0].reason
    else:
        reason = Reason(R.NO_EVIDENCE)
    state = State.FAILED
    for job_state, same in (
        (JobState.TIMED_OUT, State.TIMED_OUT),
        (JobState.CANCELLED, State.CANCELLED),
    ):
        if all(j.state == job_state for j in v.jobs):
            state = same
    return _end(v, state, reason)


# The check run's conclusion for each verdict of published evidence.
CONCLUSION = {
    "improved": "success",
    "regressed": "failure",
    "invalid": "failure",
    "no-change": "neutral",
    "inconclusive": "neutral",
}


def _built(v: Verification, e: EvidenceBuilt) -> tuple[Verification, tuple[Effect, ...]]:
    if v.state != State.INGESTING:
        return v, ()
    conclusion = CONCLUSION.get(e.verdict, "neutral")
    if conclusion == "success" and any(j.state != JobState.KEPT for j in v.jobs):
        # Partial results (a GPU failed, named in the title and the summary): a gain on
        # the other GPUs is not the success asked for; a regression measured stays one.
        conclusion = "neutral"
    v = replace(v, state=State.PUBLISHED, reason=None)
    if v.step:
        return v, (RecordHistory(), EndVerification(State.PUBLISHED))
    if v.watch:
        return v, (RecordHistory(), CompleteCheckRun(conclusion), EndVerification(State.PUBLISHED))
    effects: list[Effect] = [
        UpsertComment(),
        UpdatePrBody(),
        CompleteCheckRun(conclusion),
        EndVerification(State.PUBLISHED),
    ]
    effects += _told(v)
    return v, tuple(effects)


def _end(
    v: Verification,
    state: State,
    reason: Reason,
    *,
    conclusion: str = "neutral",
    comment: bool = True,
    notify: bool = True,
    but: str | None = None,
) -> tuple[Verification, tuple[Effect, ...]]:
    """End without (new) evidence: cancel what still runs, say why. The comment is
    rendered from everything known, so evidence published earlier stays. A verification
    that awaited approval takes its button away and always says so on the comment, whose
    top line said it awaited."""
    awaited = v.state == State.AWAITING_APPROVAL
    effects: list[Effect] = []
    for j in v.jobs:
        if j.state.live:
            effects.append(CancelRun(j.gpu, j.run_id))
            v = v.with_job(replace(j, state=JobState.CANCELLED))
        elif j.state in (JobState.PENDING, JobState.COMPLETED):
            v = v.with_job(replace(j, state=JobState.CANCELLED))
    v = replace(v, state=state, reason=reason)
    if not v.step:
        effects.append(CompleteCheckRun(conclusion, drop_actions=awaited))
    if (comment or awaited) and not v.watch:
        effects.append(UpsertComment())
    if not v.watch and not v.step:
        effects.append(UpdatePrBody())  # the body's "newer measurement under way" goes
    effects.append(EndVerification(state, reason))
    if notify and not v.watch:
        effects += _told(v, but)
    return v, tuple(effects)


def _also_asked(v: Verification, user: str) -> tuple[Verification, tuple[Effect, ...]]:
    """`requested_by` with `user` added (logins space-separated) while the column holds
    them (100 characters: two logins at least); one that asked after the end is told now."""
    names = (v.requested_by or "").split()
    if v.state.final:
        return v, (() if user in names else (Notify(user),))
    if user and user not in names and len(" ".join([*names, user])) <= 100:
        return replace(v, requested_by=" ".join([*names, user])), ()
    return v, ()


def _told(v: Verification, but: str | None = None) -> list[Effect]:
    """One reply to each login that asked (`requested_by`, space-separated), except
    `but`, who cancelled it and is answered by the command."""
    return [Notify(u) for u in (v.requested_by or "").split() if u != but]


# --------------------------------------------------------------------------- a PR's head


@dataclass(frozen=True)
class Measurement:
    """What a verification of a PR measures, as far as joining one goes: head, base, GPU
    kinds, how many rounds (fixed, or until decided with its cap and budget), modes, and
    whether it awaits approval (runs nothing)."""

    id: str
    head_sha: str
    base_sha: str
    gpus: tuple[str, ...]
    how_many: tuple[int, bool, float | None]
    modes: tuple[str, ...]
    awaiting: bool


@dataclass(frozen=True)
class HeadPlan:
    """A request to measure a PR's head: the active verification it joins (the same
    measurement), or a new one that supersedes every active verification of the PR."""

    join: str | None
    supersede: tuple[str, ...]


def plan_head(active: tuple[Measurement, ...], wanted: Measurement) -> HeadPlan:
    """Join the active verification that measures exactly what is wanted (one that runs
    never joins one that awaits approval, nor the other way round); else a new one
    supersedes them all, older heads and other measurements of this head alike."""
    same = (wanted.head_sha, wanted.base_sha, wanted.gpus, wanted.how_many, wanted.modes)
    for v in active:
        if (
            v.awaiting == wanted.awaiting
            and (
                v.head_sha,
                v.base_sha,
                v.gpus,
                v.how_many,
                v.modes,
            )
            == same
        ):
            return HeadPlan(join=v.id, supersede=())
    return HeadPlan(join=None, supersede=tuple(v.id for v in active))
