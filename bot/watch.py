"""The watch of a repository's default branch: which pushes are measured, on what, and how
a measured push becomes a point of its series.

A push to the default branch (a merge, a squash, a rebase of several commits) is measured
head against the commit before the push, on the tasks, GPU kinds and modes of the
`watch:` section of `.github/rsi.yml`, with the same runner, design and evidence as a PR.
A push that finds the watch's previous verification of a task still queued replaces it
and measures the whole range (the newest head against the oldest base): pushes that come
faster than the runners are batched. A push is not measured when the branch has moved on
by the time it is handled, nor past the day's GPU minutes; it is recorded as such
(`watch-behind`, `watch-budget`), and the next push measured covers its range. A forced
push is not measured (the commit before it left the branch).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot import estimate
from bot.history import NewPoint, SeriesKey, add_to, open_series, point_of
from bot.models import PullRequest, Series, Verification
from bot.repo_config import RepoConfig
from evidence.changes import ChangePolicy, DetectorState, Point, Step, update
from evidence.metrics import BY_NAME

log = logging.getLogger(__name__)

Z95 = 1.959964
# End reasons of a push the watch did not measure: the next one measured covers its range.
SKIPPED = frozenset({"watch-budget", "watch-behind", "over-budget"})
# States whose runners may still spend GPU minutes, and ends that came after they did.
HOLDING = frozenset({"queued", "dispatched", "running", "ingesting"})
ENDED_AFTER_DISPATCH = frozenset({"failed", "timed-out", "cancelled", "superseded"})


@dataclass(frozen=True)
class Plan:
    """What one push is measured on."""

    tasks: list[str]
    gpus: list[str]
    modes: list[str]


def plan(s: Session, repo: str, config: RepoConfig, *, even_if_off: bool = False) -> Plan | None:
    """The watch's tasks, GPU kinds and modes for `repo`; None when it is off (unless
    `even_if_off`: `/rsi verify` uses its tasks) or there is no task to measure (none
    configured and no candidate measured yet)."""
    w = config.watch
    if not w.enabled and not even_if_off:
        return None
    tasks = list(w.tasks) or _known_tasks(s, repo)
    if not tasks:
        return None
    return Plan(tasks, list(w.gpus or config.gpus), list(w.modes or config.modes))


def _known_tasks(s: Session, repo: str) -> list[str]:
    rows = s.scalars(
        select(Verification.task)
        .where(Verification.repo == repo, Verification.watch.is_(False))
        .distinct()
        .order_by(Verification.task)
    )
    return list(rows)


def base_for(s: Session, repo: str, task: str, before: str) -> tuple[str, list[Verification]]:
    """The base a push's verification of `task` measures from, and the watch's queued
    verifications it replaces: a queued one's base (the range grows), else that of a push
    the day's budget did not cover (so the next one measured covers it), else `before`."""
    queued = list(
        s.scalars(
            select(Verification)
            .where(
                Verification.repo == repo,
                Verification.task == task,
                Verification.watch.is_(True),
                Verification.inquiry_id.is_(None),
                Verification.state == "queued",
            )
            .order_by(Verification.created_at)
        )
    )
    if queued:
        return queued[0].base_sha, queued
    last = s.scalars(
        select(Verification)
        .where(
            Verification.repo == repo,
            Verification.task == task,
            Verification.watch.is_(True),
            Verification.inquiry_id.is_(None),
            Verification.state != "superseded",
        )
        .order_by(Verification.created_at.desc(), Verification.id.desc())
        .limit(1)
    ).first()
    if last is not None and (last.end_reason or {}).get("code") in SKIPPED:
        return last.base_sha, []
    return before, []


def covered(s: Session, repo: str, head: str) -> bool:
    """Whether a later push is measured from `head` already (its push came first)."""
    found = s.scalar(
        select(Verification.id).where(
            Verification.repo == repo,
            Verification.base_sha == head,
            Verification.watch.is_(True),
            Verification.inquiry_id.is_(None),
        )
    )
    return found is not None


