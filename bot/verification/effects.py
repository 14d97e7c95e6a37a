"""Carrying out the machine's effects. Each executor reads the current truth from the
database first, so an effect carried out twice (a retry, a re-queued drain) or after
the verification moved on does no harm; it may answer with the event its outcome is
(a dispatch's run id, a kept bundle, the built evidence), with what to write beside the
transition (`Outcome`). The drain applies it: no executor moves the machine itself."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from bot import approvals, inquiries, messages, triggers, watch
from bot.artifacts import TooLarge as ArtifactTooLarge
from bot.artifacts import report_text, save_to_file
from bot.github.api import APPROVE_ACTION, CHECK_NAME, WATCH_CHECK_NAME, GitHubError, Pull
from bot.github.client import TooLarge
from bot.models import BaselineMeasurement, RunnerJob, Verification, utcnow
from bot.verification import machine as M
from bot.verification import reasons as R
from bot.verification import store
from bot.verification.reasons import Reason
from evidence.build import Inputs, build, write
from evidence.bundle import Bundle
from evidence.errors import InputError
from evidence.limits import DEFAULT as DEFAULT_LIMITS
from evidence.limits import Limits
from evidence.links import compare_url
from evidence.load import Source, read_manifest
from evidence.model import Candidate, HistoryEntry
from evidence.render import (
    COMMENT_LIMIT,
    COMMENT_MARKER,
    SECTION_START,
    render_comment,
    replace_pr_section,
)

if TYPE_CHECKING:
    from bot.verification.ports import EffectPorts

log = logging.getLogger(__name__)

# The runner workflow's run-name: how a run is found when GitHub returns no run id.
RUN_NAME = re.compile(r"^\s*rsi verify (v-[0-9a-f]{4,32}) ([a-z0-9]{2,20})\s*$")
# Room left in the comment for the ledger and the status lines above the evidence.
LEDGER_BUDGET = 12_000
# A PR read this recently serves the next effect too (comment, then body: one read).
PULL_MAX_AGE_S = 10.0


@dataclass(frozen=True)
class Outcome:
    """An executor's event and the rows written in the same transaction as it."""

    event: M.Event
    also: store.Also


Executor = Callable[["EffectPorts", str, Any], "M.Event | Outcome | None"]


def artifact_name(vid: str, gpu: str) -> str:
    return f"rsi-bundle-{vid}-{gpu.lower()}"


def _load(s: Session, vid: str) -> Verification:
    v = s.get(Verification, vid)
    if v is None:
        raise LookupError(f"no verification {vid}")
    return v


def _job(v: Verification, gpu: str) -> RunnerJob:
    return next(j for j in v.jobs if j.gpu == gpu)


# ----------------------------------------------------------------------- start


