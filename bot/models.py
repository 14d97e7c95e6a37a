"""Persistent state. The database is the truth about every verification: the queue only
carries hints, so a lost job is found again by the reconciler (see `bot/reconcile.py`)."""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from bot import clock
from bot.verification.machine import ACTIVE, FINAL, JobState, State

ACTIVE_STATES = tuple(s.value for s in ACTIVE)
FINAL_STATES = tuple(s.value for s in FINAL)


def utcnow() -> dt.datetime:
    return clock.utcnow()


class Base(DeclarativeBase):
    # GitHub ids (comments, check runs, workflow runs) pass 2**31: BigInteger throughout.
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        dt.datetime: DateTime(timezone=True),
    }


class Delivery(Base):
    """A webhook delivery or an intake request, kept before it is acknowledged."""

    __tablename__ = "deliveries"
    id: Mapped[str] = mapped_column(String(100), primary_key=True)
    source: Mapped[str] = mapped_column(String(20))  # github | intake
    event: Mapped[str] = mapped_column(String(60))
    action: Mapped[str | None] = mapped_column(String(60))
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    payload: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20), default="queued")  # queued|done|failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Held by the job processing it; a re-queued copy finds it claimed and does nothing.
    claimed_until: Mapped[dt.datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    received_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    processed_at: Mapped[dt.datetime | None]


class Installation(Base):
    __tablename__ = "installations"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    account: Mapped[str] = mapped_column(String(200))
    target_type: Mapped[str | None] = mapped_column(String(40))
    repositories: Mapped[list[Any]] = mapped_column(JSON, default=list)
    active: Mapped[bool] = mapped_column(default=True)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class PullRequest(Base):
    __tablename__ = "pull_requests"
    __table_args__ = (UniqueConstraint("repo", "number"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    number: Mapped[int] = mapped_column(Integer)
    head_repo: Mapped[str] = mapped_column(String(200))
    head_ref: Mapped[str] = mapped_column(String(255))
    head_sha: Mapped[str] = mapped_column(String(64))
    base_ref: Mapped[str] = mapped_column(String(255))
    html_url: Mapped[str | None] = mapped_column(String(500))
    comment_id: Mapped[int | None] = mapped_column(BigInteger)
    # Opened by the App: no comment of its own can predate the one it writes.
    opened_by_app: Mapped[bool] = mapped_column(default=False)
    state: Mapped[str] = mapped_column(String(20), default="open")
    # Set by a review that requests changes: the next pushes are review rounds.
    review_pending: Mapped[bool] = mapped_column(default=False)
    # The `.github/rsi.yml` problem last reported on this PR (reported once, not per event).
    config_error: Mapped[str | None] = mapped_column(Text)
    # Held while a command is acted on: commands on one PR take turns (bot/pull_lease.py).
    lease_until: Mapped[dt.datetime | None]
    lease_owner: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class PullWrite(Base):
    """The PR's outbox: what a handler says on a PR (a reply, a reaction), stored with
    the state it answers and carried out after it, retried like a verification's effects."""

    __tablename__ = "pull_writes"
    __table_args__ = (Index("ix_pull_writes_pending", "repo", "pr_number", "done_at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    pr_number: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_at: Mapped[dt.datetime | None]
    claimed_until: Mapped[dt.datetime | None]
    done_at: Mapped[dt.datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Verification(Base):
    __tablename__ = "verifications"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    candidate_id: Mapped[str | None] = mapped_column(String(200))
    repo: Mapped[str] = mapped_column(String(200), index=True)
    pr_number: Mapped[int | None] = mapped_column(Integer)
    task: Mapped[str] = mapped_column(String(100))
    base_sha: Mapped[str] = mapped_column(String(64))
    head_sha: Mapped[str] = mapped_column(String(64))
    head_repo: Mapped[str] = mapped_column(String(200))
    head_ref: Mapped[str] = mapped_column(String(255))
    gpus: Mapped[list[Any]] = mapped_column(JSON)
    # Rounds a side; when `adaptive`, the most a side (pairs of rounds until decided,
    # within `gpu_budget_minutes` per GPU kind when that is set).
    rounds: Mapped[int] = mapped_column(Integer)
    adaptive: Mapped[bool] = mapped_column(default=False, server_default=false())
    gpu_budget_minutes: Mapped[float | None] = mapped_column(Float)
    modes: Mapped[list[Any]] = mapped_column(JSON)
    candidate: Mapped[dict[str, Any]] = mapped_column(JSON)
    trigger: Mapped[str] = mapped_column(String(200), default="intake")
    review_round: Mapped[bool] = mapped_column(default=False)
    # Created for a head that awaited a maintainer's approval: it never ran, and is no
    # evidence that its head is trusted (an approval is).
    held_for_approval: Mapped[bool] = mapped_column(default=False, server_default=false())
    # A merge to the default branch measured against its parent (the watch), not a PR.
    watch: Mapped[bool] = mapped_column(default=False, server_default=false())
    # A step of the hunt for a regression's culprit (bot.inquiries): measured, not a point.
    inquiry_id: Mapped[int | None] = mapped_column(Integer)
    requested_by: Mapped[str | None] = mapped_column(String(100))
    superseded_by: Mapped[str | None] = mapped_column(String(40))
    state: Mapped[str] = mapped_column(String(20), default=State.QUEUED.value, index=True)
    # Bumped by every transition: a transition is a compare-and-set on it.
    version: Mapped[int] = mapped_column(Integer, default=0)
    # Why it ended without (new) evidence: {"code", "params"} (bot.verification.reasons).
    end_reason: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The verdict's one-line reason, from the evidence.
    reason: Mapped[str | None] = mapped_column(Text)
    # Other PRs merged in the compared range, as the evidence lists them.
    attribution: Mapped[list[Any] | None] = mapped_column(JSON)
    verdict: Mapped[str | None] = mapped_column(String(20))
    claim_status: Mapped[str | None] = mapped_column(String(20))
    headline: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The GPU minutes it was expected to spend when created (bot/estimate.py; None: no
    # recorded run of its task to estimate from).
    estimate: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    check_run_id: Mapped[int | None] = mapped_column(BigInteger)
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    lease_until: Mapped[dt.datetime | None]
    # Who holds the lease (a random token per claim): only they renew or release it.
    lease_owner: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    dispatched_at: Mapped[dt.datetime | None]
    published_at: Mapped[dt.datetime | None]
    jobs: Mapped[list[RunnerJob]] = relationship(
        back_populates="verification", order_by="RunnerJob.gpu"
    )


class RunnerJob(Base):
    """One GPU's workflow run of a verification."""

    __tablename__ = "runner_jobs"
    __table_args__ = (UniqueConstraint("verification_id", "gpu"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    verification_id: Mapped[str] = mapped_column(ForeignKey("verifications.id"))
    gpu: Mapped[str] = mapped_column(String(20))
    state: Mapped[str] = mapped_column(String(20), default=JobState.PENDING.value)
    end_reason: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Set before the dispatch request: after a crash, look for the run before asking again.
    dispatch_requested_at: Mapped[dt.datetime | None]
    workflow_run_id: Mapped[int | None] = mapped_column(BigInteger, index=True)
    html_url: Mapped[str | None] = mapped_column(String(500))
    conclusion: Mapped[str | None] = mapped_column(String(40))
    bundle_key: Mapped[str | None] = mapped_column(String(500))
    dispatched_at: Mapped[dt.datetime | None]
    completed_at: Mapped[dt.datetime | None]
    verification: Mapped[Verification] = relationship(back_populates="jobs")


class Effect(Base):
    """The outbox: effects of a transition, stored with it and carried out after it."""

    __tablename__ = "effects"
    __table_args__ = (Index("ix_effects_pending", "verification_id", "done_at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    verification_id: Mapped[str] = mapped_column(ForeignKey("verifications.id"))
    kind: Mapped[str] = mapped_column(String(40))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_at: Mapped[dt.datetime | None]
    done_at: Mapped[dt.datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    verification: Mapped[Verification] = relationship()


class Approval(Base):
    """A maintainer's approval to run one exact head SHA on the GPU runners (never sticky:
    a later push needs a new one)."""

    __tablename__ = "approvals"
    __table_args__ = (UniqueConstraint("repo", "pr_number", "sha"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    pr_number: Mapped[int] = mapped_column(Integer)
    sha: Mapped[str] = mapped_column(String(64))
    approved_by: Mapped[str] = mapped_column(String(100))
    approved_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class PullHead(Base):
    """A head SHA a tracked PR had, from the moment the App learnt of it (the delivery of
    the push that made it, or the App's own read): what a maintainer saw when writing a
    comment is the newest head known before it. One row per delivery, so a head pushed
    again (A, B, A) is dated again."""

    __tablename__ = "pull_heads"
    __table_args__ = (
        Index("ix_pull_heads_pr", "repo", "pr_number", "seen_at"),
        UniqueConstraint("repo", "pr_number", "sha", "delivery_id"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    pr_number: Mapped[int] = mapped_column(Integer)
    sha: Mapped[str] = mapped_column(String(64))
    # The delivery that told (or `read:<time>` for the App's own reads of the PR).
    delivery_id: Mapped[str] = mapped_column(String(100))
    seen_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class PullCommand(Base):
    """A `/rsi` command taken from a PR comment: each comment acts once (a replay with a
    new delivery id finds its row); a refusal is dated, so a user is told once an hour."""

    __tablename__ = "pull_commands"
    __table_args__ = (
        UniqueConstraint("repo", "comment_id"),
        Index("ix_pull_commands_user", "repo", "pr_number", "login", "at"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    pr_number: Mapped[int] = mapped_column(Integer)
    comment_id: Mapped[int] = mapped_column(BigInteger)
    delivery_id: Mapped[str] = mapped_column(String(100))
    login: Mapped[str] = mapped_column(String(100))
    # Set when the App refused the user: their permission then (never a writer's level).
    refused: Mapped[str | None] = mapped_column(String(20))
    at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class BaselineMeasurement(Base):
    """Every measurement of `main` (the base side), the history the engine compares to."""

    __tablename__ = "baseline_measurements"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    task: Mapped[str] = mapped_column(String(100), index=True)
    gpu: Mapped[str] = mapped_column(String(20))
    mode: Mapped[str] = mapped_column(String(20))
    concurrency: Mapped[int] = mapped_column(Integer)
    metric: Mapped[str] = mapped_column(String(60))
    value: Mapped[float] = mapped_column(Float)
    sha: Mapped[str] = mapped_column(String(64))
    verification_id: Mapped[str] = mapped_column(String(40))
    fingerprint: Mapped[dict[str, Any]] = mapped_column(JSON)
    measured_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Series(Base):
    """Main's history under one fingerprint: repository, task, GPU model, driver, runner
    image, mode, concurrency and metric. A new driver or image closes the series and
    opens another (`successor_id`): levels across them are not comparable."""

    __tablename__ = "series"
    __table_args__ = (Index("ix_series_repo_task", "repo", "task"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    task: Mapped[str] = mapped_column(String(100))
    gpu: Mapped[str] = mapped_column(String(40))
    driver: Mapped[str] = mapped_column(String(60))
    image: Mapped[str] = mapped_column(String(200))
    mode: Mapped[str] = mapped_column(String(20))
    concurrency: Mapped[int] = mapped_column(Integer)
    metric: Mapped[str] = mapped_column(String(60))
    opened_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    closed_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    # Why it closed, in words: "driver 550.54 → 560.28".
    closed_reason: Mapped[str | None] = mapped_column(String(300))
    successor_id: Mapped[int | None] = mapped_column(ForeignKey("series.id"), nullable=True)
    # The level shift to the successor: one commit's mean measured in both (its last
    # point's head here, the successor's first point's parent there), successor / this − 1
    # in percent. Levels of two sessions: as noisy as the machine, never an alert.
    shift_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    shift_sha: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The change detector's state over the series' points (evidence.changes.DetectorState).
    detector: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class SeriesPoint(Base):
    """One measured merge of a series: its paired change against its first parent."""

    __tablename__ = "series_points"
    __table_args__ = (
        UniqueConstraint("series_id", "sha", "verification_id"),
        Index("ix_series_points_series", "series_id", "measured_at"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    series_id: Mapped[int] = mapped_column(ForeignKey("series.id"))
    sha: Mapped[str] = mapped_column(String(64))
    parent_sha: Mapped[str] = mapped_column(String(64))
    pr_number: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The merged PR's title, and how many other PRs the measured range held.
    pr_title: Mapped[str | None] = mapped_column(String(300), nullable=True)
    other_prs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    verification_id: Mapped[str] = mapped_column(String(40))
    # head / parent − 1, in percent, with its 95% interval (None: no interval).
    change_pct: Mapped[float] = mapped_column(Float)
    ci_low_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    ci_high_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    verdict: Mapped[str] = mapped_column(String(20))
    pairs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The head's and the parent's mean in that session (levels move between sessions).
    head_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    parent_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    # "regression" or "improvement" where the detector put a change point.
    change_point: Mapped[str | None] = mapped_column(String(20))
    bundle_key: Mapped[str | None] = mapped_column(String(300))
    measured_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Inquiry(Base):
    """The hunt for the commit behind a regression the watch's detector raised: the
    suspect range measured again (confirm), then bisected under a GPU budget, then the
    culprit alerted once. Each step is a paired verification (`verifications.inquiry_id`);
    `steps` records what each found, so the hunt resumes where it was after a restart."""

    __tablename__ = "inquiries"
    __table_args__ = (UniqueConstraint("series_id", "side", "good_sha", "bad_sha"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200), index=True)
    task: Mapped[str] = mapped_column(String(100))
    series_id: Mapped[int] = mapped_column(ForeignKey("series.id"))
    side: Mapped[str] = mapped_column(String(20))
    # The suspect point's range: its parent (last good) and its commit (first bad).
    good_sha: Mapped[str] = mapped_column(String(64))
    bad_sha: Mapped[str] = mapped_column(String(64))
    # confirming, bisecting, alerted, cleared (the rerun did not confirm it), unresolved.
    state: Mapped[str] = mapped_column(String(20), index=True)
    # The range's commits, oldest first (without good, with bad), once confirmed.
    commits: Mapped[list[Any] | None] = mapped_column(JSON)
    lo_sha: Mapped[str] = mapped_column(String(64))  # measured good so far
    hi_sha: Mapped[str] = mapped_column(String(64))  # measured bad so far
    steps: Mapped[list[Any]] = mapped_column(JSON, default=list)
    verification_id: Mapped[str | None] = mapped_column(String(40))  # the step under way
    culprit_sha: Mapped[str | None] = mapped_column(String(64))
    culprit_pr: Mapped[int | None] = mapped_column(Integer, index=True)
    # Why it stopped short of a culprit, as a reason record (bot.verification.reasons).
    end_reason: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    alerted_at: Mapped[dt.datetime | None]
    # A maintainer's answer to the alert: justified or false-alarm.
    triage: Mapped[str | None] = mapped_column(String(20))
    triaged_by: Mapped[str | None] = mapped_column(String(100))
    triaged_at: Mapped[dt.datetime | None]
    # What the suspect merge's `rsi/watch` check run was last told of the hunt.
    check_said: Mapped[str | None] = mapped_column(String(300), nullable=True)
    # `/rsi bisect` on the alert issue of a hunt left unresolved: when, by whom, and the
    # bisection steps already spent then (the resumed hunt has a step budget of its own).
    resumed_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    resumed_by: Mapped[str | None] = mapped_column(String(100), nullable=True)
    resumed_steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Held while a worker advances it (`bot.leases`): one decision at a time.
    lease_until: Mapped[dt.datetime | None]
    lease_owner: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Lock(Base):
    """A named lease for a decision no two workers may take at once anywhere: whether
    a queued verification may start is read from what runs, so two starts decided
    together could both find the last free runner (`bot.verification.steps.start`)."""

    __tablename__ = "locks"

    name: Mapped[str] = mapped_column(String(50), primary_key=True)
    lease_until: Mapped[dt.datetime | None]
    lease_owner: Mapped[str | None] = mapped_column(String(32))