def measured(s: Session, repo: str, head: str) -> bool:
    """Whether a push of `head` is measured or being measured already (a redelivery)."""
    found = s.scalar(
        select(Verification.id).where(
            Verification.repo == repo,
            Verification.head_sha == head,
            Verification.watch.is_(True),
            Verification.inquiry_id.is_(None),
            Verification.state != "superseded",
        )
    )
    return found is not None


def minutes_today(s: Session, repo: str, now: dt.datetime) -> float:
    """GPU minutes the watch of `repo` spent or holds in the last day (`spent`): its
    pushes' verifications and its inquiries' steps."""
    since = now - dt.timedelta(days=1)
    return spent(
        s.scalars(
            select(Verification)
            .where(
                Verification.repo == repo,
                Verification.watch.is_(True),
                Verification.created_at >= since,
            )
            .order_by(Verification.created_at)
        )
    )


def verify_minutes(
    s: Session, repo: str, number: int, now: dt.datetime, but: str | None = None
) -> tuple[float, float]:
    """GPU minutes `/rsi verify` spent or holds on PRs rsi-bot did not open (`spent`):
    on PR `number`, and on all of `repo`'s in the last day; `but`: a verification not
    counted (the one being weighed)."""
    since = now - dt.timedelta(days=1)
    adopted = select(Verification).join(
        PullRequest,
        (PullRequest.repo == Verification.repo) & (PullRequest.number == Verification.pr_number),
    )
    adopted = adopted.where(
        Verification.repo == repo,
        PullRequest.opened_by_app.is_(False),
    ).order_by(Verification.created_at)
    if but is not None:
        adopted = adopted.where(Verification.id != but)
    on_pr = spent(s.scalars(adopted.where(Verification.pr_number == number)))
    today = spent(s.scalars(adopted.where(Verification.created_at >= since)))
    return on_pr, today


def spent(rows: Iterable[Verification]) -> float:
    """GPU minutes of `rows` (oldest first), every GPU kind, both sides and start-ups: as
    the bundles recorded them for a published verification; for one queued or under way,
    or one that ended after dispatch without a bundle (its runners ran all the same), the
    most it may spend: its cap, else its estimate's likely minutes, else what the last
    measured one spent. Counted from the moment it is queued, so requests made together
    cannot each find the whole budget free."""
    total, last = 0.0, 0.0
    for v in rows:
        done = _recorded_minutes(v.headline)
        if done is not None:
            total, last = total + done, done
        elif v.state in HOLDING or (v.state in ENDED_AFTER_DISPATCH and v.dispatched_at):
            total += holds(v, last)
    return total


def holds(v: Verification, last: float = 0.0) -> float:
    """The GPU minutes a verification not yet measured is counted at (see `spent`)."""
    if v.gpu_budget_minutes is not None:
        return v.gpu_budget_minutes * len(v.gpus or [])
    est = estimate.Estimate.from_json(v.estimate)
    return est.typical if est is not None else last


def _recorded_minutes(headline: dict[str, Any] | None) -> float | None:
    found = [
        float(m["total"])
        for h in (headline or {}).values()
        if isinstance(m := (h or {}).get("gpu_minutes") or {}, dict)
        and isinstance(m.get("total"), int | float)
    ]
    return sum(found) if found else None


@dataclass(frozen=True)
class Suspect:
    """A change the detector raised an alarm on, or suspects (past its confirm level):
    its side and the commits whose points carry it (for a suspicion, the strongest)."""

    series: Series
    side: str
    commits: tuple[str, ...]
    alarm: bool


