"""The App in both of its shapes for end-to-end tests of a verification's life: the
embedded default (SQLite, in-process queue) and the deployed one (PostgreSQL, a Redis
queue with a real two-thread consumer). `World.settle()` waits until nothing is left
to do, so a test reads the same on both."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from flask import Flask
from flask.testing import FlaskClient
from huey import Huey
from sqlalchemy import select

from bot import messages, pull_writes, runtime, services
from bot.models import Delivery, Inquiry, Verification, utcnow
from bot.verification import steps
from bot.web.app import create_app
from tests import appkit, schema
from tests.services import postgres_database, redis_db
from tests.standin import GitHubStandIn

SHAPES = ("embedded", "deployed")


@dataclass
class World:
    shape: str
    app: Flask
    svc: services.Services
    github: GitHubStandIn
    client: FlaskClient
    tmp: Path
    # A queued verification may be waiting for the repository's GPU budget: not busy.
    queue_may_wait: bool = False
    consumers: Consumers | None = None  # the deployed shape's queue consumer

    # --------------------------------------------------------------- acting

    def promote(self, delivery: str = "d-1", **changes: Any) -> str:
        body = appkit.dumps(appkit.candidate(**changes))
        resp = self.client.post(
            "/api/v1/candidates", data=body, headers=appkit.intake_headers(body, delivery)
        )
        assert resp.status_code == 202, resp.get_data(as_text=True)
        vid: str = resp.get_json()["verification_id"]
        self.settle()
        return vid

    def deliver(self, event: str, payload: dict[str, Any], delivery: str) -> int:
        body = orjson.dumps(payload)
        resp = self.client.post(
            "/webhooks/github", data=body, headers=appkit.webhook_headers(body, event, delivery)
        )
        return resp.status_code

    def run_id(self, vid: str, gpu: str) -> int:
        job = next(j for j in self.verification(vid).jobs if j.gpu == gpu)
        assert job.workflow_run_id is not None, f"{gpu} has no run"
        return job.workflow_run_id

    def give_bundle(self, vid: str, gpu: str, **spec: Any) -> None:
        self.github.add_artifact(
            appkit.RUNNER,
            self.run_id(vid, gpu),
            f"rsi-bundle-{vid}-{gpu.lower()}",
            appkit.bundle_zip(self.tmp / f"{vid}-{gpu}-{time.monotonic_ns()}", vid, gpu, **spec),
        )

    def complete(
        self, vid: str, gpu: str, conclusion: str = "success", tag: str = "", **failed: Any
    ) -> None:
        """The run ends (`failed_step`, `log`: where a failed one failed, its job's log)."""
        payload = self.github.complete_run(
            appkit.RUNNER, self.run_id(vid, gpu), conclusion, **failed
        )
        assert self.deliver("workflow_run", payload, f"done-{vid}-{gpu}{tag}") == 202

    def finish(self, vid: str, gpu: str = "H200", **spec: Any) -> None:
        """The GPU's run succeeds with a real bundle of this verification."""
        self.give_bundle(vid, gpu, **spec)
        self.complete(vid, gpu)
        self.settle()

    def at_once(self, *calls: Callable[[], object]) -> None:
        """Run the calls in threads released together (two webhooks at one instant)."""
        gate = threading.Barrier(len(calls))
        errors: list[BaseException] = []

        def go(call: Callable[[], object]) -> None:
            gate.wait()
            try:
                call()
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=go, args=(c,)) for c in calls]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors

    def reconcile(self) -> None:
        self.svc.queue.reconcile()
        self.settle()

    # --------------------------------------------------------------- looking

    def verification(self, vid: str) -> Verification:
        with self.svc.db.session() as s:
            v = s.get(Verification, vid)
            assert v is not None
            _ = list(v.jobs)
            return v

    def latest(self, number: int) -> Verification:
        with self.svc.db.session() as s:
            v = s.scalar(
                select(Verification)
                .where(Verification.pr_number == number)
                .order_by(Verification.created_at.desc(), Verification.id.desc())
                .limit(1)
            )
            assert v is not None
            _ = list(v.jobs)
            return v

    def reason(self, vid: str) -> str:
        return messages.end_reason(self.verification(vid))

    def settle(self, timeout: float = 60.0) -> None:
        """Wait until every delivery is handled, no effect is due and the queue is empty."""
        deadline = time.monotonic() + timeout
        while True:
            with self.svc.db.session() as s:
                waiting = s.scalar(select(Delivery.id).where(Delivery.status == "queued").limit(1))
                queued = s.scalar(
                    select(Verification.id).where(Verification.state == "queued").limit(1)
                )
                # A hunt being advanced holds its lease (a worker may be reading GitHub
                # for it): it is busy, though no job is on the queue.
                hunting = s.scalar(
                    select(Inquiry.id).where(Inquiry.lease_until > utcnow()).limit(1)
                )
            if self.queue_may_wait:
                queued = None
            busy = (
                waiting is not None
                or queued is not None
                or hunting is not None
                or steps.stuck_effects(self.svc)
                or pull_writes.stuck(self.svc.db)
            )
            if not busy and (self.consumers is None or self.consumers.idle()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not settled: delivery {waiting}, queued {queued}, effects "
                    f"{steps.stuck_effects(self.svc)}, PR writes {pull_writes.stuck(self.svc.db)}, "
                    f"jobs {self.svc.huey.pending_count()} "
                    f"waiting and {self.svc.huey.scheduled_count()} scheduled"
                )
            if self.consumers is None:
                time.sleep(0.05)
            else:
                self.consumers.wait(0.05)  # wakes when a job ends


