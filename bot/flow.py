"""A verification's life: open or attach the PR, dispatch the runners, take in bundles,
publish the evidence, or end with a clear reason.

Every step reads the verification from the database, does what is still missing, and
records that it did: a step run twice (a retried job, a reconciler re-queue) does no
harm, and publication happens once.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import secrets
from typing import Any

from github import GithubException
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from bot import texts
from bot.models import (
    ACTIVE,
    CANCELLED,
    DISPATCHED,
    FAILED,
    FINAL,
    INGESTING,
    QUEUED,
    RUNNING,
    TIMED_OUT,
    PullRequest,
    RunnerJob,
    Verification,
    utcnow,
)
from bot.repo_config import ConfigResult
from bot.runtime import Runtime
from evidence.links import compare_url
from evidence.model import Candidate

log = logging.getLogger(__name__)

CHECK_NAME = "rsi/verify"
RUN_NAME = re.compile(r"\brsi verify (v-[0-9a-z]+) ([A-Za-z0-9]+)\b")


def new_id() -> str:
    return f"v-{secrets.token_hex(5)}"


def artifact_name(vid: str, gpu: str) -> str:
    return f"rsi-bundle-{vid}-{gpu.lower()}"


def create_from_candidate(s: Session, rt: Runtime, cand: Candidate) -> Verification:
    gpus = [g.upper() for g in cand.gpus] or ["H100", "H200"]
    v = Verification(
        id=new_id(),
        candidate_id=cand.candidate_id,
        repo=cand.repo,
        pr_number=cand.pull_request,
        task=cand.task,
        base_sha=cand.base_sha,
        head_sha=cand.head.sha,
        head_repo=cand.head.repo,
        head_ref=cand.head.ref,
        gpus=gpus,
        rounds=rt.settings.RSI_DEFAULT_ROUNDS,
        modes=rt.settings.modes,
        candidate=cand.model_dump(mode="json"),
        trigger="intake",
        state=QUEUED,
    )
    s.add(v)
    s.flush()
    for gpu in gpus:
        s.add(RunnerJob(verification_id=v.id, gpu=gpu))
    return v


def _lease(s: Session, rt: Runtime, vid: str, states: tuple[str, ...]) -> Verification | None:
    """Take the verification for one step; None when it is final or another worker has it."""
    now = utcnow()
    until = now + dt.timedelta(seconds=rt.settings.RSI_LEASE_S)
    res = s.execute(
        update(Verification)
        .where(
            Verification.id == vid,
            Verification.state.in_(states),
            (Verification.lease_until.is_(None)) | (Verification.lease_until < now),
        )
        .values(lease_until=until, attempts=Verification.attempts + 1)
    )
    if res.rowcount == 0:  # type: ignore[attr-defined]
        return None
    return s.get(Verification, vid, populate_existing=True)


def _release(v: Verification) -> None:
    v.lease_until = None


def claim(rt: Runtime, vid: str, states: tuple[str, ...]) -> bool:
    """Take the lease in a transaction of its own, so it is visible while the step works
    (and a long step holds no database lock); an expired lease is the reconciler's cue."""
    with rt.db.session() as s:
        return _lease(s, rt, vid, states) is not None


def release(rt: Runtime, vid: str) -> None:
    with rt.db.session() as s:
        v = s.get(Verification, vid)
        if v is not None:
            v.lease_until = None


# ----------------------------------------------------------------------- start


def start(rt: Runtime, vid: str) -> None:
    """Open or attach the PR, create the check run, dispatch one run per GPU."""
    if not claim(rt, vid, (QUEUED,)):
        return
    try:
        with rt.db.session() as s:
            v = s.get(Verification, vid)
            assert v is not None
            repo = v.repo
        result = rt.repo_config(repo)
        with rt.db.session() as s:
            v = s.get(Verification, vid)
            assert v is not None
            _ensure_pr(s, rt, v)
            _report_config_error(rt, s, v, result)
            _ensure_check_run(rt, v)
            busy = s.scalar(
                select(func.count())
                .select_from(Verification)
                .where(
                    Verification.repo == v.repo,
                    Verification.id != v.id,
                    Verification.state.in_((DISPATCHED, RUNNING)),
                )
            )
            if busy is not None and busy >= result.config.budget.max_running:
                # Over the repository's GPU budget: stays queued; the reconciler retries.
                log.info("%s waits: %s verifications running on %s", vid, busy, v.repo)
                _release(v)
                return
            _release(v)
    except Exception:
        release(rt, vid)
        raise
    dispatch(rt, vid)


