"""Main's history: a series per fingerprint, the points each measured merge adds, and
what the history page and its exports show of them.

A point is a merge's *paired* change against its first parent, measured in one session:
levels from different sessions are not comparable on shared machines (two an hour apart
differ 2×), so the series' course is the chain of those changes, an index that starts at
100 with the series' first parent. A new driver or runner image closes the series and
opens another: the same commit measured under both sizes the shift, and it is not an alert.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot import repeats
from bot.models import Series, SeriesPoint

MODES = ("streaming", "non-streaming")
Z95 = repeats.Z95


@dataclass(frozen=True)
class SeriesKey:
    """What makes two measurements of main comparable."""

    repo: str
    task: str
    gpu: str
    driver: str
    image: str
    mode: str
    concurrency: int
    metric: str


@dataclass(frozen=True)
class NewPoint:
    """A measured merge, as the watch hands it over."""

    sha: str
    parent_sha: str
    verification_id: str
    change_pct: float
    ci_low_pct: float | None
    ci_high_pct: float | None
    verdict: str
    pr_number: int | None = None
    pr_title: str | None = None
    other_prs: int | None = None  # other PRs the measured range held
    pairs: int | None = None
    head_value: float | None = None
    parent_value: float | None = None
    bundle_key: str | None = None
    change_point: str | None = None  # "regression" / "improvement": the detector's alarm


def open_series(s: Session, key: SeriesKey, now: dt.datetime) -> Series:
    """The open series of `key`, opened now if there is none. An open series of the same
    repository, task, GPU, mode, concurrency and metric under another driver or image is
    closed, naming what changed, and points to the new one."""
    same_place = select(Series).where(
        Series.repo == key.repo,
        Series.task == key.task,
        Series.gpu == key.gpu,
        Series.mode == key.mode,
        Series.concurrency == key.concurrency,
        Series.metric == key.metric,
        Series.closed_at.is_(None),
    )
    found = None
    for series in s.scalars(same_place.with_for_update()):
        if (series.driver, series.image) == (key.driver, key.image):
            found = series
    if found is not None:
        return found
    new = Series(
        repo=key.repo,
        task=key.task,
        gpu=key.gpu,
        driver=key.driver,
        image=key.image,
        mode=key.mode,
        concurrency=key.concurrency,
        metric=key.metric,
        opened_at=now,
    )
    s.add(new)
    s.flush()
    for old in s.scalars(same_place.where(Series.id != new.id)):
        old.closed_at, old.successor_id = now, new.id
        old.closed_reason = _what_changed(old, key)
    return new


def _what_changed(old: Series, key: SeriesKey) -> str:
    """Why a series closed, as data the page words: `[["driver", old, new], ...]`."""
    parts = []
    if old.driver != key.driver:
        parts.append(["driver", old.driver, key.driver])
    if old.image != key.image:
        parts.append(["image", old.image, key.image])
    return json.dumps(parts)[:300]


def changes_of(closed_reason: str | None) -> list[tuple[str, str, str]]:
    """(what, old, new) of each change that closed a series; [] for a reason stored as
    words before it was data (the page shows those as they are)."""
    try:
        parts = json.loads(closed_reason or "")
    except ValueError:
        return []
    if not isinstance(parts, list):
        return []
    return [
        (str(p[0]), str(p[1]), str(p[2]))
        for p in parts
        if isinstance(p, list) and len(p) == 3 and p[0] in ("driver", "image")
    ]


def add_point(s: Session, key: SeriesKey, point: NewPoint, now: dt.datetime) -> SeriesPoint:
    """Record a measured merge in its series (opened or switched as `open_series` says);
    the same merge and verification recorded again is the row already there."""
    series = open_series(s, key, now)
    return point_of(s, series, point.sha, point.verification_id) or add_to(s, series, point, now)


def size_shift(s: Session, series: Series, point: SeriesPoint) -> None:
    """When `point` opens `series` after a driver or image change closed its predecessor,
    size the level shift by the commit measured in both: the predecessor's last point of
    that commit as head, this point's parent."""
    old = s.scalar(select(Series).where(Series.successor_id == series.id))
    if old is None or old.shift_pct is not None or not point.parent_value:
        return
    before = s.scalar(
        select(SeriesPoint.head_value)
        .where(SeriesPoint.series_id == old.id, SeriesPoint.sha == point.parent_sha)
        .order_by(SeriesPoint.id.desc())
        .limit(1)
    )
    if before:
        old.shift_pct = 100.0 * (point.parent_value / before - 1.0)
        old.shift_sha = point.parent_sha