def ensure_pull_request(svc: EffectPorts, vid: str, e: M.EnsurePullRequest) -> M.Event | None:
    """Open the PR from the candidate's branch, or attach to the one that exists. GitHub
    opens a PR at its branch's tip, whatever the intake said: a promoted commit that is
    not the PR's head is not measured (`HeadNotTip`), so evidence is never of a commit
    the PR does not show."""
    with svc.db.session() as s:
        v = _load(s, vid)
        tracked = store.pull_request(s, v.repo, v.pr_number)
        number, repo, base_sha, sha = v.pr_number, v.repo, v.base_sha, v.head_sha
        # Only a candidate's head, before anything ran, is checked: a push's or a
        # command's head was the PR's head when it was asked for.
        check = v.trigger == triggers.INTAKE and v.state == M.State.QUEUED.value
        cand = Candidate.model_validate(v.candidate, context={"stored": True})
        # Always `owner:branch`: GitHub ignores a bare branch in the `head` filter and
        # would list every open PR when attaching to an existing one.
        head = f"{v.head_repo.split('/')[0]}:{v.head_ref}"
        url = compare_url(svc.settings.web_url, v.repo, v.base_sha, v.head_sha, v.head_repo)
        body = fit_pr_body(messages.pr_opening(cand, url, messages.status_section(v)))
    if tracked is not None:  # a PR the candidate names, or this effect carried out again
        return _not_the_head(vid, sha, svc.github.pull(repo, tracked.number)) if check else None
    opened = False
    if number is not None:
        pull = svc.github.pull(repo, number)
    else:
        base = svc.github.default_branch(repo)
        pull, opened = svc.github.open_pull(
            repo, base=base, head=head, title=messages.pr_title(cand), body=body
        )
    if opened and pull.head_sha != sha:
        _opened_elsewhere(svc, vid, repo, cand, base_sha, _head_not_tip(sha, pull), pull)
    iid = svc.github.installation_id(repo)
    with svc.db.session() as s:
        v = _load(s, vid)
        v.pr_number, v.installation_id = pull.number, iid
        if store.pull_request(s, repo, pull.number) is None:
            store.track_pull(
                s,
                repo,
                pull.number,
                head_repo=v.head_repo,
                head_ref=v.head_ref,
                head_sha=pull.head_sha,
                base_ref=pull.base_ref,
                html_url=pull.html_url,
                opened_by_app=opened,
            )
            # Its head is known from now: comments written earlier approve nothing.
            approvals.record_head(s, repo, pull.number, pull.head_sha, f"read:{vid}", utcnow())
    _report_config_error(svc, vid)
    return _not_the_head(vid, sha, pull) if check else None


def _opened_elsewhere(
    svc: EffectPorts,
    vid: str,
    repo: str,
    cand: Candidate,
    base_sha: str,
    why: M.HeadNotTip,
    pull: Pull,
) -> None:
    """The App just opened the PR at another head than the promoted one: its body, all
    the App's own, compares the head the PR shows and says that nothing is measured."""
    url = compare_url(svc.settings.web_url, repo, base_sha, pull.head_sha, pull.head_repo)
    said = messages.not_measured_section(vid, why.reason)
    svc.github.edit_pull_body(repo, pull.number, fit_pr_body(messages.pr_opening(cand, url, said)))


def _head_not_tip(sha: str, pull: Pull) -> M.HeadNotTip:
    return M.HeadNotTip(sha, pull.head_sha, f"{pull.head_repo.split('/')[0]}:{pull.head_ref}")


def _not_the_head(vid: str, sha: str, pull: Pull) -> M.Event | None:
    """`HeadNotTip` when the PR shows another head than the promoted `sha`."""
    if pull.head_sha == sha:
        return None
    log.warning("%s: the PR's head is %s, not the promoted %s", vid, pull.head_sha, sha)
    return _head_not_tip(sha, pull)


def _report_config_error(svc: EffectPorts, vid: str) -> None:
    """A malformed `.github/rsi.yml` is said on the PR (once per distinct problem)."""
    with svc.db.session() as s:
        v = _load(s, vid)
        repo, number = v.repo, v.pr_number
    result = svc.repo_config(repo)
    with svc.db.session() as s:
        pr = store.pull_request(s, repo, number)
        if pr is None or pr.config_error == result.error:
            return
        pr.config_error = result.error
        if result.error is not None and number is not None:
            svc.github.create_comment(repo, number, messages.config_error(result))


def ensure_check_run(svc: EffectPorts, vid: str, e: M.EnsureCheckRun) -> None:
    """The verification's one check run: queued, or for a head awaiting approval
    `action_required` with the Approve and verify button."""
    with svc.db.session() as s:
        v = _load(s, vid)
        if v.check_run_id is not None or M.State(v.state).final:
            return  # one check run; none for a verification that ended before it began
        repo, head, watch = v.repo, v.head_sha, v.watch
        series = _series_filters(v)
        waits = v.state == M.State.AWAITING_APPROVAL.value
        title, summary = messages.check_awaiting(v) if waits else messages.check_queued(v)
    run_id = svc.github.create_check_run(
        repo,
        head_sha=head,
        external_id=vid,
        # A watch's details are its series: the history page, filtered to them.
        details_url=svc.history_url(repo, **series) if watch else svc.report_url(vid),
        name=WATCH_CHECK_NAME if watch else CHECK_NAME,
        title=title,
        summary=summary,
        conclusion="action_required" if waits else None,
        actions=[messages.approve_action(APPROVE_ACTION)] if waits else None,
    )
    with svc.db.session() as s:
        _load(s, vid).check_run_id = run_id