def _report_config_error(rt: Runtime, s: Session, v: Verification, result: ConfigResult) -> None:
    """A malformed `.github/rsi.yml` is said on the PR (once per distinct problem)."""
    from bot.repo_config import render_error

    error = result.error
    pr = s.scalar(
        select(PullRequest).where(PullRequest.repo == v.repo, PullRequest.number == v.pr_number)
    )
    if pr is None or pr.config_error == error:
        return
    pr.config_error = error
    if error is not None and v.pr_number is not None:
        _upstream(rt, v).get_issue(v.pr_number).create_comment(render_error(result))


def _upstream(rt: Runtime, v: Verification) -> Any:
    if v.installation_id is None:
        v.installation_id = rt.github.installation_id(v.repo)
    return rt.github.repo(v.repo, v.installation_id)


def _ensure_pr(s: Session, rt: Runtime, v: Verification) -> None:
    repo = _upstream(rt, v)
    if v.pr_number is not None:
        pr = repo.get_pull(v.pr_number)
    else:
        cand = Candidate.model_validate(v.candidate)
        url = compare_url(rt.settings.web_url, v.repo, v.base_sha, v.head_sha, v.head_repo)
        body = texts.pr_body(
            cand, url, texts.status_section(v, "queued", "waiting for a GPU runner.")
        )
        head = v.head_ref if v.head_repo == v.repo else f"{v.head_repo.split('/')[0]}:{v.head_ref}"
        base = rt.github.default_branch(v.repo, v.installation_id)
        try:
            pr = repo.create_pull(
                base=base, head=head, title=cand.title, body=body, maintainer_can_modify=True
            )
        except GithubException as exc:
            # A PR from this branch exists already (a redelivery, or opened by hand):
            # attach to it rather than fail.
            if exc.status != 422 or "already exists" not in str(exc.data):
                raise
            pr = next(iter(repo.get_pulls(state="open", head=head)))
        v.pr_number = pr.number
    existing = s.scalar(
        select(PullRequest).where(PullRequest.repo == v.repo, PullRequest.number == pr.number)
    )
    if existing is None:
        s.add(
            PullRequest(
                repo=v.repo,
                number=pr.number,
                head_repo=v.head_repo,
                head_ref=v.head_ref,
                head_sha=pr.head.sha,
                base_ref=pr.base.ref,
                html_url=pr.html_url,
            )
        )


def _ensure_check_run(rt: Runtime, v: Verification) -> None:
    if v.check_run_id is not None:
        return
    repo = _upstream(rt, v)
    run = repo.create_check_run(
        name=CHECK_NAME,
        head_sha=v.head_sha,
        status="queued",
        external_id=v.id,
        details_url=rt.report_url(v.id),
        output={
            "title": "Queued for GPU runners",
            "summary": f"Verification `{v.id}` waits for {', '.join(v.gpus)} runners.",
        },
    )
    v.check_run_id = run.id


# ----------------------------------------------------------------------- dispatch