def point_of(s: Session, series: Series, sha: str, verification_id: str) -> SeriesPoint | None:
    """The point of `sha` measured by `verification_id` in `series`, if recorded."""
    return s.scalar(
        select(SeriesPoint).where(
            SeriesPoint.series_id == series.id,
            SeriesPoint.sha == sha,
            SeriesPoint.verification_id == verification_id,
        )
    )


def add_to(s: Session, series: Series, point: NewPoint, now: dt.datetime) -> SeriesPoint:
    """A new point of `series` (the caller checked it is not there: `point_of`); the
    first of a series that replaced another sizes the level shift between them."""
    row = SeriesPoint(series_id=series.id, measured_at=now, **point.__dict__)
    s.add(row)
    s.flush()
    size_shift(s, series, row)
    return row


# --- what the page and the exports show ---------------------------------------------------


class FilterError(ValueError):
    """A filter of the history page that cannot be understood; the message says which."""


@dataclass(frozen=True)
class Filter:
    """The page's filters, from its query string; all optional."""

    task: str | None = None
    gpu: str | None = None
    mode: str | None = None
    concurrency: int | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> Filter:
        """The filters in `args`; `FilterError` naming the first that is not one."""
        name = re.compile(r"^[A-Za-z0-9._+-]{1,100}$")
        for field_name in ("task", "gpu"):
            value = args.get(field_name) or None
            if value is not None and not name.match(value):
                raise FilterError(f"{field_name} must be a name of letters, digits and ._+-")
        mode = args.get("mode") or None
        if mode is not None and mode not in MODES:
            raise FilterError(f"mode must be one of {', '.join(MODES)}")
        conc = args.get("concurrency") or None
        if conc is not None and not (conc.isascii() and conc.isdigit() and len(conc) <= 6):
            raise FilterError("concurrency must be a whole number")
        return cls(
            task=args.get("task") or None,
            gpu=args.get("gpu") or None,
            mode=mode,
            concurrency=int(conc) if conc is not None else None,
            since=_date(args, "since"),
            until=_date(args, "until"),
        )

    def query_args(self) -> dict[str, str]:
        """The filters as query arguments again (for export links)."""
        out = {
            "task": self.task,
            "gpu": self.gpu,
            "mode": self.mode,
            "concurrency": None if self.concurrency is None else str(self.concurrency),
            "since": None if self.since is None else self.since.date().isoformat(),
            "until": None
            if self.until is None
            else (self.until - dt.timedelta(days=1)).date().isoformat(),
        }
        return {k: v for k, v in out.items() if v is not None}


FIRST_DAY = dt.date(2000, 1, 1)
LAST_DAY = dt.date(2999, 12, 31)


def _date(args: Mapping[str, str], name: str) -> dt.datetime | None:
    value = args.get(name) or None
    if value is None:
        return None
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        raise FilterError(f"{name} must be a date, YYYY-MM-DD") from None
    if not FIRST_DAY <= day <= LAST_DAY:  # the day after 9999-12-31 is no date at all
        raise FilterError(f"{name} must be a date from {FIRST_DAY} to {LAST_DAY}")
    start = dt.datetime.combine(day, dt.time(), dt.UTC)
    return start + dt.timedelta(days=1) if name == "until" else start


@dataclass(frozen=True)
class Measurement:
    """One paired measurement of a merge: the watch's, or the hunt's confirming rerun."""

    verification_id: str
    change_pct: float
    ci_low_pct: float | None
    ci_high_pct: float | None
    verdict: str
    pairs: int | None
    bundle_key: str | None
    measured_at: dt.datetime