def dispatch(svc: EffectPorts, vid: str, e: M.Dispatch) -> M.Event | None:
    """One `workflow_dispatch`. The request time is recorded first: after a crash
    between GitHub's answer and our record, the run is looked up, not dispatched twice."""
    runner, workflow = svc.settings.RSI_RUNNER_REPO, svc.settings.RSI_WORKFLOW
    with svc.db.session() as s:
        v = _load(s, vid)
        job = _job(v, e.gpu)
        if job.state != M.JobState.DISPATCHING.value:
            return None
        asked = job.dispatch_requested_at
        # The repository's threshold, design and control, as its config says at dispatch.
        config = svc.repo_config(v.repo).config
        threshold = config.thresholds.practical_pct if v.adaptive else None
        inputs = dispatch_inputs(v, e.gpu, threshold, design=config.design, control=config.control)
        if asked is None:
            job.dispatch_requested_at = utcnow()
    if asked is not None:
        found = find_run(svc, vid, e.gpu, store.aware(asked) - dt.timedelta(minutes=2))
        if found is not None:
            return M.Dispatched(e.gpu, found[0], found[1])
    ref = svc.github.default_branch(runner)
    run_id, url = svc.github.dispatch(runner, workflow, ref, inputs)
    if run_id is None:  # older GitHub Enterprise: find the run it just created by name
        found = find_run(svc, vid, e.gpu, utcnow() - dt.timedelta(minutes=2))
        if found is not None:
            run_id, url = found
    return M.Dispatched(e.gpu, run_id, url)


def rounds_input(v: Verification, threshold_pct: float | None = None) -> str:
    """The workflow's `rounds` input: a number a side, or `auto:MAX[:GPU_MINUTES[:PCT]]` —
    rounds until decided, at most MAX a side and GPU_MINUTES for this GPU kind (`-`: no
    limit), deciding at the repository's practical threshold PCT. One input carries them
    all: older workflow files declare no more inputs than these."""
    if not v.adaptive:
        return str(v.rounds)
    out = f"auto:{v.rounds}"
    if v.gpu_budget_minutes is not None or threshold_pct is not None:
        out += f":{v.gpu_budget_minutes:.10g}" if v.gpu_budget_minutes is not None else ":-"
    if threshold_pct is not None:
        out += f":{threshold_pct:.6g}"
    return out


def dispatch_inputs(
    v: Verification,
    gpu: str,
    threshold_pct: float | None = None,
    *,
    design: str = "auto",
    control: str = "none",
) -> dict[str, str]:
    """The dispatch contract (docs/architecture.md); workflow inputs travel as strings.
    `design` and `control` are the repository's `.github/rsi.yml` choices, sent only when
    they are not the workflow's defaults (auto: the task's design; none): a runner
    repository written before they existed refuses undeclared inputs, and still takes
    every dispatch that does not ask for them."""
    inputs = {
        "verification_id": v.id,
        "repo": v.repo,
        "pr": str(v.pr_number or 0),
        "base_sha": v.base_sha,
        "head_repo": v.head_repo,
        "head_sha": v.head_sha,
        "task": v.task,
        "gpu": gpu.lower(),
        "rounds": rounds_input(v, threshold_pct),
        "modes": ",".join(v.modes),
    }
    if design != "auto":
        inputs["design"] = design
    if control != "none":
        inputs["control"] = control
    return inputs