def dispatch(rt: Runtime, vid: str) -> None:
    """One `workflow_dispatch` per GPU, each recorded as soon as GitHub accepted it, so a
    retry never dispatches the same GPU twice."""
    if not claim(rt, vid, (QUEUED,)):
        return
    try:
        runner = rt.settings.RSI_RUNNER_REPO
        iid = rt.github.installation_id(runner)
        ref = rt.github.default_branch(runner, iid)
        path = f"/repos/{runner}/actions/workflows/{rt.settings.RSI_WORKFLOW}/dispatches"
        with rt.db.session() as s:
            v = s.get(Verification, vid)
            assert v is not None
            pending = [(j.id, _inputs(v, j.gpu)) for j in v.jobs if j.state == "pending"]
        for job_id, inputs in pending:
            status, data = rt.github.request(
                iid, "POST", path, {"ref": ref, "inputs": inputs, "return_run_details": True}
            )
            with rt.db.session() as s:
                job = s.get(RunnerJob, job_id)
                assert job is not None
                job.state, job.dispatched_at = "dispatched", utcnow()
                # 204 (older GHES): the run is found by its run-name later.
                if status == 200 and data.get("workflow_run_id"):
                    job.workflow_run_id = int(data["workflow_run_id"])
                    job.html_url = data.get("html_url")
        with rt.db.session() as s:
            v = s.get(Verification, vid)
            assert v is not None
            v.state, v.dispatched_at = DISPATCHED, utcnow()
            _release(v)
            _check_in_progress(rt, v)
            unlocated = any(j.workflow_run_id is None for j in v.jobs)
    except Exception:
        release(rt, vid)
        raise
    if unlocated:
        rt.tasks.locate_runs.schedule((vid,), delay=10)


def _inputs(v: Verification, gpu: str) -> dict[str, str]:
    """The dispatch contract (architecture.md); workflow inputs travel as strings."""
    return {
        "verification_id": v.id,
        "repo": v.repo,
        "pr": str(v.pr_number or 0),
        "base_sha": v.base_sha,
        "head_repo": v.head_repo,
        "head_sha": v.head_sha,
        "task": v.task,
        "gpu": gpu.lower(),
        "rounds": str(v.rounds),
        "modes": ",".join(v.modes),
    }


def _check_in_progress(rt: Runtime, v: Verification) -> None:
    first = next((j.html_url for j in v.jobs if j.html_url), None)
    lines = [f"- {j.gpu}: {j.html_url or 'dispatched, run not located yet'}" for j in v.jobs]
    kwargs: dict[str, Any] = {
        "status": "in_progress",
        "output": {
            "title": f"Running on {', '.join(v.gpus)}",
            "summary": f"Verification `{v.id}`: base and head are measured in "
            f"interleaved rounds.\n\n" + "\n".join(lines),
        },
    }
    if first:
        kwargs["details_url"] = first
    _upstream(rt, v).get_check_run(v.check_run_id).edit(**kwargs)


