"""`POST /api/v1/candidates`: the search harness promotes a candidate (signed JSON).

401 on a bad signature, 422 with the field errors on a malformed body (nothing stored),
202 with the verification id otherwise; a repeated `X-RSI-Delivery` gets the first answer.
"""

from __future__ import annotations

import logging

import orjson
from flask import Blueprint, Response, current_app, jsonify, request
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from bot import flow, observability
from bot.models import Delivery
from bot.runtime import Runtime
from bot.signatures import valid
from evidence.model import Candidate

log = logging.getLogger(__name__)
bp = Blueprint("intake", __name__)


@bp.post("/api/v1/candidates")
def candidates() -> tuple[Response, int]:
    rt: Runtime = current_app.extensions["rsi"]
    body = request.get_data(cache=False)
    if not valid(
        body,
        request.headers.get("X-RSI-Signature-256"),
        rt.settings.RSI_INTAKE_SECRET.get_secret_value(),
    ):
        return jsonify(error="bad or missing X-RSI-Signature-256"), 401
    delivery = request.headers.get("X-RSI-Delivery", "").strip()
    if not delivery:
        return jsonify(error="missing X-RSI-Delivery"), 400
    try:
        cand = Candidate.model_validate(orjson.loads(body))
    except orjson.JSONDecodeError as exc:
        return jsonify(error="body is not JSON", detail=str(exc)), 422
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(x) for x in e["loc"]), "message": e["msg"]} for e in exc.errors()
        ]
        observability.count_delivery("candidate", "rejected")
        return jsonify(error="malformed candidate", errors=errors), 422
    key = f"intake:{delivery}"
    with rt.db.session() as s:
        seen = s.get(Delivery, key)
        if seen is not None:
            observability.count_delivery("candidate", "duplicate")
            return jsonify(seen.result or {}), 202
    try:
        with rt.db.session() as s:
            v = flow.create_from_candidate(s, rt, cand)
            answer = {
                "verification_id": v.id,
                "pull_request": v.pr_number,
                "report_url": rt.report_url(v.id),
            }
            s.add(
                Delivery(
                    id=key,
                    source="intake",
                    event="candidate",
                    action=None,
                    payload=body.decode(),
                    status="done",
                    result=answer,
                )
            )
    except IntegrityError:  # the same delivery raced in; give its answer
        with rt.db.session() as s:
            seen = s.get(Delivery, key)
            return jsonify(seen.result if seen else {}), 202
    try:
        rt.tasks.start(answer["verification_id"])
    except Exception:
        log.exception("could not enqueue %s; the reconciler will", answer["verification_id"])
    observability.count_delivery("candidate", "accepted")
    log.info("candidate %s → verification %s", cand.candidate_id, answer["verification_id"])
    return jsonify(answer), 202