def find_run(
    svc: EffectPorts, vid: str, gpu: str, since: dt.datetime
) -> tuple[int, str | None] | None:
    """The runner workflow's run for this job, by its run-name (GitHub Enterprise returns
    no run id on dispatch); runs already known to be another job's are skipped."""
    path = f".github/workflows/{svc.settings.RSI_WORKFLOW}"
    for run in svc.github.runs_since(svc.settings.RSI_RUNNER_REPO, since):
        m = RUN_NAME.match(run.title)
        if m is None or m.groups() != (vid, gpu.lower()) or run.event != "workflow_dispatch":
            continue
        if run.path and run.path.split("@")[0] != path:
            continue
        with svc.db.session() as s:
            owner = store.job_by_run_id(s, run.id)
            if owner is not None and (owner.verification_id, owner.gpu) != (vid, gpu):
                continue
        return run.id, run.url
    return None


def check_run_in_progress(svc: EffectPorts, vid: str, e: M.CheckRunInProgress) -> None:
    with svc.db.session() as s:
        v = _load(s, vid)
        if v.check_run_id is None or M.State(v.state).final:
            return
        repo, cid = v.repo, v.check_run_id
        title, summary = messages.check_running(v)
        first = next((j.html_url for j in v.jobs if j.html_url), None)
    svc.github.update_check_run(
        repo, cid, title=title, summary=summary, status="in_progress", details_url=first
    )


def cancel_run(svc: EffectPorts, vid: str, e: M.CancelRun) -> None:
    run_id = e.run_id
    if run_id is None:
        with svc.db.session() as s:
            run_id = _job(_load(s, vid), e.gpu).workflow_run_id
    if run_id is not None:
        svc.github.cancel_run(svc.settings.RSI_RUNNER_REPO, run_id)


# ----------------------------------------------------------------------- ingest


def bundle_limits(svc: EffectPorts) -> Limits:
    """The bounds of a bundle (docs/bounds.md), from the settings."""
    st = svc.settings
    return Limits(
        max_bytes=st.RSI_BUNDLE_MAX_BYTES,
        max_members=st.RSI_BUNDLE_MAX_MEMBERS,
        max_member_bytes=st.RSI_BUNDLE_MAX_MEMBER_BYTES,
        max_ratio=st.RSI_BUNDLE_MAX_RATIO,
        max_json_bytes=st.RSI_BUNDLE_MAX_JSON_BYTES,
        max_runs=st.RSI_BUNDLE_MAX_RUNS,
        max_list_values=st.RSI_BUNDLE_MAX_LIST_VALUES,
        max_values=st.RSI_BUNDLE_MAX_VALUES,
    )


def ingest(svc: EffectPorts, vid: str, e: M.Ingest) -> M.Event | Outcome | None:
    """Fetch one GPU's bundle (streamed to a temporary file), check it is within bounds
    and this verification's, keep it."""
    with svc.db.session() as s:
        v = _load(s, vid)
        job = _job(v, e.gpu)
        if job.state != M.JobState.COMPLETED.value:
            return None
        run_id, ident = job.workflow_run_id, _identity(v)
    limits = bundle_limits(svc)
    with tempfile.TemporaryDirectory(prefix="rsi-ingest-") as tmp:
        path = Path(tmp) / f"{artifact_name(vid, e.gpu)}.zip"
        try:
            found = _fetch_bundle(svc, vid, e.gpu, run_id, path, limits.max_bytes)
        except (TooLarge, ArtifactTooLarge) as exc:
            big = {"gpu": e.gpu, "what": "too-large", "detail": str(exc)}
            return M.BundleRejected(e.gpu, Reason(R.BUNDLE_REJECTED, big))
        if not found:
            reason = Reason(R.NO_BUNDLE, {"gpu": e.gpu, "artifact": artifact_name(vid, e.gpu)})
            return M.BundleRejected(e.gpu, reason)
        problem = wrong_bundle(ident, e.gpu, path, limits)
        if problem:
            return M.BundleRejected(e.gpu, Reason(R.BUNDLE_REJECTED, {"gpu": e.gpu, **problem}))
        key = f"bundles/{vid}/{e.gpu.lower()}.zip"
        svc.store.put_file(key, path, "application/zip")

    def keep(s: Session, v: Verification) -> None:
        _job(v, e.gpu).bundle_key = key

    return Outcome(M.BundleKept(e.gpu), keep)


