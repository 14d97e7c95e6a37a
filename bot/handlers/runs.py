"""`workflow_run` / `workflow_job` from the runner repository, handed to
`bot.features.runs` (which tells whether a run is one of ours)."""

from __future__ import annotations

from bot.features import runs
from bot.handlers.context import Context


def _run(ctx: Context) -> runs.Run | None:
    run = ctx.payload["workflow_run"]
    run_id = run.get("id")
    if not isinstance(run_id, int):
        return None
    event = run.get("event")
    url = run.get("html_url")
    return runs.Run(
        repo=ctx.repo,
        id=run_id,
        path=str(run.get("path") or ""),
        event=str(event) if event is not None else None,
        title=str(run.get("display_title") or run.get("name") or ""),
        html_url=str(url) if url else None,
        conclusion=str(run.get("conclusion") or "unknown"),
    )


def run_requested(ctx: Context) -> None:
    if (run := _run(ctx)) is not None:
        runs.requested(ctx.svc, run)


def run_started(ctx: Context) -> None:
    if (run := _run(ctx)) is not None:
        runs.started(ctx.svc, run)


def run_completed(ctx: Context) -> None:
    if (run := _run(ctx)) is not None:
        runs.completed(ctx.svc, run)


def job_started(ctx: Context) -> None:
    run_id = ctx.payload["workflow_job"].get("run_id")
    if isinstance(run_id, int):
        runs.job_started(ctx.svc, ctx.repo, run_id)