def locate_runs(rt: Runtime, vid: str) -> bool:
    """Find dispatched runs by run-name (GitHub Enterprise without `return_run_details`)."""
    runner = rt.settings.RSI_RUNNER_REPO
    with rt.db.session() as s:
        v = s.get(Verification, vid)
        if v is None or v.state not in (DISPATCHED, RUNNING):
            return True
        missing = {j.gpu.lower(): j for j in v.jobs if j.workflow_run_id is None}
        if not missing:
            return True
        repo = rt.github.repo(runner)
        since = (v.dispatched_at or v.created_at) - dt.timedelta(minutes=5)
        for run in repo.get_workflow_runs(
            event="workflow_dispatch", created=f">={since.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        ):
            m = RUN_NAME.search(run.display_title or run.name or "")
            if m and m.group(1) == vid and m.group(2).lower() in missing:
                job = missing.pop(m.group(2).lower())
                job.workflow_run_id, job.html_url = run.id, run.html_url
            if not missing:
                break
        return not missing


# ----------------------------------------------------------------------- runner events


def job_for_run(s: Session, run: dict[str, Any]) -> tuple[RunnerJob | None, bool]:
    """The job a runner's workflow run belongs to, and whether its URL was news to us."""
    job = s.scalar(select(RunnerJob).where(RunnerJob.workflow_run_id == run.get("id")))
    if job is not None:
        return job, False
    m = RUN_NAME.search(str(run.get("display_title") or run.get("name") or ""))
    if not m:
        return None, False
    job = s.scalar(
        select(RunnerJob).where(
            RunnerJob.verification_id == m.group(1), RunnerJob.gpu == m.group(2).upper()
        )
    )
    if job is None or job.workflow_run_id is not None:
        return job, False
    job.workflow_run_id, job.html_url = int(run["id"]), run.get("html_url")
    return job, True


def runner_started(rt: Runtime, run: dict[str, Any]) -> None:
    with rt.db.session() as s:
        job, learnt = job_for_run(s, run)
        if job is None or job.state not in ("dispatched", "pending"):
            return
        job.state = "running"
        v = job.verification
        if v.state == DISPATCHED:
            v.state = RUNNING
        if learnt and v.check_run_id is not None:  # the check run can now link the run
            _check_in_progress(rt, v)


def runner_completed(rt: Runtime, run: dict[str, Any]) -> None:
    conclusion = str(run.get("conclusion") or "unknown")
    with rt.db.session() as s:
        job, _ = job_for_run(s, run)
        if job is None or job.verification.state in FINAL:
            return
        job.conclusion, job.completed_at = conclusion, utcnow()
        v = job.verification
        if conclusion == "success":
            job.state = "completed"
            vid, gpu = v.id, job.gpu
        else:
            job.state = "failed"
            state = {"cancelled": CANCELLED, "timed_out": TIMED_OUT}.get(conclusion, FAILED)
            reason = (
                f"The {job.gpu} runner job ended `{conclusion}`"
                + (f" ({job.html_url})" if job.html_url else "")
                + ": no evidence was measured."
            )
            end(rt, s, v, state, reason)
            return
    rt.tasks.ingest(vid, gpu)


# ----------------------------------------------------------------------- endings


def end(
    rt: Runtime,
    s: Session,
    v: Verification,
    state: str,
    reason: str,
    conclusion: str = "neutral",
    *,
    comment: bool = True,
) -> None:
    """End a verification that will publish no evidence: say why and how to retry."""
    if v.state in FINAL:
        return
    v.state, v.reason, v.lease_until = state, reason, None
    repo = _upstream(rt, v)
    if v.check_run_id is not None:
        repo.get_check_run(v.check_run_id).edit(
            status="completed",
            conclusion=conclusion,
            completed_at=utcnow(),
            output={
                "title": f"Verification {state}",
                "summary": f"{reason}\n\nTo try again, a maintainer can comment `/rsi reverify`.",
            },
        )
    if comment and v.pr_number is not None:
        from bot.publish import upsert_comment

        upsert_comment(rt, s, v, texts.status_comment(v, state, reason, retry=True))


def cancel_runs(rt: Runtime, v: Verification) -> None:
    """Cancel the runner runs still going (a superseded or cancelled verification)."""
    runner = rt.settings.RSI_RUNNER_REPO
    for job in v.jobs:
        if job.workflow_run_id and job.state in ("dispatched", "running"):
            try:
                rt.github.request(
                    rt.github.installation_id(runner),
                    "POST",
                    f"/repos/{runner}/actions/runs/{job.workflow_run_id}/cancel",
                )
            except GithubException as exc:
                if exc.status != 409:  # 409: the run had finished already
                    raise
            job.state = "cancelled"


def stuck(rt: Runtime, s: Session) -> list[tuple[str, str]]:
    """Verifications whose job was lost (lease expired in an active state): step to redo."""
    now = utcnow()
    out = []
    for v in s.scalars(select(Verification).where(Verification.state.in_(ACTIVE))):
        lease = v.lease_until
        if lease is not None and lease.tzinfo is None:
            lease = lease.replace(tzinfo=dt.UTC)
        if lease is not None and lease > now:
            continue
        age = now - _aware(v.updated_at)
        if age.total_seconds() < rt.settings.RSI_LEASE_S:
            continue
        if v.state == QUEUED:
            out.append((v.id, "start"))
        elif v.state == INGESTING:
            out.append((v.id, "publish"))
        else:
            for j in v.jobs:
                if j.state == "completed" and j.bundle_key is None:
                    out.append((v.id, f"ingest:{j.gpu}"))
    return out


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