def _identity(v: Verification) -> dict[str, str]:
    return {"id": v.id, "repo": v.repo, "base": v.base_sha, "head": v.head_sha}


def _fetch_bundle(
    svc: EffectPorts, vid: str, gpu: str, run_id: int | None, dest: Path, max_bytes: int
) -> bool:
    """The bundle streamed into `dest`: the run's artifact, or the artifact store's copy;
    False when there is none. TooLarge (either kind) past `max_bytes`."""
    runner = svc.settings.RSI_RUNNER_REPO
    if run_id is not None and svc.github.artifact_zip(
        runner, run_id, artifact_name(vid, gpu), dest, max_bytes
    ):
        return True
    # Runners may put the bundle on S3 instead (`<verification-id>/<gpu>.zip`).
    for key in (f"{vid}/{gpu.lower()}.zip", f"{vid}/{gpu}.zip"):
        if svc.store.exists(key):
            save_to_file(svc.store, key, dest, max_bytes)
            return True
    return False


def wrong_bundle(
    ident: dict[str, str], gpu: str, path: Path, limits: Limits = DEFAULT_LIMITS
) -> dict[str, str] | None:
    """The bundle must be within bounds and this verification's: id, repository, commits
    and GPU. Its manifest is read by the engine's own reader (`read_manifest`), which
    refuses a bundle with more than one: what is checked here is what the engine reads.
    What is wrong, as the `bundle-rejected` reason's parameters (the template words it)."""
    try:
        with Bundle(path, limits) as bundle:
            m = read_manifest(bundle, path.name)
    except InputError as exc:
        return {"what": "unreadable", "detail": str(exc).replace(str(path), path.name)}

    def shown(x: object) -> str:
        return "" if x is None else str(x)[:80]

    for k, want in (("verification_id", ident["id"]), ("repo", ident["repo"])):
        if m.get(k) != want:
            return {"what": "field", "field": k, "got": shown(m.get(k)), "want": want}
    for side in ("base", "head"):
        got = (m.get(side) or {}).get("sha") if isinstance(m.get(side), dict) else None
        if got != ident[side]:
            return {"what": "side", "field": side, "got": shown(got), "want": ident[side]}
    if str(m.get("gpu", "")).upper().replace("NVIDIA ", "") != gpu.upper():
        return {"what": "gpu", "field": "gpu", "got": shown(m.get("gpu"))[:40], "want": gpu}
    return None


# ----------------------------------------------------------------------- evidence


