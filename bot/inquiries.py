"""The hunt for the commit behind a regression of the default branch.

The watch's change detector raises an alarm on a series (`bot.watch`); its suspect is
the point with the most evidence for the regression: one push, measured against the
commit before it, which may hold several merges (batched pushes). An inquiry then:

1. **confirms**: a fresh paired verification of the same range (last good against first
   bad, interleaved, with its own sequential stop); only a `regressed` verdict goes on,
   `no-change` or `improved` clears the alarm (a false alarm of the detector, counted in
   the ledger), anything else leaves it unresolved and says why;
2. **bisects** a range of k > 1 commits along first parents: ⌈log₂ k⌉ paired
   verifications, each of the known-good commit against the middle one, each with its own
   stop and the repository's GPU-minute cap, and every one inside the watch's daily
   budget (a step waits for the budget, it is not skipped);
3. **alerts once**: a comment on the culprit's PR naming its author, the
   `perf-regression` label, and an issue when `watch.alert_issue` asks for one, written
   to the outbox in the transaction that marks the inquiry alerted.

Every step is a verification like any other (`inquiry_id` set): the runners, the design
and the evidence are the same, and the state lives in the database, so a restart
resumes where the hunt was. Maintainers answer an alert with `/rsi justified` or
`/rsi false-alarm`; the answers make the alert-quality ledger of each series.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot import hunt_check, leases, messages, pull_writes, triggers, watch
from bot.github.api import GitHubError
from bot.models import Inquiry, Series, SeriesPoint, Verification, utcnow
from bot.repo_config import Plan, RepoConfig
from bot.verification import fresh, store
from bot.verification.machine import State
from evidence.metrics import BY_NAME

if TYPE_CHECKING:
    from bot.verification.ports import EffectPorts, StepPorts

log = logging.getLogger(__name__)

OPEN = ("confirming", "bisecting")
LABEL = "perf-regression"
GONE_ON = frozenset({"no-change", "improved"})  # a step that found the range fine
MAX_COMMITS = 100  # a longer range is named, not bisected
MAX_AGE = dt.timedelta(days=7)  # an inquiry still open then is given up, saying so
RETRIES = 1  # a step whose verification failed is measured again this many times


@dataclass(frozen=True)
class Quality:
    """A series' alert-quality ledger: alarms the detector raised, how the reruns and
    the maintainers judged them."""

    raised: int = 0
    cleared: int = 0  # the confirming rerun did not see it
    unresolved: int = 0
    alerted: int = 0
    justified: int = 0
    false_alarms: int = 0

    @property
    def precision(self) -> float | None:
        """Of the alerts maintainers answered, the share that were real."""
        judged = self.justified + self.false_alarms
        return self.justified / judged if judged else None


def open_for(
    s: Session, series: Series, side: str, good: str, bad: str, now: dt.datetime
) -> Inquiry | None:
    """Open the inquiry of a regression the detector raised at the point `good`..`bad`;
    None when that range of the task is under inquiry (or was) already, on this series or
    another (another GPU kind or mode saw it too: one hunt, one alert)."""
    found = s.scalar(
        select(Inquiry.id).where(
            Inquiry.repo == series.repo,
            Inquiry.task == series.task,
            Inquiry.side == side,
            Inquiry.good_sha == good,
            Inquiry.bad_sha == bad,
        )
    )
    if found is not None:
        return None
    q = Inquiry(
        repo=series.repo,
        task=series.task,
        series_id=series.id,
        side=side,
        good_sha=good,
        bad_sha=bad,
        state="confirming",
        lo_sha=good,
        hi_sha=bad,
        steps=[],
        created_at=now,
        updated_at=now,
    )
    s.add(q)
    s.flush()
    log.warning("%s: %s suspected at %s..%s, confirming", series.repo, side, good[:10], bad[:10])
    return q


def suspect(s: Session, series: Series, commits: tuple[str, ...], side: str) -> str | None:
    """Of an alarm's commits, the one whose point has the most evidence for its side."""
    points = s.scalars(
        select(SeriesPoint).where(SeriesPoint.series_id == series.id, SeriesPoint.sha.in_(commits))
    ).all()
    sign = -1.0 if side == "regression" else 1.0
    m = BY_NAME.get(series.metric)
    if m is not None and m.better == "lower":
        sign = -sign  # a lower-is-better metric regresses upwards

    def strength(p: SeriesPoint) -> float:
        lo, hi = p.ci_low_pct, p.ci_high_pct
        half = (hi - lo) / 2 if lo is not None and hi is not None and hi > lo else math.inf
        return sign * p.change_pct / half

    best = max(points, key=strength, default=None)
    return best.sha if best is not None else None


