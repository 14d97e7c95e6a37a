"""Processing stored webhook deliveries, and finding the lost ones again.

A delivery is claimed atomically (a re-queued copy of its job then finds it taken or
done and does nothing), handed to the handlers, and marked done. A handler's exception
ends it `failed` once, with one log record, unless it is an outage a retry may outlast
(`transient`): only those are retried by the queue. Deliveries whose job
was lost are queued again by the reconciler; deliveries GitHub could not make to us
(the acknowledgement answered 500 during a database outage) are redelivered on request.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import select, update

from bot import handlers
from bot.github.api import GitHubError, github_outage
from bot.models import Delivery, utcnow
from bot.pull_lease import Busy

if TYPE_CHECKING:
    from bot.db import Database
    from bot.services import Services

log = logging.getLogger(__name__)

DELIVERY_GRACE_S = 60
MAX_DELIVERY_ATTEMPTS = 20
# How far back the reconciler looks for failed hook deliveries, every minute: an hour
# covers any outage it could have missed while it ran; GitHub keeps three days, which
# `rsi-bot reconcile --redeliver-since` reaches after a longer one.
REDELIVERY_WINDOW_S = 3600
# A delivery's claim: long enough for its handlers (GitHub calls, a few transitions), short
# enough that one cut off by a crash or a database outage is taken up again soon.
CLAIM_S = 120


# What reading a payload of another shape raises (`payload["comment"]["user"]` on a
# payload without it): never a GitHub or database outage, which are retried.
_PAYLOAD_SHAPE = (KeyError, TypeError, AttributeError)


def process(svc: Services, delivery_id: str) -> None:
    now = utcnow()
    with svc.db.session() as s:
        claimed = s.execute(
            update(Delivery)
            .where(
                Delivery.id == delivery_id,
                Delivery.status == "queued",
                (Delivery.claimed_until.is_(None)) | (Delivery.claimed_until < now),
            )
            .values(
                attempts=Delivery.attempts + 1,
                claimed_until=now + dt.timedelta(seconds=min(CLAIM_S, svc.settings.RSI_LEASE_S)),
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
    ctx = handlers.Context(svc=svc, event=event, payload=payload, delivery_id=delivery_id)
    try:
        handled = handlers.dispatch(ctx)
    except _PAYLOAD_SHAPE as exc:
        # A field missing or of another type: the same payload fails the same way on
        # every retry, so it fails once, saying what was wrong.
        why = f"the payload could not be read ({type(exc).__name__}: {exc})"[:2000]
        _fail(svc, delivery_id, why)
        log.error("delivery %s (%s.%s): %s", delivery_id, event, action, why[:300])
        return
    except Exception as exc:
        if not transient(exc):
            # A bug, or GitHub refusing: every retry would fail the same way, with a
            # traceback each. It fails once, with one record (the traceback is the bug's).
            _fail(svc, delivery_id, f"{type(exc).__name__}: {exc}"[:2000])
            log.exception(
                "delivery %s (%s.%s) of %s failed, not retried: %s: %s",
                delivery_id,
                event,
                action,
                ctx.repo or "-",
                type(exc).__name__,
                str(exc)[:300],
            )
            return
        try:
            with svc.db.session() as s:
                d = s.get(Delivery, delivery_id)
                assert d is not None
                d.error = f"{type(exc).__name__}: {exc}"[:2000]
                d.claimed_until = None  # free for the retry
        except Exception:  # the database is down too: the claim runs out instead
            log.warning("delivery %s: could not release its claim", delivery_id)
        log.warning(
            "delivery %s (%s.%s) of %s failed: %s: %s",
            delivery_id,
            event,
            action,
            ctx.repo or "-",
            type(exc).__name__,
            str(exc)[:300],
        )
        raise
    with svc.db.session() as s:
        d = s.get(Delivery, delivery_id)
        assert d is not None
        d.status, d.processed_at, d.error = "done", utcnow(), None
        d.claimed_until = None
        d.result = {"handlers": handled}
    log.info(
        "delivery %s (%s.%s) of %s done: %s",
        delivery_id,
        event,
        action,
        ctx.repo or "-",
        handled or "no handler",
    )


def _fail(svc: Services, delivery_id: str, why: str) -> None:
    """End the delivery `failed`, saying why: nobody takes it up again."""
    with svc.db.session() as s:
        d = s.get(Delivery, delivery_id)
        assert d is not None
        d.status, d.processed_at, d.claimed_until, d.error = "failed", utcnow(), None, why


def transient(exc: BaseException) -> bool:
    """An outage a later attempt may outlast: GitHub unreachable, failing (5xx) or
    rate-limiting (429, a 403 that says so), the database or the queue unreachable, or
    another command of the same PR being acted on (`Busy`). Anything else (a bug,
    GitHub's refusal) fails the same way on every attempt."""
    import psycopg
    import redis
    from sqlalchemy.exc import InterfaceError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if github_outage(exc) or isinstance(exc, Busy):
        return True
    if isinstance(exc, GitHubError):
        return False  # GitHub's refusal
    return isinstance(
        exc,
        OperationalError
        | InterfaceError
        | PoolTimeout
        | psycopg.OperationalError
        | psycopg.InterfaceError
        | redis.ConnectionError
        | redis.TimeoutError
        | OSError,
    )


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


LANE_CHUNK = 20  # payloads read at once: up to 25 MB each


def lanes(db: Database, ids: list[str]) -> dict[str, str]:
    """The repository each stored delivery is about, read from its payload (a delivery
    about no repository, such as an installation event, has none): the queue's lanes.
    Read a few at a time, so a backlog of large payloads costs a few payloads of memory."""
    found: dict[str, str] = {}
    for at in range(0, len(ids), LANE_CHUNK):
        chunk = ids[at : at + LANE_CHUNK]
        with db.session() as s:
            rows = s.execute(select(Delivery.id, Delivery.payload).where(Delivery.id.in_(chunk)))
            for delivery_id, text in rows:
                lane = lane_of(_json_object(text) or {})
                if lane is not None:
                    found[delivery_id] = lane
    return found


def lane_of(payload: dict[str, Any]) -> str | None:
    repo = payload.get("repository")
    name = repo.get("full_name") if isinstance(repo, dict) else payload.get("repo")
    return name[:200].lower() if isinstance(name, str) and name else None


def grace_s(svc: Services) -> float:
    """How old a still-`queued` delivery must be before it counts as lost. A minute when
    the queue is empty; with a backlog its job is probably still waiting for its
    repository's turn, and queuing it again would only lengthen the backlog, so the
    lease (`RSI_LEASE_S`) applies instead."""
    try:
        backlog = svc.huey.pending_count()
    except Exception:
        log.exception("reconcile: could not read the queue's length")
        backlog = 0
    if backlog:
        log.info(
            "reconcile: %d jobs waiting; deliveries get %d s", backlog, svc.settings.RSI_LEASE_S
        )
        return max(DELIVERY_GRACE_S, svc.settings.RSI_LEASE_S)
    return DELIVERY_GRACE_S


def requeue_lost(svc: Services) -> int:
    """Queue again the deliveries whose job was lost."""
    now = utcnow()
    stale = now - dt.timedelta(seconds=grace_s(svc))
    with svc.db.session() as s:
        lost = list(
            s.scalars(
                select(Delivery.id).where(
                    Delivery.status == "queued",
                    Delivery.received_at < stale,
                    Delivery.attempts < MAX_DELIVERY_ATTEMPTS,
                    (Delivery.claimed_until.is_(None)) | (Delivery.claimed_until < now),
                )
            )
        )
    svc.queue.deliver(lost)
    return len(lost)


def redeliver_failed(svc: Services, window_s: int = REDELIVERY_WINDOW_S) -> int | None:
    """Ask GitHub to redeliver what it could not deliver to us (and we never stored):
    how many were asked for, or None when GitHub could not be asked (logged)."""
    from bot.github.deliveries import redeliver_failed as ask

    since = utcnow() - dt.timedelta(seconds=window_s)
    try:
        return ask(svc.github_app, svc.db.stored_delivery_ids, since)
    except Exception as exc:
        log.warning("reconcile: could not list failed hook deliveries: %s", exc)
        return None