def build_evidence(svc: EffectPorts, vid: str, e: M.BuildEvidence) -> M.Event | Outcome | None:
    with svc.db.session() as s:
        v = _load(s, vid)
        if v.state != M.State.INGESTING.value:
            return None
        keys = [(j.gpu, j.bundle_key) for j in v.jobs if j.state == M.JobState.KEPT.value]
        missing = {
            j.gpu: messages.reason_plain(r)
            for j in v.jobs
            if j.state != M.JobState.KEPT.value and (r := Reason.from_json(j.end_reason))
        }
        cand = Candidate.model_validate(v.candidate, context={"stored": True})
        history = _history(s, v)
        repo, base, head, number = v.repo, v.base_sha, v.head_sha, v.pr_number
    attribution = svc.github.attribution(repo, base, head, number)
    with tempfile.TemporaryDirectory(prefix="rsi-publish-") as tmp:
        work = Path(tmp)
        bundles = []
        limits = bundle_limits(svc)
        for gpu, key in keys:
            assert key is not None
            p = work / f"{gpu.lower()}.zip"
            try:
                save_to_file(svc.store, key, p, limits.max_bytes)
            except ArtifactTooLarge as exc:
                return M.EvidenceFailed(Reason(R.BUNDLE_UNREADABLE, {"problem": str(exc)[:2000]}))
            bundles.append(p)
        try:
            ev, sources = build(
                Inputs(
                    bundles=bundles,
                    candidate=cand,
                    history=history,
                    attribution=attribution,
                    missing=missing,
                    github_url=svc.settings.web_url,
                    policy=svc.repo_config(repo).config.policy(),
                    limits=limits,
                )
            )
        except InputError as exc:
            return M.EvidenceFailed(Reason(R.BUNDLE_UNREADABLE, {"problem": str(exc)[:2000]}))
        out = work / "out"
        write(
            ev,
            sources,
            out,
            None,
            report_url=svc.report_url(vid),
            plot_url=lambda name: svc.plot_url(vid, name),
        )
        (out / "comment.md").write_text(
            render_comment(ev, svc.report_url(vid), limit=COMMENT_LIMIT - LEDGER_BUDGET),
            encoding="utf-8",
        )
        svc.store.put_tree(f"reports/{vid}", out)

    def record(s: Session, row: Verification) -> None:
        row.verdict, row.reason, row.claim_status = ev.verdict, ev.reason, ev.claim.status
        row.published_at = utcnow()
        row.attribution = [a.model_dump(mode="json") for a in attribution]
        row.headline = {
            g: {
                **(r.headline.model_dump() if r.headline else {}),
                "verdict": r.verdict,
                "claim_status": r.claim_status,
                # The GPU time of each side (start-ups included) and, for rounds until
                # decided, why they stopped: for the ledger and /rsi status.
                "gpu_minutes": r.gpu_minutes.model_dump(include={"base", "head", "total"})
                if r.gpu_minutes
                else None,
                "stopped": r.adaptive.stopped if r.adaptive else None,
                # What it cost, for the estimates of later verifications (bot/estimate.py).
                "cost": r.cost.model_dump() if r.cost else None,
            }
            for g, r in ev.gpus.items()
        }
        _record_baseline(s, row, sources)

    log.info("%s of %s: evidence built, %s", vid, repo, ev.verdict)
    return Outcome(M.EvidenceBuilt(ev.verdict), record)


def _history(s: Session, v: Verification) -> list[HistoryEntry]:
    from sqlalchemy import select

    rows = s.scalars(
        select(BaselineMeasurement).where(
            BaselineMeasurement.repo == v.repo,
            BaselineMeasurement.task == v.task,
            BaselineMeasurement.verification_id != v.id,
        )
    )
    return [
        HistoryEntry(
            task=r.task,
            gpu=r.gpu,
            mode=r.mode,
            concurrency=r.concurrency,
            metric=r.metric,
            value=r.value,
            sha=r.sha,
            measured_at=r.measured_at.isoformat(),
            fingerprint=r.fingerprint,
        )
        for r in rows
    ]


def _record_baseline(s: Session, v: Verification, sources: list[Source]) -> None:
    """Every measurement of the base (main) side joins the history."""
    for src in sources:
        fp = src.manifest.environment.get("base") or {}
        for lr in src.runs:
            if lr.run.side != "base" or not lr.usable:
                continue
            for metric in ("throughput_qps", "latency_p95_s", "audio_ttfp_p95_s"):
                value = lr.metrics.get(metric)
                if value is not None:
                    s.add(
                        BaselineMeasurement(
                            repo=v.repo,
                            task=v.task,
                            gpu=src.gpu,
                            mode=lr.run.mode,
                            concurrency=lr.run.concurrency,
                            metric=metric,
                            value=value,
                            sha=v.base_sha,
                            verification_id=v.id,
                            fingerprint=fp,
                        )
                    )


# ----------------------------------------------------------------------- saying it


def _report_text(svc: EffectPorts, vid: str, name: str) -> str | None:
    return report_text(svc.store, vid, name)