def parent_of(s: Session, series: Series, sha: str) -> str | None:
    return s.scalar(
        select(SeriesPoint.parent_sha)
        .where(SeriesPoint.series_id == series.id, SeriesPoint.sha == sha)
        .limit(1)
    )


def remeasures(s: Session, v: Verification) -> bool:
    """Whether `v` measures its inquiry's suspect merge again (the confirming rerun): its
    result is then a point of the series like the first, fed to the detector."""
    q = s.get(Inquiry, v.inquiry_id) if v.inquiry_id is not None else None
    return q is not None and (v.base_sha, v.head_sha) == (q.good_sha, q.bad_sha)


# --------------------------------------------------------------------------- stepping


def follow(svc: StepPorts, vid: str) -> None:
    """After a watch verification's effects: the inquiries it ended a step of or
    opened take their next step."""
    with svc.db.session() as s:
        v = s.get(Verification, vid)
        if v is None or not v.watch or not State(v.state).final:
            return
        repo = v.repo
    resume(svc, repo)


def resume(svc: StepPorts, repo: str | None = None) -> None:
    """Every open inquiry (of `repo`) takes its next step if it can: the reconciler's
    way back after a restart, and a step's way on after its verification ended."""
    with svc.db.session() as s:
        query = select(Inquiry.id).where(Inquiry.state.in_(OPEN))
        if repo is not None:
            query = query.where(Inquiry.repo == repo)
        ids = list(s.scalars(query.order_by(Inquiry.id)))
    for qid in ids:
        try:
            advance(svc, qid)
        except GitHubError as exc:  # the next pass tries again
            log.warning("inquiry %s waits: GitHub answered %s", qid, exc)
        except Exception:  # one inquiry's trouble never stops the others (or the pass)
            log.exception("inquiry %s: could not advance; the next pass tries again", qid)


def advance(svc: StepPorts, qid: int) -> None:
    """Take inquiry `qid` as far as it goes now: read a finished step, decide, start the
    next verification or alert. One worker at a time holds the inquiry's lease (another
    that finds it held leaves it: the holder, or the reconciler's next pass, goes on), so
    a step is read once, a verification started once and an alert written once."""
    where = Inquiry.id == qid
    token = leases.take(svc.db, Inquiry, where, svc.settings.RSI_LEASE_S)
    if token is None:
        return
    try:
        _advance(svc, qid)
        with svc.db.session() as s:
            q = s.get(Inquiry, qid)
            told = q is not None and tell_check(svc, s, q)
            repo = q.repo if q is not None else ""
        if told:
            svc.queue.write(repo, pull_writes.CHECKS)
    finally:
        leases.give_back(svc.db, Inquiry, where, token)


def tell_check(svc: EffectPorts, s: Session, q: Inquiry) -> bool:
    """Have the suspect merge's `rsi/watch` check run say where the hunt is now (an
    outbox row of the repository when its words changed); whether one was written."""
    series = s.get(Series, q.series_id)
    if series is None:
        return False
    first = _confirming(q)
    web = svc.settings.web_url
    hunt = hunt_check.Hunt(
        state=q.state,
        good=q.good_sha,
        bad=q.bad_sha,
        lo=q.lo_sha,
        hi=q.hi_sha,
        commits=len(q.commits or []),
        bisected=sum(1 for st in q.steps if st["kind"] == "bisect" and not st.get("retry"))
        - (q.resumed_steps or 0),  # a resumed hunt counts its own steps
        max_steps=_max_steps(len(q.commits)) if q.commits else None,
        confirm_pct=_num(first.get("change_pct")),
        confirm_verdict=str(first.get("verdict") or "") or None,
        culprit=q.culprit_sha,
        culprit_pr=q.culprit_pr,
        triage=q.triage,
        triaged_by=q.triaged_by,
        why=q.end_reason,
        history_url=svc.history_url(q.repo, task=q.task, gpu=series.gpu, mode=series.mode)
        + f"#series-{series.id}",
        pr_url=f"{web}/{q.repo}/pull/{q.culprit_pr}" if q.culprit_pr else None,
    )
    try:
        return hunt_check.tell(svc, s, q, hunt)
    except Exception:  # words on a check run never undo the state they tell
        log.exception("%s: inquiry %s: its check run could not be told", q.repo, q.id)
        return False


