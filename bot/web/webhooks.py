"""`POST /webhooks/github`: verify, persist, acknowledge, queue — nothing else.

The signature is checked on the raw body as it streams, before anything is parsed; the delivery is
stored before the 202, so an acknowledged delivery is never lost; one that cannot be stored
(the database down) is answered 500, which GitHub records as failed without retrying, and
the reconciler asks GitHub to redeliver it (`bot.github.deliveries`); a redelivery with the
same `X-GitHub-Delivery` is acknowledged and not processed again. The payload is parsed by the
job (`bot.deliveries`), and the job is queued off the request thread (`bot.batcher`).
"""

from __future__ import annotations

import logging
import re

from flask import Blueprint, Response, current_app, jsonify, request

from bot import observability
from bot.services import Services
from bot.web.signed import signed_body

log = logging.getLogger(__name__)
bp = Blueprint("webhooks", __name__)
_OBJECT_START = re.compile(rb"[ \t\r\n]*\{")
ACCEPTED = b'{"ok":true}\n'
DUPLICATE = b'{"duplicate":true,"ok":true}\n'
NOT_JSON = "body is not a UTF-8 JSON object (is the webhook's content type application/json?)"


@bp.post("/webhooks/github")
def github_webhook() -> Response | tuple[Response, int]:
    rt: Services = current_app.extensions["rsi"]
    delivery = request.headers.get("X-GitHub-Delivery", "")
    observability.bind_delivery(delivery)
    body = signed_body("X-Hub-Signature-256", rt.settings.WEBHOOK_SECRET.get_secret_value())
    if body is None:
        log.warning("rejected delivery %s: bad or missing signature", delivery or "(none)")
        observability.count_delivery(observability.UNVERIFIED, "rejected")
        return jsonify(error="bad or missing X-Hub-Signature-256"), 401
    event = request.headers.get("X-GitHub-Event", "")
    if not delivery or not event:
        observability.count_delivery(event, "rejected")
        return jsonify(error="missing X-GitHub-Delivery or X-GitHub-Event"), 400
    if event == "ping":
        observability.count_delivery(event, "accepted")
        return jsonify(ok=True, zen="pong"), 200
    # Parsed by the job, not here (the one costly step the 202 can do without); a body
    # that cannot be a JSON object (a form-encoded webhook, say) is refused now.
    text = _object_text(body)
    if text is None:
        observability.count_delivery(event, "rejected")
        return jsonify(error=NOT_JSON), 400
    try:
        stored = rt.db.store_delivery(delivery, "github", event, text)
    except Exception as exc:
        return _not_stored(delivery, event, exc)
    if not stored:
        log.info("delivery %s already received; not processed again", delivery)
        observability.count_delivery(event, "duplicate")
        return Response(DUPLICATE, 202, mimetype="application/json")
    observability.count_delivery(event, "accepted")
    rt.enqueue_delivery(delivery)
    log.debug("delivery %s queued (%s)", delivery, event)  # the job logs it at INFO
    return Response(ACCEPTED, 202, mimetype="application/json")


def _not_stored(delivery: str, event: str, exc: Exception) -> tuple[Response, int]:
    """500 when the delivery could not be stored: GitHub records a failed delivery,
    which the reconciler later asks it to redeliver (GitHub does not retry by itself).
    One log record per delivery; a traceback only when it is not the database being
    unreachable, since an outage would otherwise log one per delivery for nothing."""
    if _unavailable(exc):
        log.error(
            "delivery %s (%s) not stored, answered 500 (redelivery to be requested): %s: %s",
            delivery,
            event,
            type(exc).__name__,
            str(exc).strip().partition("\n")[0],
        )
    else:
        log.exception("delivery %s (%s) not stored, answered 500", delivery, event)
    return jsonify(error="the delivery could not be stored; please redeliver it"), 500


def _unavailable(exc: Exception) -> bool:
    """The database is down or unreachable, as opposed to a bug."""
    import psycopg
    from sqlalchemy.exc import InterfaceError, OperationalError

    return isinstance(
        exc,
        OperationalError
        | InterfaceError
        | psycopg.OperationalError
        | psycopg.InterfaceError
        | ConnectionError,
    )


def _object_text(body: bytes) -> str | None:
    """The body as text when it may be a JSON object: UTF-8 starting with `{`."""
    if not _OBJECT_START.match(body):
        return None
    try:
        return body.decode()
    except UnicodeDecodeError:
        return None