def upsert_comment(svc: EffectPorts, vid: str, e: M.UpsertComment) -> None:
    """The PR's one evidence comment, rendered from what is true now. Only the App's own
    comment is edited; a deleted one is written again."""
    with svc.db.session() as s:
        v = _load(s, vid)
        if v.pr_number is None:
            return
        repo, number = v.repo, v.pr_number
        good = store.latest_published(s, repo, number)
        good_id, good_base = (good.id, good.base_sha) if good is not None else (None, "")
        pr = store.pull_request(s, repo, number)
        known = pr.comment_id if pr is not None else None
        look = pr is None or not pr.opened_by_app  # a PR the App opened has none to find
        base_ref = pr.base_ref if pr is not None else "main"
    evidence = _report_text(svc, good_id, "comment.md") if good_id else None
    moved = _main_moved(svc, repo, number, good_base) if good_id else 0
    with svc.db.session() as s:
        body = messages.evidence_comment(
            store.of_pull(s, repo, number),
            current=vid,
            evidence=evidence,
            good=store.get(s, good_id) if good_id else None,
            main_moved=moved,
            base_ref=base_ref,
            ledger_budget=LEDGER_BUDGET,
            web_url=svc.settings.web_url,
        )
    link = svc.report_url(good_id or vid)
    if known is not None and svc.github.edit_own_comment(repo, number, known, body, link):
        return
    found = svc.github.find_own_comment(repo, number, COMMENT_MARKER) if look else None
    if found is not None and svc.github.edit_own_comment(repo, number, found, body, link):
        cid = found
    else:
        cid = svc.github.create_comment(repo, number, body, link)
    with svc.db.session() as s:
        pr = store.pull_request(s, repo, number)
        if pr is not None:
            pr.comment_id = cid


def _main_moved(svc: EffectPorts, repo: str, number: int, measured_base: str) -> int:
    """How many commits the PR's base branch is past the measured base (0 when the PR's
    own record of its base is the measured one, which saves a request)."""
    pull = svc.github.pull(repo, number, max_age_s=PULL_MAX_AGE_S)
    if pull.base_sha == measured_base:
        return 0
    try:
        return svc.github.commits_ahead(repo, measured_base, pull.base_ref)
    except GitHubError as exc:
        if exc.status in (404, 422):
            return 0
        raise


def update_pr_body(svc: EffectPorts, vid: str, e: M.UpdatePrBody) -> None:
    """The PR body's evidence section from what is true now: the latest published
    evidence, and, while a newer commit is being measured, a line at its top saying the
    figures are for the older commit (a PR with nothing published keeps the section it
    was opened with)."""
    with svc.db.session() as s:
        v = _load(s, vid)
        if v.pr_number is None or v.watch or v.inquiry_id is not None:
            return
        repo, number = v.repo, v.pr_number
        good = store.latest_published(s, repo, number)
        if good is None or (v.state == M.State.PUBLISHED.value and good.id != vid):
            return  # nothing published yet, or a late update of older evidence
        newer = [
            x
            for x in store.active(s, repo, number)
            if x.state != M.State.AWAITING_APPROVAL.value  # not measured until approved
            and store.aware(x.created_at) > store.aware(good.published_at or good.created_at)
        ]
        note = messages.body_pending(max(newer, key=lambda x: x.created_at), good) if newer else ""
        gid = good.id
    section = _report_text(svc, gid, "pr-body.md")
    if section is None:
        return
    if note:
        section = with_pending_note(section, note)
    pull = svc.github.pull(repo, number, max_age_s=PULL_MAX_AGE_S)
    new = fit_pr_body(replace_pr_section(pull.body, section))
    if new != pull.body:
        svc.github.edit_pull_body(repo, number, new, svc.report_url(gid))


def with_pending_note(section: str, note: str) -> str:
    """The section with `note` as a paragraph under its heading (the first line that
    starts with `###`), or first when it has none."""
    lines = section.split("\n")
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("###")), 0)
    return "\n".join([*lines[:at], "", note, *lines[at:]])


def fit_pr_body(body: str) -> str:
    """A body over GitHub's limit loses the end of the author's text, never the evidence
    section (which `replace_pr_section` puts last)."""
    if len(body) <= COMMENT_LIMIT or SECTION_START not in body:
        return body
    start = body.index(SECTION_START)
    author, section = body[:start], body[start:]
    notice = "\n\n… (cut to fit GitHub's limit)\n\n"
    keep = max(0, COMMENT_LIMIT - len(section) - len(notice))
    return author[:keep] + notice + section if keep else section[:COMMENT_LIMIT]