@dataclass(frozen=True)
class PointView:
    """A merge as shown: one point however often it was measured. Its change pools the
    measurements (inverse-variance, in log space; the latest verdict, since a rerun
    confirms or clears the first); the index chains the pooled changes (first parent =
    100), with a 95% band that widens by each merge's uncertainty (None once a merge
    without an interval was chained)."""

    sha: str
    parent_sha: str
    pr_number: int | None
    pr_title: str | None
    other_prs: int | None
    verification_id: str  # the latest measurement's
    change_pct: float
    ci_low_pct: float | None
    ci_high_pct: float | None
    verdict: str
    pairs: int | None
    head_value: float | None
    parent_value: float | None
    change_point: str | None
    bundle_key: str | None
    measured_at: dt.datetime  # the first measurement's: when the merge was measured
    index: float
    band_low: float | None = None
    band_high: float | None = None
    measurements: tuple[Measurement, ...] = ()
    pooled: bool = False  # the change pools several of them (else the latest stands)

    @property
    def confirmed(self) -> bool:
        """Measured more than once (a confirming rerun)."""
        return len(self.measurements) > 1


@dataclass
class SeriesView:
    id: int
    key: SeriesKey
    opened_at: dt.datetime
    closed_at: dt.datetime | None
    closed_reason: str | None
    successor_id: int | None
    changes: list[tuple[str, str, str]] = field(default_factory=list)  # (what, old, new)
    points: list[PointView] = field(default_factory=list)
    shift_pct: float | None = None  # the level shift to the successor (one commit in both)
    shift_sha: str | None = None


def history(s: Session, repo: str, f: Filter) -> list[SeriesView]:
    """Every series of `repo` the filter selects, open ones first, with their points in
    the order they were measured; the index chains every point of the series (the
    filter's dates select which are shown, not where the chain starts)."""
    q = select(Series).where(Series.repo == repo)
    if f.task:
        q = q.where(Series.task == f.task)
    if f.gpu:
        q = q.where(Series.gpu == f.gpu)
    if f.mode:
        q = q.where(Series.mode == f.mode)
    if f.concurrency is not None:
        q = q.where(Series.concurrency == f.concurrency)
    q = q.order_by(
        Series.closed_at.is_not(None), Series.task, Series.gpu, Series.mode, Series.concurrency
    )
    views = [_view(x) for x in s.scalars(q)]
    points = s.scalars(
        select(SeriesPoint)
        .where(SeriesPoint.series_id.in_([v.id for v in views]))
        .order_by(SeriesPoint.series_id, SeriesPoint.measured_at, SeriesPoint.id)
    )
    merges: dict[int, dict[str, list[SeriesPoint]]] = {}
    for p in points:  # a merge measured again joins its first measurement
        merges.setdefault(p.series_id, {}).setdefault(p.sha, []).append(p)
    for v in views:
        level, var = 100.0, 0.0
        for rows in merges.get(v.id, {}).values():
            change, lo, hi, var_log = pooled(rows)
            level *= 1 + change / 100
            var = math.inf if var_log is None else var + var_log
            when = _aware(rows[0].measured_at)
            if (f.since and when < f.since) or (f.until and when >= f.until):
                continue
            v.points.append(_point(rows, change, lo, hi, level, var))
    return views


def used(rows: list[SeriesPoint]) -> list[SeriesPoint]:
    """The measurements a merge's point rests on: those of the first's parent, pooled when
    they agree within their noise; when the latest disagrees with the first (the hunt's
    rerun cleared what the watch saw, or confirmed it much larger), the latest alone, as
    the hunt itself trusts the rerun."""
    same = [r for r in rows if r.parent_sha == rows[0].parent_sha]
    if len(same) < 2:
        return same
    first, last = _log_se(same[0]), _log_se(same[-1])
    if first is None or last is None or repeats.agree(first, last):
        return same
    return [same[-1]]