def _advance(svc: StepPorts, qid: int) -> None:
    found = svc.repo_config(_repo_of(svc, qid))
    config = found.config
    with svc.db.session() as s:
        q = s.get(Inquiry, qid)
        if q is None or q.state not in OPEN:
            return
        if found.found and found.ok and not config.watch.enabled:
            _stop(q, "watch-off", {})
            return
        if utcnow() - store.aware(q.resumed_at or q.created_at) > MAX_AGE:
            _stop(q, "too-old", {"days": str(MAX_AGE.days)})
            return
    for _ in range(4):  # each pass is one decision; GitHub is read between passes
        need = _decide(svc, qid, config)
        if need is None:
            return
        if need.startswith("start:"):
            svc.queue.start(need.removeprefix("start:"))
            return
        with svc.db.session() as s:
            q = s.get(Inquiry, qid)
            assert q is not None
            repo, lo, hi = q.repo, q.lo_sha, q.hi_sha
        if need == "told":
            _carry_out(svc, qid)
            return
        if need == "commits":
            try:
                chain = svc.github.first_parents(repo, lo, hi, MAX_COMMITS)
            except GitHubError as exc:
                if exc.status not in (404, 422):
                    raise
                chain = None  # the range is gone (a force-push): nothing to bisect
            with svc.db.session() as s:
                q = s.get(Inquiry, qid)
                if q is not None and q.commits is None:
                    if chain is None:
                        _stop(q, "range-too-long", {"limit": str(MAX_COMMITS)})
                        _tell_unresolved(svc, s, q)
                    else:
                        q.commits = chain
            if chain is None:
                _carry_out(svc, qid)
        elif need == "culprit":
            try:
                pulls = svc.github.merged_pulls(repo, hi, svc.github.default_branch(repo))
            except GitHubError as exc:
                if exc.status not in (404, 422):
                    raise
                pulls = []  # GitHub knows no PR of it: the alert is an issue
            with svc.db.session() as s:
                q = s.get(Inquiry, qid)
                if q is None or q.state not in OPEN or q.culprit_sha is not None:
                    continue
                _alert(svc, s, q, config, pulls[0] if pulls else None)
            for number in (pulls[0][0],) if pulls else ():
                svc.queue.write(repo, number)
            _carry_out(svc, qid)


def _carry_out(svc: StepPorts, qid: int) -> None:
    """Have the repository's outbox carried out, and the inquiry's issue's (a resumed
    hunt says how it ended there)."""
    with svc.db.session() as s:
        q = s.get(Inquiry, qid)
        if q is None:
            return
        repo, issue = q.repo, _issue_of(s, q) if q.resumed_at is not None else None
    svc.queue.write(repo, pull_writes.REPOSITORY)
    if issue is not None:
        svc.queue.write(repo, issue)


def _repo_of(svc: StepPorts, qid: int) -> str:
    with svc.db.session() as s:
        q = s.get(Inquiry, qid)
        assert q is not None
        return q.repo


