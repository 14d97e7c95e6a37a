"""Which handler takes which webhook: `(event, action)` → handlers, in the order they
run. One table, written out: a handler is registered by being listed here, never by the
side effect of an import, and a feature module reaches no other."""

from __future__ import annotations

from collections.abc import Callable

from bot.handlers import (
    closing,
    commands,
    installations,
    pushes,
    rerun,
    reviews,
    runs,
    watch,
)
from bot.handlers.context import Context

Handler = Callable[[Context], None]

# (event, action) → handlers; an action of None takes the event whatever its action.
TABLE: dict[tuple[str, str | None], tuple[Handler, ...]] = {
    ("pull_request", "opened"): (pushes.head_seen,),
    ("pull_request", "reopened"): (closing.reopened, pushes.head_seen),
    ("pull_request", "synchronize"): (pushes.pushed,),
    ("pull_request", "closed"): (closing.closed,),
    ("pull_request_review", "submitted"): (reviews.reviewed,),
    ("issue_comment", "created"): (commands.commented,),
    ("check_run", "rerequested"): (rerun.rerun,),
    ("check_run", "requested_action"): (rerun.approve_pressed,),
    ("workflow_run", "requested"): (runs.run_requested,),
    ("workflow_run", "in_progress"): (runs.run_started,),
    ("workflow_run", "completed"): (runs.run_completed,),
    ("workflow_job", "in_progress"): (runs.job_started,),
    ("installation", None): (installations.installation,),
    ("installation_repositories", None): (installations.installation_repositories,),
    ("push", None): (watch.pushed,),
}


def handlers(event: str, action: str | None) -> list[Handler]:
    """Handlers for the event regardless of action, then those for this action."""
    out = list(TABLE.get((event, None), ()))
    if action is not None:
        out += TABLE.get((event, action), ())
    return out
