"""`POST /webhooks/github`: verify, persist, acknowledge, queue — nothing else.

The signature is checked on the raw body before anything is parsed; the delivery is
stored before the 202, so an acknowledged delivery is never lost; a redelivery with the
same `X-GitHub-Delivery` is acknowledged and not processed again.
"""

from __future__ import annotations

import logging

import orjson
from flask import Blueprint, Response, current_app, jsonify, request

from bot import observability
from bot.runtime import Runtime
from bot.signatures import valid

log = logging.getLogger(__name__)
bp = Blueprint("webhooks", __name__)


@bp.post("/webhooks/github")
def github_webhook() -> tuple[Response, int]:
    rt: Runtime = current_app.extensions["rsi"]
    body = request.get_data(cache=False)
    delivery = request.headers.get("X-GitHub-Delivery", "")
    observability.bind_delivery(delivery)
    if not valid(
        body,
        request.headers.get("X-Hub-Signature-256"),
        rt.settings.WEBHOOK_SECRET.get_secret_value(),
    ):
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
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        observability.count_delivery(event, "rejected")
        return jsonify(error="body is not JSON"), 400
    if not isinstance(payload, dict):
        observability.count_delivery(event, "rejected")
        return jsonify(error="body is not a JSON object"), 400
    action = payload.get("action") if isinstance(payload.get("action"), str) else None
    installation = (payload.get("installation") or {}).get("id")
    if not rt.db.store_delivery(delivery, "github", event, action, installation, body.decode()):
        log.info("delivery %s already received; not processed again", delivery)
        observability.count_delivery(event, "duplicate")
        return jsonify(ok=True, duplicate=True), 202
    observability.count_delivery(event, "accepted")
    rt.enqueue_delivery(delivery)
    log.info("delivery %s queued (%s.%s)", delivery, event, action)
    return jsonify(ok=True), 202