def _decide(svc: StepPorts, qid: int, config: RepoConfig) -> str | None:
    """One decision; what must be read from GitHub before the next ("commits" of the
    range, the "culprit"'s PR), the verification to start ("start:<id>"), or None:
    waiting for a step or the budget, or done."""
    with svc.db.session() as s:
        q = s.get(Inquiry, qid)
        if q is None or q.state not in OPEN:
            return None
        if q.verification_id is not None:
            v = s.get(Verification, q.verification_id)
            if v is not None and not State(v.state).final:
                return None  # measuring
            _read(s, q, v)
            if q.state not in OPEN:
                _tell_unresolved(svc, s, q)
                return "told" if q.state == "unresolved" and q.alerted_at else None
        if q.state == "confirming":
            if not q.steps or q.steps[-1].get("retry"):
                return _measure(s, q, config, q.good_sha, q.bad_sha, "confirm")
            q.state = "bisecting"
        if q.commits is None:
            return "commits"
        todo = _between(q.commits, q.lo_sha, q.hi_sha)
        if len(todo) <= 1:
            return "culprit"
        bisected = sum(1 for st in q.steps if st["kind"] == "bisect" and not st.get("retry"))
        if bisected - (q.resumed_steps or 0) >= _max_steps(len(q.commits)):
            _stop(q, "bisect-stuck", {"steps": str(bisected)})
            _tell_unresolved(svc, s, q)
            return "told" if q.alerted_at else None
        mid = todo[(len(todo) - 1) // 2]
        return _measure(s, q, config, q.lo_sha, mid, "bisect")


def _between(commits: list[Any], lo: str, hi: str) -> list[str]:
    """The commits after `lo` up to `hi`, in order: those that may hold the culprit."""
    chain = [str(c) for c in commits]
    start = chain.index(lo) + 1 if lo in chain else 0
    end = chain.index(hi) + 1 if hi in chain else len(chain)
    return chain[start:end]


def _max_steps(k: int) -> int:
    return max(1, math.ceil(math.log2(max(k, 2))))


def _read(s: Session, q: Inquiry, v: Verification | None) -> None:
    """Write down what the step's verification found — the series' own row (GPU, mode,
    concurrency, metric) where `note_step` kept it, else its headline — and move the
    bounds. A step whose verification did not publish, or a bisection step whose interval
    put the change in neither half, is measured again (`RETRIES` times: noise that
    straddles the line once rarely does twice)."""
    step = dict(q.steps[-1]) if q.steps else {}
    q.verification_id = None
    same = [st for st in q.steps if (st["base"], st["head"]) == (step["base"], step["head"])]
    failed = v is None or v.state != State.PUBLISHED.value
    if failed and len(same) <= RETRIES:  # kept, marked: `_decide` measures the range again
        q.steps = [*q.steps[:-1], {**step, "verdict": "failed", "retry": True}]
        log.info("%s: inquiry %s measures %s again", q.repo, q.id, step["head"][:10])
        return
    src = step.get("row") or _headline(s, q, v)
    verdict = str(src.get("verdict") or (v.verdict if v else "") or "")
    if v is None or v.state != State.PUBLISHED.value:
        verdict = "failed"
    step.update(
        verdict=verdict,
        change_pct=src.get("delta_pct"),
        ci_low_pct=src.get("ci_low_pct"),
        ci_high_pct=src.get("ci_high_pct"),
    )
    q.steps = [*q.steps[:-1], step]
    sign = _sign(s, q)
    if step["kind"] == "bisect":
        confirmed = _num(_confirming(q).get("change_pct"))
        side = _side_of(step, sign * confirmed if confirmed is not None else None, sign)
        if side == "bad":
            q.hi_sha = step["head"]
        elif side == "good":
            q.lo_sha = step["head"]
        elif len(same) <= RETRIES:  # undecided: kept, marked, measured again
            q.steps = [*q.steps[:-1], {**step, "retry": True}]
            log.info(
                "%s: inquiry %s: %s undecided, measured again", q.repo, q.id, step["head"][:10]
            )
        else:
            _stop(q, "step-undecided", {"verdict": verdict or "none", "kind": "bisect"})
    elif verdict == "regressed":
        pass  # confirmed: bisect next
    elif verdict in GONE_ON or _side_of(step, _suspected(s, q, sign), sign) == "good":
        q.state = "cleared"
        q.end_reason = {"code": "not-confirmed", "params": {"verdict": verdict}}
        log.info("%s: suspected %s not confirmed (%s)", q.repo, q.side, verdict)
    else:
        _stop(q, "step-undecided", {"verdict": verdict or "none", "kind": step["kind"]})


def _confirming(q: Inquiry) -> dict[str, Any]:
    """The confirming rerun that counted (not one measured again after it failed)."""
    return next((st for st in q.steps if st["kind"] == "confirm" and not st.get("retry")), {})


def note_step(s: Session, v: Verification, doc: dict[str, Any]) -> None:
    """Keep a step's own figures: the row of its evidence (`doc`) for the inquiry's
    series — not the headline, which may be another concurrency or a guard's row."""
    q = s.get(Inquiry, v.inquiry_id) if v.inquiry_id is not None else None
    series = s.get(Series, q.series_id) if q is not None else None
    if q is None or series is None:
        return
    row = watch.study_row(doc, series.gpu, series.mode, series.concurrency, series.metric)
    if row is None:
        return
    kept = {k: row.get(k) for k in ("delta_pct", "ci_low_pct", "ci_high_pct", "verdict")}
    q.steps = [{**st, "row": kept} if st.get("verification_id") == v.id else st for st in q.steps]


def _sign(s: Session, q: Inquiry) -> float:
    """+1 where higher is better for the series' metric, −1 where lower is: a change
    times it is negative for a regression."""
    series = s.get(Series, q.series_id)
    m = BY_NAME.get(series.metric) if series is not None else None
    return -1.0 if m is not None and m.better == "lower" else 1.0


def _suspected(s: Session, q: Inquiry, sign: float) -> float | None:
    """The change the suspect point measured, in percent, oriented by `sign`."""
    found = s.scalar(
        select(SeriesPoint.change_pct)
        .where(SeriesPoint.series_id == q.series_id, SeriesPoint.sha == q.bad_sha)
        .order_by(SeriesPoint.id)
        .limit(1)
    )
    return sign * float(found) if found is not None else None


def _side_of(step: dict[str, Any], confirmed: float | None, sign: float = 1.0) -> str | None:
    """Whether a bisection step's range holds the confirmed change (`confirmed` and the
    step's interval oriented by `sign`, so a regression is negative): "bad" when its
    interval lies wholly past half the confirmed change, "good" when wholly short of it
    (a step's question is which half holds a change of known size, not whether there is
    any change at all); else its verdict decides, and None when that is undecided."""
    lo, hi = _num(step.get("ci_low_pct")), _num(step.get("ci_high_pct"))
    if confirmed is not None and confirmed < 0 and lo is not None and hi is not None:
        lo, hi = sorted((sign * lo, sign * hi))
        if hi < confirmed / 2:
            return "bad"
        if lo > confirmed / 2:
            return "good"
    verdict = step.get("verdict")
    return "bad" if verdict == "regressed" else "good" if verdict in GONE_ON else None


def _headline(s: Session, q: Inquiry, v: Verification | None) -> dict[str, Any]:
    series = s.get(Series, q.series_id)
    heads = (v.headline or {}) if v is not None else {}
    h = heads.get(series.gpu) if series is not None else None
    if not isinstance(h, dict):
        h = next((x for x in heads.values() if isinstance(x, dict)), {})
    return h


def _stop(q: Inquiry, code: str, params: dict[str, str]) -> None:
    q.state, q.end_reason = "unresolved", {"code": code, "params": params}
    log.warning("%s: inquiry %s unresolved: %s %s", q.repo, q.id, code, params)


def _measure(
    s: Session, q: Inquiry, config: RepoConfig, base: str, head: str, kind: str
) -> str | None:
    """Queue the step's paired verification (on the series' GPU and mode): "start:<id>";
    None when the watch's budget for the day is spent (the reconciler asks again)."""
    series = s.get(Series, q.series_id)
    assert series is not None
    now = utcnow()
    if watch.minutes_today(s, q.repo, now) >= config.watch.gpu_minutes_per_day:
        log.info("%s: inquiry %s waits for the watch's GPU budget", q.repo, q.id)
        return None
    plan = config.plan(gpus=[series.gpu])
    if not isinstance(plan, Plan):
        _stop(q, "not-measurable", {"gpu": series.gpu})
        return None
    v = fresh.verification(
        s,
        repo=q.repo,
        task=q.task,
        base=base,
        head=head,
        head_repo=q.repo,
        head_ref=head,
        plan=plan,
        modes=[series.mode] if series.mode else plan.modes,
        title=fresh.title(kind, base=base, head=head),
        trigger=triggers.of(kind, q.side),
        watch=True,
        candidate_id=f"inquiry-{q.id}-{len(q.steps) + 1}",
        inquiry_id=q.id,
    )
    q.verification_id = v.id
    q.steps = [*q.steps, {"kind": kind, "base": base, "head": head, "verification_id": v.id}]
    log.info("%s: inquiry %s %s %s..%s as %s", q.repo, q.id, kind, base[:10], head[:10], v.id)
    return "start:" + v.id


def _tell_unresolved(svc: StepPorts, s: Session, q: Inquiry) -> None:
    """A regression the rerun confirmed but the hunt could not trace to one commit is
    still said, once: an issue naming the range that holds it and why it stopped (a
    hunt `/rsi bisect` resumed says it again on that issue)."""
    if q.state != "unresolved" or _confirming(q).get("verdict") != "regressed":
        return
    series = s.get(Series, q.series_id)
    assert series is not None
    view = alert_view(svc, q, series)
    issue = _issue_of(s, q)
    if q.resumed_at is not None and issue is not None and not _told_since_resume(q):
        q.end_reason = {**(q.end_reason or {}), "told": True}
        pull_writes.comment(s, q.repo, issue, messages.unresolved_alert(view))
        return
    if q.alerted_at:
        return
    q.alerted_at = utcnow()
    title = messages.alert_title(view)
    pull_writes.issue(s, q.repo, title, messages.unresolved_alert(view), [LABEL], about=q.id)


def _issue_of(s: Session, q: Inquiry) -> int | None:
    """The number of the issue the App opened about `q`, once it is open."""
    return next(
        (n for n, about in pull_writes.opened_issues(s, q.repo).items() if about == q.id), None
    )


def _told_since_resume(q: Inquiry) -> bool:
    return bool((q.end_reason or {}).get("told"))


def resume_hunt(q: Inquiry, user: str) -> str | None:
    """`/rsi bisect`: a hunt left unresolved after its rerun confirmed the regression goes
    on from the range it narrowed, with a step budget of its own; None when it does, else
    why not ("not-confirmed", or "state" when it is not unresolved)."""
    if q.state != "unresolved":
        return "state"
    if _confirming(q).get("verdict") != "regressed":
        return "not-confirmed"
    q.state, q.end_reason, q.verification_id = "bisecting", None, None
    q.resumed_at, q.resumed_by = utcnow(), user[:100]
    q.resumed_steps = sum(1 for st in q.steps if st["kind"] == "bisect" and not st.get("retry"))
    log.info("%s: inquiry %s resumed by %s at %s..%s", q.repo, q.id, user, q.lo_sha, q.hi_sha)
    return None


def _alert(
    svc: StepPorts, s: Session, q: Inquiry, config: RepoConfig, pull: tuple[int, str] | None
) -> None:
    """Name the culprit and say so once: the outbox rows are written with the state."""
    q.culprit_sha = q.hi_sha
    q.culprit_pr = pull[0] if pull else None
    q.state, q.alerted_at = "alerted", utcnow()
    series = s.get(Series, q.series_id)
    assert series is not None
    view = alert_view(svc, q, series)
    author = pull[1] if pull else ""
    if q.culprit_pr is not None:
        pull_writes.comment(s, q.repo, q.culprit_pr, messages.alert(view, author))
        pull_writes.label(s, q.repo, q.culprit_pr, LABEL)
    issue = _issue_of(s, q) if q.resumed_at is not None else None
    if issue is not None:  # resumed from its unresolved issue: said there, not in a new one
        pull_writes.comment(s, q.repo, issue, messages.alert(view, author))
    elif config.watch.alert_issue or q.culprit_pr is None:
        title = messages.alert_title(view)
        pull_writes.issue(s, q.repo, title, messages.alert(view, author), [LABEL], about=q.id)
    log.warning("%s: %s alerted at %s (PR %s)", q.repo, q.side, q.culprit_sha, q.culprit_pr)


@dataclass(frozen=True)
class StepView:
    kind: str
    base: str
    head: str
    verdict: str
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    report_url: str | None


@dataclass(frozen=True)
class AlertView:
    """What an alert says, for the template."""

    repo: str
    task: str
    gpu: str
    mode: str
    metric: str
    culprit: str
    culprit_pr: int | None
    good: str
    bad: str
    commits: int
    steps: list[StepView]
    history_url: str
    # The narrowest measured range that ends at the culprit and held the change: its
    # interval names the culprit's change (a range of one commit when bisection ended so).
    culprit_step: StepView | None = None
    lo: str = ""  # the range still holding the change, when no one commit was named
    hi: str = ""
    why: dict[str, Any] | None = None  # why the hunt stopped short (a reason record)


def alert_view(svc: StepPorts, q: Inquiry, series: Series) -> AlertView:
    culprit = q.culprit_sha or q.hi_sha
    steps = [
        StepView(
            kind=str(st.get("kind")),
            base=str(st.get("base")),
            head=str(st.get("head")),
            verdict=str(st.get("verdict") or ""),
            change_pct=_num(st.get("change_pct")),
            ci_low_pct=_num(st.get("ci_low_pct")),
            ci_high_pct=_num(st.get("ci_high_pct")),
            report_url=svc.report_url(str(st["verification_id"]))
            if st.get("verification_id")
            else None,
        )
        for st in q.steps
    ]
    return AlertView(
        repo=q.repo,
        task=q.task,
        gpu=series.gpu,
        mode=series.mode,
        metric=series.metric,
        culprit=culprit,
        culprit_pr=q.culprit_pr,
        good=q.good_sha,
        bad=q.bad_sha,
        commits=len(q.commits or []) or 1,
        steps=steps,
        history_url=svc.history_url(q.repo, task=q.task, gpu=series.gpu, mode=series.mode)
        + f"#series-{series.id}",
        culprit_step=next(
            (s for s in reversed(steps) if s.head == culprit and s.change_pct is not None), None
        ),
        lo=q.lo_sha,
        hi=q.hi_sha,
        why=q.end_reason,
    )


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


# --------------------------------------------------------------------------- answers


def triage(s: Session, repo: str, number: int, answer: str, user: str) -> list[Inquiry]:
    """A maintainer's answer to the alerts on PR `number` (each series that saw the
    culprit), or to the alert issue `number` the App opened; those answered, newest
    first (none when there is none to answer)."""
    found = list(
        s.scalars(
            select(Inquiry)
            .where(Inquiry.repo == repo, Inquiry.culprit_pr == number, Inquiry.state == "alerted")
            .order_by(Inquiry.alerted_at.desc(), Inquiry.id.desc())
        )
    )
    about = pull_writes.opened_issues(s, repo).get(number)
    if not found and about is not None:
        q = s.get(Inquiry, about)
        found = [q] if q is not None and q.alerted_at is not None else []
    for q in found:
        q.triage, q.triaged_by, q.triaged_at = answer, user, utcnow()
    return found


def labelled(s: Session, q: Inquiry) -> list[int]:
    """Where an alert put the `perf-regression` label: the culprit PR and the issue the
    App opened about it."""
    issue = _issue_of(s, q)
    return [n for n in (q.culprit_pr, issue) if n is not None]


def quality(s: Session, series_ids: list[int]) -> dict[int, Quality]:
    """The alert-quality ledger of each series."""
    rows = s.execute(
        select(Inquiry.series_id, Inquiry.state, Inquiry.triage).where(
            Inquiry.series_id.in_(series_ids)
        )
    ).all()
    out: dict[int, dict[str, int]] = {}
    for sid, state, answer in rows:
        c = out.setdefault(sid, dict.fromkeys(Quality.__dataclass_fields__, 0))
        c["raised"] += 1
        c["cleared"] += state == "cleared"
        c["unresolved"] += state == "unresolved"
        c["alerted"] += state == "alerted"
        c["justified"] += answer == "justified"
        c["false_alarms"] += answer == "false-alarm"
    return {sid: Quality(**c) for sid, c in out.items()}


@dataclass(frozen=True)
class HuntRow:
    """One inquiry as the history page lists it."""

    state: str
    good: str
    bad: str
    lo: str  # the range still holding the change
    hi: str
    culprit: str | None
    culprit_pr: int | None
    steps: int
    change_pct: float | None  # the confirming rerun's
    why: str | None
    triage: str | None
    verification_ids: list[str]


def of_series(s: Session, series_ids: list[int]) -> dict[int, list[HuntRow]]:
    """Each series' inquiries, newest first (for the history page)."""
    out: dict[int, list[HuntRow]] = {}
    for q in s.scalars(
        select(Inquiry)
        .where(Inquiry.series_id.in_(series_ids))
        .order_by(Inquiry.created_at.desc(), Inquiry.id.desc())
    ):
        first = _confirming(q)
        out.setdefault(q.series_id, []).append(
            HuntRow(
                state=q.state,
                good=q.good_sha,
                bad=q.bad_sha,
                lo=q.lo_sha,
                hi=q.hi_sha,
                culprit=q.culprit_sha,
                culprit_pr=q.culprit_pr,
                steps=len(q.steps),
                change_pct=_num(first.get("change_pct")),
                why=str((q.end_reason or {}).get("code") or "") or None,
                triage=q.triage,
                verification_ids=[str(st["verification_id"]) for st in q.steps],
            )
        )
    return out