def record(s: Session, v: Verification, doc: dict[str, Any], now: dt.datetime) -> list[Suspect]:
    """Each GPU kind's headline of the published evidence `doc` as a point of its series,
    fed to the series' change detector; the changes it alarmed on or suspects."""
    raised: list[Suspect] = []
    bundles = {j.gpu: j.bundle_key for j in v.jobs}
    for gpu, g in (doc.get("gpus") or {}).items():
        h = (g or {}).get("headline") or {}
        if not isinstance(h.get("delta_pct"), int | float):
            continue
        fp = (g.get("fingerprint") or {}).get("head") or {}
        key = SeriesKey(
            repo=v.repo,
            task=v.task,
            gpu=str(gpu),
            driver=str(fp.get("driver") or "unknown"),
            image=str(fp.get("image_digest") or fp.get("image") or "none"),
            mode=str(h.get("mode") or ""),
            concurrency=int(h.get("concurrency") or 0),
            metric=str(h.get("metric") or ""),
        )
        pairs = int(g.get("rounds_per_side") or 0)
        levels = _levels(doc, str(gpu), key)
        pr, title, others = merged_pr(v.attribution)
        series = open_series(s, key, now)
        if point_of(s, series, v.head_sha, v.id) is not None:
            continue  # recorded (and fed to the detector) by an earlier try of this effect
        step = _detect(series, key, v.head_sha, h, pairs)
        alarm = step.alarms[0] if step.alarms else None
        raised += [Suspect(series, a.side, a.commits, True) for a in step.alarms]
        raised += [Suspect(series, side, (c,), False) for side, c in step.confirm]
        point = NewPoint(
            sha=v.head_sha,
            parent_sha=v.base_sha,
            verification_id=v.id,
            change_pct=float(h["delta_pct"]),
            ci_low_pct=_num(h.get("ci_low_pct")),
            ci_high_pct=_num(h.get("ci_high_pct")),
            verdict=str(h.get("verdict") or ""),
            pairs=pairs or None,
            bundle_key=bundles.get(str(gpu)),
            change_point=alarm.side if alarm else None,
            pr_number=pr,
            pr_title=title,
            other_prs=others,
            head_value=levels[1],
            parent_value=levels[0],
        )
        add_to(s, series, point, now)
    return raised


def merged_pr(attribution: Any) -> tuple[int | None, str | None, int | None]:
    """The PR a measured push merged, from the range's attribution (the merged PRs it
    holds): the last merged one, its title, and how many others the range held."""
    entries = [
        e
        for e in attribution or []
        if isinstance(e, dict) and isinstance(e.get("number"), int) and e["number"] > 0
    ]
    if not entries:
        return None, None, None
    last = max(enumerate(entries), key=lambda ie: (str(ie[1].get("merged_at") or ""), ie[0]))[1]
    return int(last["number"]), str(last.get("title") or "")[:300] or None, len(entries) - 1


def _detect(series: Series, key: SeriesKey, sha: str, h: dict[str, Any], pairs: int) -> Step:
    """Feed the point to its series' detector (kept with the series); what it did. Its
    estimate is log(head/parent) oriented so that higher is better, its standard error
    read off the 95% interval."""
    state = DetectorState.from_record(series.detector) if series.detector else DetectorState()
    sign = -1.0 if (m := BY_NAME.get(key.metric)) is not None and m.better == "lower" else 1.0
    delta, lo, hi = _num(h.get("delta_pct")), _num(h.get("ci_low_pct")), _num(h.get("ci_high_pct"))
    usable = delta is not None and lo is not None and hi is not None and min(lo, hi) > -100
    se = None
    estimate = 0.0
    if usable and delta is not None and lo is not None and hi is not None and pairs >= 2:
        estimate = sign * math.log1p(delta / 100)
        se = (math.log1p(hi / 100) - math.log1p(lo / 100)) / (2 * Z95) or None
    step = update(state, Point(sha, estimate, se, math.inf, pairs), ChangePolicy())
    series.detector = state.record()
    return step


def study_row(
    doc: dict[str, Any], gpu: str, mode: str, concurrency: int, metric: str
) -> dict[str, Any] | None:
    """The evidence's study row of one GPU kind, mode, concurrency and metric: a series'
    own row (the headline may be another)."""
    want = (gpu, mode, concurrency, metric)
    for r in doc.get("study") or []:
        if (
            isinstance(r, dict)
            and (
                r.get("gpu"),
                r.get("mode"),
                r.get("concurrency"),
                r.get("metric"),
            )
            == want
        ):
            return r
    return None


def _levels(doc: dict[str, Any], gpu: str, key: SeriesKey) -> tuple[float | None, float | None]:
    """The parent's and the head's mean of the headline's row in that session."""
    r = study_row(doc, gpu, key.mode, key.concurrency, key.metric)
    return (_num(r.get("base")), _num(r.get("head"))) if r else (None, None)


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None
