"""`workflow_run` / `workflow_job` from the runner repository.

A run is ours when it comes from the runner repository, the configured workflow and a
`workflow_dispatch`; it is matched by the run id GitHub returned at dispatch. The
run-name (`rsi verify <id> <gpu>`) is a fallback for GitHub Enterprise, which returns
no id: it only ever names a job that has no run yet, so a foreign run with a copied name
cannot end a verification whose real run is going. A second run for a job that has one
(a dispatch repeated after a crash) is cancelled.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.handlers.context import Context
from bot.verification import machine as M
from bot.verification import steps, store
from bot.verification.effects import RUN_NAME

log = logging.getLogger(__name__)


def _ours(ctx: Context, run: dict[str, Any]) -> bool:
    if ctx.repo != ctx.settings.RSI_RUNNER_REPO:
        return False
    path = str(run.get("path") or "").split("@")[0]
    if path and path != f".github/workflows/{ctx.settings.RSI_WORKFLOW}":
        return False
    event = run.get("event")
    return event in (None, "workflow_dispatch")


def _match(ctx: Context, run: dict[str, Any], *, learn: bool) -> tuple[str, str] | None:
    """(verification, GPU) of the run, or None when it is not one of ours."""
    run_id = run.get("id")
    if not isinstance(run_id, int) or not _ours(ctx, run):
        return None
    with ctx.db.session() as s:
        job = store.job_by_run_id(s, run_id)
        if job is not None:
            return job.verification_id, job.gpu
        m = RUN_NAME.match(str(run.get("display_title") or run.get("name") or ""))
        if m is None:
            return None
        v = store.get(s, m.group(1))
        job = next((j for j in v.jobs if j.gpu == m.group(2).upper()), None) if v else None
        if job is None:
            return None
        which = (job.verification_id, job.gpu)
        duplicate = job.workflow_run_id is not None and job.workflow_run_id != run_id
        found = None if job.workflow_run_id is not None else which
    if duplicate:
        if learn and ctx.payload.get("action") == "requested":
            # A second run for a job that has one: the machine cancels it.
            log.warning("run %s: a second run for %s %s", run_id, *which)
            steps.apply(ctx.svc, which[0], M.RunLocated(which[1], run_id, None))
        return None
    if found is not None and learn:
        steps.apply(ctx.svc, found[0], M.RunLocated(found[1], run_id, run.get("html_url")))
    return found


def run_requested(ctx: Context) -> None:
    _match(ctx, ctx.payload["workflow_run"], learn=True)


def run_started(ctx: Context) -> None:
    found = _match(ctx, ctx.payload["workflow_run"], learn=True)
    if found:
        steps.apply(ctx.svc, found[0], M.RunStarted(found[1]))


def run_completed(ctx: Context) -> None:
    run = ctx.payload["workflow_run"]
    found = _match(ctx, run, learn=True)
    if found:
        conclusion = str(run.get("conclusion") or "unknown")
        steps.apply(ctx.svc, found[0], M.RunCompleted(found[1], conclusion, run.get("html_url")))


def job_started(ctx: Context) -> None:
    """A job picked up by a runner: the run is really running."""
    job = ctx.payload["workflow_job"]
    run_id = job.get("run_id")
    if not isinstance(run_id, int) or ctx.repo != ctx.settings.RSI_RUNNER_REPO:
        return
    with ctx.db.session() as s:
        row = store.job_by_run_id(s, run_id)
        found = (row.verification_id, row.gpu) if row is not None else None
    if found:
        steps.apply(ctx.svc, found[0], M.RunStarted(found[1]))