def pooled(rows: list[SeriesPoint]) -> tuple[float, float | None, float | None, float | None]:
    """The change of a merge from the measurements it rests on (`used`): inverse-variance
    mean of log(1 + change), its 95% interval and the log variance; with a measurement
    lacking an interval, the latest one's change and no variance."""
    same = used(rows)
    found = [_log_se(r) for r in same]
    logs = [x for x in found if x is not None]
    if len(logs) < len(same):
        last = same[-1]
        return last.change_pct, last.ci_low_pct, last.ci_high_pct, None
    if len(same) == 1:
        r = same[0]
        return r.change_pct, r.ci_low_pct, r.ci_high_pct, logs[0][1] ** 2
    est, se = repeats.pool(logs)
    half = Z95 * se
    return _pct(est), _pct(est - half), _pct(est + half), se**2


def _pct(log: float) -> float:
    return round(100.0 * math.expm1(log), 4)


def _log_se(r: SeriesPoint) -> repeats.LogSe | None:
    return repeats.log_se(r.change_pct, r.ci_low_pct, r.ci_high_pct)


def _aware(when: dt.datetime) -> dt.datetime:
    """SQLite gives back naive datetimes; they were stored in UTC."""
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def _view(x: Series) -> SeriesView:
    key = SeriesKey(x.repo, x.task, x.gpu, x.driver, x.image, x.mode, x.concurrency, x.metric)
    closed = None if x.closed_at is None else _aware(x.closed_at)
    return SeriesView(
        x.id,
        key,
        _aware(x.opened_at),
        closed,
        x.closed_reason,
        x.successor_id,
        changes=changes_of(x.closed_reason),
        shift_pct=x.shift_pct,
        shift_sha=x.shift_sha,
    )


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _point(
    rows: list[SeriesPoint],
    change: float,
    lo: float | None,
    hi: float | None,
    index: float,
    var: float,
) -> PointView:
    first, last = rows[0], rows[-1]
    shown = used(rows)
    half = Z95 * math.sqrt(var) if math.isfinite(var) and var < 4.0 else None
    return PointView(
        sha=first.sha,
        parent_sha=first.parent_sha,
        pr_number=next((r.pr_number for r in rows if r.pr_number), None),
        pr_title=next((r.pr_title for r in rows if r.pr_title), None),
        other_prs=first.other_prs,
        verification_id=last.verification_id,
        change_pct=change,
        ci_low_pct=lo,
        ci_high_pct=hi,
        verdict=shown[-1].verdict,
        pairs=sum(r.pairs or 0 for r in shown) or None,
        head_value=first.head_value,
        parent_value=first.parent_value,
        change_point=next((r.change_point for r in rows if r.change_point), None),
        bundle_key=last.bundle_key,
        measured_at=_aware(first.measured_at),
        index=index,
        band_low=_finite(None if half is None else index * math.exp(-half)),
        band_high=_finite(None if half is None else index * math.exp(half)),
        pooled=len(shown) > 1,
        measurements=tuple(
            Measurement(
                r.verification_id,
                r.change_pct,
                r.ci_low_pct,
                r.ci_high_pct,
                r.verdict,
                r.pairs,
                r.bundle_key,
                _aware(r.measured_at),
            )
            for r in rows
        ),
    )


EXPORT_FIELDS = (
    "series_id",
    "task",
    "gpu",
    "driver",
    "image",
    "mode",
    "concurrency",
    "metric",
    "series_closed",
    "sha",
    "parent_sha",
    "pr_number",
    "pr_title",
    "other_prs",
    "verification_id",
    "measurements",
    "measured_at",
    "change_pct",
    "ci_low_pct",
    "ci_high_pct",
    "verdict",
    "pairs",
    "head_value",
    "parent_value",
    "index",
    "index_low",
    "index_high",
    "change_point",
    "bundle",
)
"""One exported row per merge: its series, its (pooled) measurement, the index with its
band, and where the latest measurement's bundle is."""

BundleUrl = Callable[[str, str | None], str | None]
"""(verification id, bundle key) → where the point's evidence can be fetched, or None."""