class Consumers:
    """What the deployed world's consumer threads are doing, so that `settle` knows the
    queue is idle without waiting for quiet polls: a job taken off Redis is in no table
    and on no queue until it ends, so each thread's reads and running jobs are counted."""

    def __init__(self, huey: Huey) -> None:
        self.huey = huey
        self.changed = threading.Condition()
        self.running: set[str] = set()  # ids of the jobs taken and not ended
        self.moving: set[str] = set()  # … read off the schedule and not yet queued
        self.reads: dict[int, list[int]] = {}  # thread → [reads started, reads ended]
        dequeue, execute = huey.dequeue, huey.execute
        read_schedule, enqueue = huey.read_schedule, huey.enqueue

        def counted_dequeue() -> Any:
            with self.changed:
                me = self.reads.setdefault(threading.get_ident(), [0, 0])
                me[0] += 1
            task = None
            try:
                task = dequeue()
            finally:
                with self.changed:
                    if task is not None:
                        self.running.add(task.id)
                    me[1] += 1
                    self.changed.notify_all()
            return task

        def counted_execute(task: Any, timestamp: Any = None) -> Any:
            try:
                return execute(task, timestamp)
            finally:
                with self.changed:
                    self.running.discard(task.id)
                    self.changed.notify_all()

        def counted_read_schedule(timestamp: Any = None) -> Any:
            with self.changed:  # the scheduler queues what it read right after
                tasks = read_schedule(timestamp)
                self.moving.update(t.id for t in tasks)
            return tasks

        def counted_enqueue(task: Any) -> Any:
            try:
                return enqueue(task)
            finally:
                with self.changed:
                    self.moving.discard(task.id)
                    self.changed.notify_all()

        huey.dequeue = counted_dequeue
        huey.execute = counted_execute
        huey.read_schedule = counted_read_schedule
        huey.enqueue = counted_enqueue

    def wait(self, timeout: float) -> None:
        with self.changed:
            self.changed.wait(timeout)

    def idle(self) -> bool:
        """No job waiting, scheduled or running — and none taken by a read that was under
        way when Redis was asked (it ends within the storage's read timeout)."""
        with self.changed:
            under_way = {t: n[0] for t, n in self.reads.items()}
            if self.moving:
                return False
        if self.huey.pending_count() or self.huey.scheduled_count():
            return False
        with self.changed:
            ended = self.changed.wait_for(
                lambda: all(self.reads[t][1] >= n for t, n in under_way.items()), timeout=5.0
            )
            return ended and not self.running and not self.moving


@contextmanager
def world(
    shape: str, tmp: Path, github: GitHubStandIn, workers: int = 2, **overrides: Any
) -> Iterator[World]:
    values: dict[str, Any] = {"RSI_EFFECT_ATTEMPTS": 3, **overrides}
    if shape == "embedded":
        settings = appkit.settings(tmp, github.url, **values)
        schema.migrated(settings.DATABASE_URL)
        svc = runtime.build(settings, immediate=True)
        app = create_app(svc=svc)
        try:
            yield World(shape, app, svc, github, app.test_client(), tmp)
        finally:
            svc.db.dispose()
        return
    with postgres_database(migrated=True) as db_url, redis_db() as redis_url:
        settings = appkit.settings(
            tmp, github.url, DATABASE_URL=db_url, REDIS_URL=redis_url, **values
        )
        svc = runtime.build(settings)
        # A worker blocks on Redis for a read_timeout before it sees the stop flag: the
        # default second would make every deployed world's teardown wait a second.
        svc.huey.storage.read_timeout = 0.05
        saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        consumer = svc.huey.create_consumer(
            workers=workers, worker_type="thread", periodic=False, check_worker_health=False
        )
        consumers = Consumers(svc.huey)
        consumer.start()
        app = create_app(svc=svc)
        try:
            yield World(shape, app, svc, github, app.test_client(), tmp, consumers=consumers)
        finally:
            consumer.stop(graceful=True)
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            svc.db.dispose()
            svc.huey.storage.conn.close()
