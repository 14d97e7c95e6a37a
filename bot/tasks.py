"""Queue jobs. Each is idempotent and retried with exponential backoff by huey; the
reconciler re-queues whatever a killed worker lost, because huey does not acknowledge."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import orjson
from huey import Huey, crontab
from sqlalchemy import select

from bot import observability, runtime

log = logging.getLogger(__name__)

RETRY: dict[str, Any] = {"retries": 8, "retry_delay": 2, "retry_backoff": 2}


def process_delivery(delivery_id: str) -> None:
    with observability.delivery_context(delivery_id):
        _process_delivery(delivery_id)


def process_deliveries(delivery_ids: list[str]) -> None:
    """One job per delivery, from the batch the web process queued in one go."""
    tasks = runtime.current().tasks
    for delivery_id in delivery_ids:
        tasks.process_delivery(delivery_id)


def _process_delivery(delivery_id: str) -> None:
    """Claim the delivery atomically (a re-queued copy of the job then finds it taken or
    done and does nothing), run its handlers, mark it done."""
    from sqlalchemy import update

    from bot.features import router
    from bot.models import Delivery, utcnow

    rt = runtime.current()
    now = utcnow()
    with rt.db.session() as s:
        claimed = s.execute(
            update(Delivery)
            .where(
                Delivery.id == delivery_id,
                Delivery.status == "queued",
                (Delivery.claimed_until.is_(None)) | (Delivery.claimed_until < now),
            )
            .values(
                attempts=Delivery.attempts + 1,
                claimed_until=now + dt.timedelta(seconds=rt.settings.RSI_LEASE_S),
            )
        ).rowcount  # type: ignore[attr-defined]
        if not claimed:
            return
        d = s.get(Delivery, delivery_id)
        assert d is not None
        event, payload = d.event, _json_object(d.payload)
        if payload is None:  # signed by GitHub yet not JSON: nothing to retry
            d.status, d.processed_at, d.claimed_until = "failed", utcnow(), None
            d.error = "the body is not a JSON object"
            log.error("delivery %s (%s): the body is not a JSON object", delivery_id, event)
            return
        # Left to this job by the webhook's acknowledgement, which does not parse.
        action, installation = payload.get("action"), payload.get("installation")
        action = d.action = action[:60] if isinstance(action, str) else None
        if isinstance(installation, dict) and isinstance(installation.get("id"), int):
            d.installation_id = installation["id"]
    try:
        handled = router.dispatch(event, payload)
    except Exception as exc:
        with rt.db.session() as s:
            d = s.get(Delivery, delivery_id)
            assert d is not None
            d.error = f"{type(exc).__name__}: {exc}"[:2000]
            d.claimed_until = None  # free for the retry
        log.exception("delivery %s (%s) failed", delivery_id, event)
        raise
    with rt.db.session() as s:
        d = s.get(Delivery, delivery_id)
        assert d is not None
        d.status, d.processed_at, d.error = "done", utcnow(), None
        d.claimed_until = None
        d.result = {"handlers": handled}
    log.info("delivery %s (%s.%s) done: %s", delivery_id, event, action, handled or "no handler")


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def start(vid: str) -> None:
    from bot import flow

    flow.start(runtime.current(), vid)


def dispatch(vid: str) -> None:
    from bot import flow

    flow.dispatch(runtime.current(), vid)


def locate_runs(vid: str) -> None:
    from huey.exceptions import RetryTask

    from bot import flow

    if not flow.locate_runs(runtime.current(), vid):
        raise RetryTask("dispatched run not listed yet", delay=15)


def ingest(vid: str, gpu: str) -> None:
    from bot import publish

    publish.ingest(runtime.current(), vid, gpu)


def publish_(vid: str) -> None:
    from bot import publish

    publish.publish(runtime.current(), vid)


DELIVERY_GRACE_S = 60


def delivery_grace_s(rt: runtime.Runtime) -> float:
    """How old a still-`queued` delivery must be before it counts as lost. A minute when
    the queue is empty; with a backlog its job is probably still waiting (the queue is
    first in, first out), and queuing it again would only lengthen the backlog, so the
    lease (`RSI_LEASE_S`) applies instead."""
    try:
        backlog = rt.huey.pending_count()
    except Exception:
        log.exception("reconcile: could not read the queue's length")
        backlog = 0
    if backlog:
        log.info(
            "reconcile: %d jobs waiting; deliveries get %d s", backlog, rt.settings.RSI_LEASE_S
        )
        return max(DELIVERY_GRACE_S, rt.settings.RSI_LEASE_S)
    return DELIVERY_GRACE_S


def reconcile() -> None:
    """Re-queue lost work; time out runners that never reported back."""
    from bot import flow
    from bot.models import DISPATCHED, RUNNING, TIMED_OUT, Delivery, Verification, utcnow

    rt = runtime.current()
    now = utcnow()
    grace = delivery_grace_s(rt)
    with rt.db.session() as s:
        stale = now - dt.timedelta(seconds=grace)
        lost = list(
            s.scalars(
                select(Delivery.id).where(
                    Delivery.status == "queued",
                    Delivery.received_at < stale,
                    Delivery.attempts < 20,
                    (Delivery.claimed_until.is_(None)) | (Delivery.claimed_until < now),
                )
            )
        )
        steps = flow.stuck(rt, s)
        limit = now - dt.timedelta(seconds=rt.settings.RSI_RUN_TIMEOUT_S)
        for v in s.scalars(
            select(Verification).where(Verification.state.in_((DISPATCHED, RUNNING)))
        ):
            if v.dispatched_at is not None and flow._aware(v.dispatched_at) < limit:
                flow.cancel_runs(rt, v)
                flow.end(
                    rt,
                    s,
                    v,
                    TIMED_OUT,
                    "The GPU runners did not report back within "
                    f"{rt.settings.RSI_RUN_TIMEOUT_S // 60} minutes; the runs were "
                    "cancelled.",
                )
    for delivery_id in lost:
        rt.tasks.process_delivery(delivery_id)
    for vid, step in steps:
        log.warning("re-queueing %s of %s (lease expired)", step, vid)
        if step == "start":
            rt.tasks.start(vid)
        elif step == "publish":
            rt.tasks.publish(vid)
        else:
            rt.tasks.ingest(vid, step.split(":", 1)[1])


class Tasks:
    """The queue's task handles, bound to one huey instance (SQLite or Redis)."""

    def __init__(self, huey: Huey) -> None:
        observability.instrument_huey(huey)
        self.process_delivery = huey.task(name="process_delivery", **RETRY)(process_delivery)
        self.process_deliveries = huey.task(name="process_deliveries", **RETRY)(process_deliveries)
        self.start = huey.task(name="start", **RETRY)(start)
        self.dispatch = huey.task(name="dispatch", **RETRY)(dispatch)
        self.locate_runs = huey.task(name="locate_runs", retries=40)(locate_runs)
        self.ingest = huey.task(name="ingest", **RETRY)(ingest)
        self.publish = huey.task(name="publish", **RETRY)(publish_)
        self.reconcile = huey.periodic_task(crontab(minute="*"), name="reconcile")(reconcile)