def export_rows(views: Iterable[SeriesView], bundle_url: BundleUrl) -> Iterator[dict[str, object]]:
    """Every point shown, flat, in `EXPORT_FIELDS` order; `bundle_url(verification_id,
    bundle_key)` says where its evidence can be fetched."""
    for v in views:
        for p in v.points:
            yield {
                "series_id": v.id,
                "task": v.key.task,
                "gpu": v.key.gpu,
                "driver": v.key.driver,
                "image": v.key.image,
                "mode": v.key.mode,
                "concurrency": v.key.concurrency,
                "metric": v.key.metric,
                "series_closed": v.closed_at is not None,
                "sha": p.sha,
                "parent_sha": p.parent_sha,
                "pr_number": p.pr_number,
                "pr_title": p.pr_title,
                "other_prs": p.other_prs,
                "verification_id": p.verification_id,
                "measurements": len(p.measurements),
                "measured_at": p.measured_at.isoformat(),
                "change_pct": p.change_pct,
                "ci_low_pct": p.ci_low_pct,
                "ci_high_pct": p.ci_high_pct,
                "verdict": p.verdict,
                "pairs": p.pairs,
                "head_value": p.head_value,
                "parent_value": p.parent_value,
                "index": round(p.index, 6),
                "index_low": None if p.band_low is None else round(p.band_low, 6),
                "index_high": None if p.band_high is None else round(p.band_high, 6),
                "change_point": p.change_point,
                "bundle": bundle_url(p.verification_id, p.bundle_key),
            }


# --- the chart: an SVG drawn on the server, no script --------------------------------------

WIDTH, HEIGHT, PAD = 720, 200, 28
HOVER_POINTS = 400
"""Up to this many merges, every one has a hover target with its details; past it only the
marked ones (the line is still one polyline)."""


@dataclass(frozen=True)
class Chart:
    """An index line with its band, the points (marked ones coloured) and date ticks,
    ready for the page."""

    width: int
    height: int
    line: str  # the polyline's points
    band: str  # the band's polygon ("" where unknown)
    dots: list[tuple[float, float, str, PointView]]  # x, y, kind ("" unmarked), the point
    ticks: list[tuple[float, str]]  # x, date
    low: float
    high: float


def chart(points: list[PointView]) -> Chart | None:
    """The index of a series over its measured merges (x: merge order, dates below), or
    None without points. Non-finite levels are left out of the line."""
    shown = [(i, p) for i, p in enumerate(points) if math.isfinite(p.index)]
    if not shown:
        return None
    levels = [p.index for _, p in shown]
    levels += [b for _, p in shown for b in (p.band_low, p.band_high) if b is not None]
    levels = [x for x in levels if math.isfinite(x)]
    low, high = min(levels), max(levels)
    if math.isclose(low, high):
        low, high = low - 1, high + 1
    span_x = max(len(points) - 1, 1)
    bottom = HEIGHT - PAD - 12  # room for the dates

    def xy(i: int, level: float) -> tuple[float, float]:
        x = PAD + 18 + (WIDTH - 2 * PAD - 18) * i / span_x
        y = bottom - (bottom - PAD / 2) * (level - low) / (high - low)
        return round(x, 1), round(y, 1)

    coords = [xy(i, p.index) for i, p in shown]
    line = " ".join(f"{x},{y}" for x, y in coords)
    banded = [(i, p) for i, p in shown if p.band_low is not None and p.band_high is not None]
    upper = [xy(i, p.band_high) for i, p in banded if p.band_high is not None]
    lower = [xy(i, p.band_low) for i, p in banded if p.band_low is not None]
    band = " ".join(f"{x},{y}" for x, y in [*upper, *reversed(lower)]) if len(banded) > 1 else ""
    every = len(points) <= HOVER_POINTS
    dots = []
    for (x, y), (_, p) in zip(coords, shown, strict=True):
        kind = p.change_point or (p.verdict if p.verdict in ("improved", "regressed") else "")
        if kind or every:
            dots.append((x, y, kind, p))
    step = max(1, math.ceil(len(shown) / 6))
    marks = [*shown[::step], shown[-1]] if len(shown) > 1 else shown
    ticks: list[tuple[float, str]] = []
    for i, p in marks:  # one tick a day at most
        day = p.measured_at.strftime("%Y-%m-%d")
        if not ticks or ticks[-1][1] != day:
            ticks.append((xy(i, low)[0], day))
    return Chart(WIDTH, HEIGHT, line, band, dots, ticks, low, high)
