"""The shared runner pool: whether a queued verification's turn has come.

Several repositories, of several installations, share one App and one pool of GPU
runners. Each repository caps its own work (`budget.max_running`); the operator caps what
one installation's repositories hold at once and what each runner kind (H100, H200)
runs at once (`RSI_INSTALLATION_MAX_RUNNING`, `RSI_POOL_MAX_RUNNING`). Where a cap is
reached, queued work waits and is taken in order: requests (a maintainer's command, a
candidate, a push) before the watch of main, the watch before a hunt's steps; among
requests, the repository holding fewest runners first (so one repository flooding the
queue gets its share and no more), then a maintainer's before a push, then the oldest.
Work that its own repository's cap holds back does not count ahead of anyone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bot import triggers
from bot.models import ACTIVE_STATES, RunnerJob, Verification
from bot.verification import machine as M

CLASSES = {
    "reverify": 0,
    "verify": 0,
    "approve": 0,
    "rerun": 0,
    "intake": 1,
    "push": 1,
    "push-after-review": 1,
    "push-awaiting": 1,
    "watch": 2,
    "confirm": 3,
    "bisect": 3,
}
"""Who waits for whom: lower goes first (a hunt's steps last: they wait for a budget anyway)."""
_LIVE = (M.JobState.DISPATCHING.value, M.JobState.DISPATCHED.value, M.JobState.RUNNING.value)


@dataclass(frozen=True)
class Caps:
    """The operator's caps (None: none)."""

    installation: int | None = None
    kinds: tuple[tuple[str, int], ...] = ()

    @classmethod
    def parse(cls, installation: int | None, kinds: str) -> Caps:
        """`kinds` as `H100=4,H200=8` (an empty string: no cap)."""
        out: list[tuple[str, int]] = []
        for part in filter(None, (p.strip() for p in kinds.split(","))):
            name, eq, value = part.partition("=")
            if not eq or not value.strip().isdigit() or not name.strip():
                raise ValueError(f"{part!r}: expected KIND=N, e.g. H100=4")
            out.append((name.strip().upper(), int(value)))
        return cls(installation, tuple(out))


@dataclass(frozen=True)
class _Queued:
    """What the turn of a queued verification depends on (read as columns, not rows)."""

    id: str
    repo: str
    trigger: str
    inquiry_id: int | None
    installation_id: int | None
    gpus: list[str] | None
    created_at: dt.datetime


def class_of(v: Verification | _Queued) -> int:
    kind = (triggers.parse(v.trigger) or ("", ""))[0]
    if v.inquiry_id is not None:
        return CLASSES["bisect"]
    return CLASSES.get(kind, 1)


def waits(
    s: Session,
    v: Verification,
    caps: Caps,
    repo_cap: Callable[[str], int],
) -> str | None:
    """None when `v` may take its runners now; else what it waits for (`repository`,
    `installation` or a runner kind). `repo_cap(repo)`: that repository's
    `budget.max_running`. Of each repository's queued work only as much as its cap
    leaves room for can stand ahead, so a repository's flood of thousands costs each
    start one read of the queue, not thousands of comparisons."""
    running = _running(s)
    held: dict[str, int] = {}
    by_installation: dict[int | None, int] = {}
    for r in running:
        held[r.repo] = held.get(r.repo, 0) + 1
        by_installation[r.installation_id] = by_installation.get(r.installation_id, 0) + 1
    if held.get(v.repo, 0) >= repo_cap(v.repo):
        return "repository"
    mine = _key(_row(v), held)
    room: dict[str, int] = {}
    ahead: list[_Queued] = []
    for q in _queued(s):
        if q.repo not in room:  # what its own repository's cap lets start
            room[q.repo] = max(0, repo_cap(q.repo) - held.get(q.repo, 0))
        if room[q.repo] == 0 or q.id == v.id or _key(q, held) >= mine:
            continue
        most, own = caps.installation, q.installation_id
        full = most is not None and own is not None and by_installation.get(own, 0) >= most
        if room[q.repo] > 0 and not full:
            room[q.repo] -= 1
            ahead.append(q)
    if caps.installation is not None and v.installation_id is not None:
        mates = by_installation.get(v.installation_id, 0)
        mates += sum(1 for q in ahead if q.installation_id == v.installation_id)
        if mates >= caps.installation:
            return "installation"
    for kind, cap in caps.kinds:
        if kind in (v.gpus or []):
            taken = _kind_jobs(s, kind) + sum(1 for q in ahead if kind in (q.gpus or []))
            if taken >= cap:
                return kind
    return None


def _row(v: Verification) -> _Queued:
    return _Queued(v.id, v.repo, v.trigger, v.inquiry_id, v.installation_id, v.gpus, v.created_at)


def _queued(s: Session) -> list[_Queued]:
    """Every queued verification, oldest first."""
    cols = (
        Verification.id,
        Verification.repo,
        Verification.trigger,
        Verification.inquiry_id,
        Verification.installation_id,
        Verification.gpus,
        Verification.created_at,
    )
    q = select(*cols).where(Verification.state == M.State.QUEUED.value)
    rows = s.execute(q.order_by(Verification.created_at, Verification.id)).all()
    return [_Queued(*row) for row in rows]


def _key(v: _Queued, held: dict[str, int]) -> tuple[int, int, int, str, str]:
    """Background work (the watch, then a hunt) after every request a person or a
    candidate made; among those requests, the repository holding fewest runners first,
    then a maintainer's before a push, then the oldest: a repository flooding the queue
    with commands still waits behind another's first push."""
    cls = class_of(v)
    tier = 0 if cls <= CLASSES["push"] else cls
    return (tier, held.get(v.repo, 0), cls, v.created_at.isoformat(), v.id)


def _running(s: Session) -> Sequence[Verification]:
    """Active verifications with a run on a GPU or on its way there."""
    ids = select(RunnerJob.verification_id).where(RunnerJob.state.in_(_LIVE))
    return s.scalars(
        select(Verification).where(Verification.state.in_(ACTIVE_STATES), Verification.id.in_(ids))
    ).all()


def _kind_jobs(s: Session, kind: str) -> int:
    n = s.scalar(
        select(func.count())
        .select_from(RunnerJob)
        .join(Verification)
        .where(
            RunnerJob.gpu == kind,
            RunnerJob.state.in_(_LIVE),
            Verification.state.in_(ACTIVE_STATES),
        )
    )
    return int(n or 0)
