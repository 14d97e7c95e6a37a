"""`workflow_run` / `workflow_job` from the runner repository, mapped back by run-name.

Runs of other workflows, or from other repositories, are ignored.
"""

from __future__ import annotations

from bot import flow, runtime
from bot.routing import Payload, Router

router = Router()


def _ours(payload: Payload) -> bool:
    rt = runtime.current()
    return (payload.get("repository") or {}).get("full_name") == rt.settings.RSI_RUNNER_REPO


@router.register("workflow_run", "requested")
def run_requested(payload: Payload) -> None:
    """Learn the run's id from its run-name (older GHES returns none on dispatch)."""
    if _ours(payload):
        rt = runtime.current()
        with rt.db.session() as s:
            flow.job_for_run(s, payload["workflow_run"])  # learns the run id by run-name


@router.register("workflow_run", "in_progress")
def run_started(payload: Payload) -> None:
    if _ours(payload):
        flow.runner_started(runtime.current(), payload["workflow_run"])


@router.register("workflow_run", "completed")
def run_completed(payload: Payload) -> None:
    if _ours(payload):
        flow.runner_completed(runtime.current(), payload["workflow_run"])


@router.register("workflow_job", "in_progress")
def job_started(payload: Payload) -> None:
    """A job picked up by a runner: the run is really running (names come from the run)."""
    if not _ours(payload):
        return
    job = payload["workflow_job"]
    flow.runner_started(
        runtime.current(),
        {"id": job.get("run_id"), "display_title": job.get("workflow_name") or ""},
    )
