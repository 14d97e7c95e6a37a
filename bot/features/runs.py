"""The runner repository's workflow runs and jobs, matched to the verifications that
dispatched them and told to the machine.

A run is ours when it comes from the runner repository, the configured workflow and a
`workflow_dispatch`; it is matched by the run id GitHub returned at dispatch. The
run-name (`rsi verify <id> <gpu>`) is a fallback for GitHub Enterprise, which returns
no id: it only ever names a job that has no run yet, so a foreign run with a copied name
cannot end a verification whose real run is going. A second run for a job that has one
(a dispatch repeated after a crash) is cancelled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bot.github.api import Failure, GitHubError
from bot.verification import machine as M
from bot.verification import steps, store
from bot.verification.effects import RUN_NAME
from bot.verification.ports import StepPorts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Run:
    """A workflow run as a webhook told of it."""

    repo: str
    id: int
    path: str
    event: str | None
    title: str
    html_url: str | None
    conclusion: str


def _ours(p: StepPorts, run: Run) -> bool:
    if run.repo != p.settings.RSI_RUNNER_REPO:
        return False
    path = run.path.split("@")[0]
    if path and path != f".github/workflows/{p.settings.RSI_WORKFLOW}":
        return False
    return run.event in (None, "workflow_dispatch")


def _match(p: StepPorts, run: Run, *, requested: bool) -> tuple[str, str] | None:
    """(verification, GPU) of the run, or None when it is not one of ours; the run's id
    learnt by its job (and a second run of a job cancelled, when `requested`)."""
    if not _ours(p, run):
        return None
    with p.db.session() as s:
        job = store.job_by_run_id(s, run.id)
        if job is not None:
            return job.verification_id, job.gpu
        m = RUN_NAME.match(run.title)
        if m is None:
            return None
        v = store.get(s, m.group(1))
        job = next((j for j in v.jobs if j.gpu == m.group(2).upper()), None) if v else None
        if job is None:
            return None
        which = (job.verification_id, job.gpu)
        duplicate = job.workflow_run_id is not None and job.workflow_run_id != run.id
        found = None if job.workflow_run_id is not None else which
    if duplicate:
        if requested:
            # A second run for a job that has one: the machine cancels it.
            log.warning("run %s: a second run for %s %s", run.id, *which)
            steps.apply(p, which[0], M.RunLocated(which[1], run.id, None))
        return None
    if found is not None:
        steps.apply(p, found[0], M.RunLocated(found[1], run.id, run.html_url))
    return found


def requested(p: StepPorts, run: Run) -> None:
    _match(p, run, requested=True)


def started(p: StepPorts, run: Run) -> None:
    found = _match(p, run, requested=False)
    if found:
        steps.apply(p, found[0], M.RunStarted(found[1]))


def completed(p: StepPorts, run: Run) -> None:
    found = _match(p, run, requested=False)
    if found:
        where = _where_it_failed(p, run) if run.conclusion in FAILED else Failure()
        event = M.RunCompleted(found[1], run.conclusion, run.html_url, where.step, where.lines)
        steps.apply(p, found[0], event)


FAILED = frozenset({"failure", "startup_failure", "timed_out"})


def _where_it_failed(p: StepPorts, run: Run) -> Failure:
    """The failed step and the last log lines, for the words that end the job; nothing
    when GitHub cannot say (the job still ends, with its conclusion)."""
    try:
        return p.github.failed_step(p.settings.RSI_RUNNER_REPO, run.id)
    except GitHubError as exc:
        log.info("run %s: where it failed is unknown (%s)", run.id, exc)
        return Failure()


def job_started(p: StepPorts, repo: str, run_id: int) -> None:
    """A job picked up by a runner: the run is really running."""
    if repo != p.settings.RSI_RUNNER_REPO:
        return
    with p.db.session() as s:
        row = store.job_by_run_id(s, run_id)
        found = (row.verification_id, row.gpu) if row is not None else None
    if found:
        steps.apply(p, found[0], M.RunStarted(found[1]))
