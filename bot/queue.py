"""The job queue (huey, on Redis or SQLite): the tasks the composition root
(`bot.runtime`) gives it, run by name; the queue knows huey, not the App.

Jobs are hints: the database is the truth, and the reconciler re-queues whatever a
killed worker lost (huey does not acknowledge). Retries are scheduled, never slept, so
a GitHub outage does not hold a worker thread while other deliveries wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from huey import Huey, crontab

from bot import observability

log = logging.getLogger(__name__)

DELIVERY_RETRY: dict[str, Any] = {"retries": 6, "retry_delay": 5}


@dataclass(frozen=True)
class Jobs:
    """What each task runs."""

    process_delivery: Callable[[str], None]
    start: Callable[[str], None]
    drain: Callable[[str], None]
    write: Callable[[str, int], float | None]  # a PR's outbox: seconds until due again
    reconcile: Callable[[], None]


class Queue:
    """The queue's task handles, bound to one huey instance and the jobs they run."""

    def __init__(self, huey: Huey, jobs: Jobs) -> None:
        observability.instrument_huey(huey)

        def process_delivery(delivery_id: str) -> None:
            with observability.delivery_context(delivery_id):
                jobs.process_delivery(delivery_id)

        def process_deliveries(delivery_ids: list[str]) -> None:
            """One job per delivery, from the batch the web process queued in one go."""
            for delivery_id in delivery_ids:
                self.process_delivery(delivery_id)

        def start(vid: str) -> None:
            jobs.start(vid)

        def drain(vid: str) -> None:
            jobs.drain(vid)

        def write(repo: str, number: int) -> None:
            wait = jobs.write(repo, number)
            if wait is not None and not huey.immediate:
                self._write.schedule((repo, number), delay=max(1.0, wait))

        def reconcile() -> None:
            jobs.reconcile()

        self._huey = huey
        self.process_delivery = huey.task(name="process_delivery", **DELIVERY_RETRY)(
            process_delivery
        )
        self.process_deliveries_task = huey.task(name="process_deliveries", **DELIVERY_RETRY)(
            process_deliveries
        )
        self.start = huey.task(name="start", retries=3, retry_delay=10)(start)
        self._drain = huey.task(name="drain", retries=3, retry_delay=10)(drain)
        self._write = huey.task(name="write", retries=3, retry_delay=10)(write)
        self.reconcile_task = huey.periodic_task(crontab(minute="*"), name="reconcile")(reconcile)
        self.reconcile = reconcile

    def process_deliveries(self, ids: list[str]) -> None:
        self.process_deliveries_task(ids)

    def drain(self, vid: str) -> None:
        self._drain(vid)

    def write(self, repo: str, number: int) -> None:
        """Carry out what is written in the PR's outbox (`bot.pull_writes`)."""
        self._write(repo, number)

    def drain_later(self, vid: str, seconds: float) -> None:
        """Come back when the next effect is due (an immediate queue runs it now, which
        finds it not yet due and waits for the reconciler)."""
        if self._huey.immediate:
            return
        self._drain.schedule((vid,), delay=max(1.0, seconds))