def _series_filters(v: Verification) -> dict[str, str]:
    """The history page's filters that show a watch's own series: its task, and its GPU
    kind and mode when it measures one."""
    out = {"task": v.task}
    if len(v.gpus or []) == 1:
        out["gpu"] = str(v.gpus[0])
    if len(v.modes or []) == 1:
        out["mode"] = str(v.modes[0])
    return out


def complete_check_run(svc: EffectPorts, vid: str, e: M.CompleteCheckRun) -> None:
    with svc.db.session() as s:
        v = _load(s, vid)
        if v.check_run_id is None:
            return
        repo, cid, watch = v.repo, v.check_run_id, v.watch
        series = _series_filters(v)
        if v.state == M.State.PUBLISHED.value:
            check = _report_text(svc, vid, "check.md") or ""
            title, summary = messages.check_published(v, check)
        else:
            title, summary = messages.check_ended(v)
    svc.github.update_check_run(
        repo,
        cid,
        title=title,
        summary=summary,
        conclusion=e.conclusion,
        details_url=svc.history_url(repo, **series) if watch else svc.report_url(vid),
        actions=[] if e.drop_actions else None,
    )


def record_history(svc: EffectPorts, vid: str, e: M.RecordHistory) -> None:
    """The watch's published result, a point of each series it measured (one per GPU
    kind: its headline row), fed to the series' change detector."""
    text = _report_text(svc, vid, "evidence.json")
    if text is None:
        raise LookupError(f"{vid}: no evidence.json in the artifact store")
    with svc.db.session() as s:
        v = _load(s, vid)
        doc = json.loads(text)
        if v.inquiry_id is not None:
            inquiries.note_step(s, v, doc)  # the step's own row, for `bot.inquiries`
            if not inquiries.remeasures(s, v):
                return  # a bisection step is not a merge's point
        now = utcnow()
        for found in watch.record(s, v, doc, now):
            if found.side != "regression":
                continue  # an improvement is marked on the page, nobody is alerted
            series = found.series
            bad = inquiries.suspect(s, series, found.commits, found.side) or v.head_sha
            good = inquiries.parent_of(s, series, bad) or v.base_sha
            inquiries.open_for(s, series, found.side, good, bad, now)


def notify(svc: EffectPorts, vid: str, e: M.Notify) -> None:
    with svc.db.session() as s:
        v = _load(s, vid)
        if v.pr_number is None:
            return
        repo, number = v.repo, v.pr_number
        body = messages.notify(v, e.user, svc.report_url(vid))
    svc.github.create_comment(repo, number, body)


def reply(svc: EffectPorts, vid: str, e: M.Reply) -> None:
    with svc.db.session() as s:
        v = _load(s, vid)
        if v.pr_number is None:
            return
        repo, number = v.repo, v.pr_number
    svc.github.create_comment(repo, number, messages.answer(e.user, e.reason))


def end_verification(svc: EffectPorts, vid: str, e: M.EndVerification) -> None:
    from bot import observability

    with svc.db.session() as s:
        repo = _load(s, vid).repo
    why = messages.reason(e.reason) if e.reason else ""
    log.info("%s of %s ended %s%s", vid, repo, e.state.value, f": {why}" if why else "")
    observability.count_verification_end(e.state.value)


EXECUTORS: dict[type[Any], Executor] = {
    M.EnsurePullRequest: ensure_pull_request,
    M.EnsureCheckRun: ensure_check_run,
    M.Dispatch: dispatch,
    M.CheckRunInProgress: check_run_in_progress,
    M.CancelRun: cancel_run,
    M.Ingest: ingest,
    M.BuildEvidence: build_evidence,
    M.RecordHistory: record_history,
    M.UpsertComment: upsert_comment,
    M.UpdatePrBody: update_pr_body,
    M.CompleteCheckRun: complete_check_run,
    M.Notify: notify,
    M.Reply: reply,
    M.EndVerification: end_verification,
}
