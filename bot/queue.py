"""The job queue (huey, on Redis or SQLite): the tasks the composition root
(`bot.runtime`) gives it, run by name; the queue knows huey, not the App.

Jobs are hints: the database is the truth, and the reconciler re-queues whatever a
killed worker lost (huey does not acknowledge). Retries are scheduled, never slept, so
a GitHub outage does not hold a worker thread while other deliveries wait. A job of a
repository carries its lane (`lane=`, the repository) and is tagged in that lane each
time it enters the queue (`bot.lanes`): repositories take turns, so one that floods the
App delays the others' jobs by a turn, not by its backlog.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from huey import Huey, crontab
from huey.signals import SIGNAL_ENQUEUED

from bot import observability
from bot.lanes import Lanes

log = logging.getLogger(__name__)

DELIVERY_RETRY: dict[str, Any] = {"retries": 6, "retry_delay": 5}


@dataclass(frozen=True)
class Jobs:
    """What each task runs, and the lane (repository) each job belongs to."""

    process_delivery: Callable[[str], None]
    start: Callable[[str], None]
    drain: Callable[[str], None]
    write: Callable[[str, int], float | None]  # a PR's outbox: seconds until due again
    reconcile: Callable[[], None]
    verification_lane: Callable[[str], str | None]  # a verification id → its repository
    delivery_lanes: Callable[[list[str]], dict[str, str]]  # delivery ids → repositories


class Queue:
    """The queue's task handles, bound to one huey instance and the jobs they run."""

    def __init__(self, huey: Huey, jobs: Jobs) -> None:
        observability.instrument_huey(huey)
        self._huey, self._jobs, self.lanes = huey, jobs, Lanes(huey)
        huey.signal(SIGNAL_ENQUEUED)(self.lanes.tag_on_enqueue)
        lanes = self.lanes

        def process_delivery(delivery_id: str, lane: str | None = None, task: Any = None) -> None:
            lanes.started(task.priority if task else None)
            with observability.delivery_context(delivery_id):
                jobs.process_delivery(delivery_id)

        def process_deliveries(delivery_ids: list[str]) -> None:
            """One job per delivery, in its repository's lane, from the batch the web
            process queued in one go."""
            self.deliver(delivery_ids)

        def start(vid: str, lane: str | None = None, task: Any = None) -> None:
            lanes.started(task.priority if task else None)
            jobs.start(vid)

        def drain(vid: str, lane: str | None = None, task: Any = None) -> None:
            lanes.started(task.priority if task else None)
            jobs.drain(vid)

        def write(repo: str, number: int, lane: str | None = None, task: Any = None) -> None:
            lanes.started(task.priority if task else None)
            wait = jobs.write(repo, number)
            if wait is not None and not huey.immediate:
                self._write.schedule((repo, number), {"lane": repo}, delay=max(1.0, wait))

        def reconcile() -> None:
            jobs.reconcile()

        ctx = {"context": True}
        self._process_delivery = huey.task(name="process_delivery", **DELIVERY_RETRY, **ctx)(
            process_delivery
        )
        self.process_deliveries_task = huey.task(name="process_deliveries", **DELIVERY_RETRY)(
            process_deliveries
        )
        self.start_task = huey.task(name="start", retries=3, retry_delay=10, **ctx)(start)
        self._drain = huey.task(name="drain", retries=3, retry_delay=10, **ctx)(drain)
        self._write = huey.task(name="write", retries=3, retry_delay=10, **ctx)(write)
        self.reconcile_task = huey.periodic_task(crontab(minute="*"), name="reconcile")(reconcile)
        self.reconcile = reconcile

    def process_deliveries(self, ids: list[str]) -> None:
        """Queue a batch of stored deliveries (from the web process: one cheap job, which
        reads their repositories and queues each in its lane)."""
        self.process_deliveries_task(ids)

    def deliver(self, ids: Iterable[str]) -> None:
        """Queue each stored delivery in its repository's lane (read from its payload)."""
        ids = list(ids)
        try:
            lanes = self._jobs.delivery_lanes(ids) if ids and not self._huey.immediate else {}
        except Exception:  # the order is a courtesy: the work is queued whatever
            log.exception("could not read the repositories of %d deliveries", len(ids))
            lanes = {}
        for delivery_id in ids:
            self.process_delivery(delivery_id, lane=lanes.get(delivery_id))

    def process_delivery(self, delivery_id: str, lane: str | None = None) -> None:
        self._process_delivery(delivery_id, lane=lane)

    def start(self, vid: str) -> None:
        self.start_task(vid, lane=self._lane_of(vid))

    def drain(self, vid: str) -> None:
        self._drain(vid, lane=self._lane_of(vid))

    def write(self, repo: str, number: int) -> None:
        """Carry out what is written in the PR's outbox (`bot.pull_writes`)."""
        self._write(repo, number, lane=repo)

    def drain_later(self, vid: str, seconds: float) -> None:
        """Come back when the next effect is due (an immediate queue runs it now, which
        finds it not yet due and waits for the reconciler)."""
        if self._huey.immediate:
            return
        self._drain.schedule((vid,), {"lane": self._lane_of(vid)}, delay=max(1.0, seconds))

    def _lane_of(self, vid: str) -> str | None:
        if self._huey.immediate:
            return None  # run here and now: no order to keep
        try:
            return self._jobs.verification_lane(vid)
        except Exception:  # the order is a courtesy: the work is queued whatever
            log.exception("could not read the repository of %s", vid)
            return None
