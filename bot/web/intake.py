"""`POST /api/v1/candidates`: the search harness promotes a candidate (signed JSON).

401 on a bad signature, 422 with the field errors on a malformed body, a value longer
than its column or holding a NUL character (docs/bounds.md), or one the repository's
`.github/rsi.yml` does not allow (nothing stored), 503 when GitHub cannot
be asked for that file (retry with the same delivery id), 202 with the verification id
otherwise; a repeated `X-RSI-Delivery` gets the first answer.

A candidate is promoted once per repository, by its `candidate_id`: the same candidate
sent again under a new delivery id starts nothing and gets 200 with the verification it
started (`"replayed": true`); the same `candidate_id` with other commits (base or head
SHA) is a 409. Intakes of one candidate are serialised in the transaction that creates
its verification (PostgreSQL: an advisory lock on the repository and candidate id;
SQLite: its one write lock, taken before the lookup).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import orjson
from flask import Blueprint, Response, current_app, jsonify, request
from pydantic import ValidationError
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from bot import observability, triggers
from bot.models import Delivery, Verification
from bot.repo_config import Plan
from bot.services import Services
from bot.verification import store
from bot.web.signed import signed_body
from evidence.model import Candidate

log = logging.getLogger(__name__)
QUEUE_FULL_RETRY_S = 300  # Retry-After of a 429: about the time a verification takes to start
bp = Blueprint("intake", __name__)


# Candidate fields stored in a column of their own, and that column.
_COLUMNS = {
    "candidate_id": Verification.__table__.c.candidate_id,
    "repo": Verification.__table__.c.repo,
    "task": Verification.__table__.c.task,
    "base_sha": Verification.__table__.c.base_sha,
    "head.repo": Verification.__table__.c.head_repo,
    "head.ref": Verification.__table__.c.head_ref,
    "head.sha": Verification.__table__.c.head_sha,
}
INT32_MAX = 2**31 - 1


def out_of_bounds(doc: Any, cand: Candidate) -> list[dict[str, str]]:
    """Values no column can hold: a string longer than its column, a PR number past a
    32-bit integer, a NUL character in any string (PostgreSQL refuses it in text)."""
    errors: list[dict[str, str]] = []
    for name, column in _COLUMNS.items():
        value: Any = cand
        for part in name.split("."):
            value = getattr(value, part)
        most = getattr(column.type, "length", None)
        if isinstance(value, str) and most is not None and len(value) > most:
            errors.append({"field": name, "message": f"longer than {most} characters"})
    if cand.pull_request is not None and not 1 <= cand.pull_request <= INT32_MAX:
        errors.append({"field": "pull_request", "message": "not a pull request number"})
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                errors.append({"field": where or "(root)", "message": "holds a NUL character"})
        elif isinstance(value, dict):
            for k, v in value.items():
                key = f"{where}.{k}" if where else str(k)
                if "\x00" in k:
                    errors.append({"field": key, "message": "key holds a NUL character"})
                stack.append((key, v))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
    return errors[:20]


@dataclass(frozen=True)
class Refused:
    """A candidate body refused: the HTTP status (4xx) and the answer, which says why."""

    status: int
    answer: dict[str, Any]


def parse_candidate(body: bytes) -> Candidate | Refused:
    """The signed body as a candidate, or a 422 naming each field that is wrong. Never
    raises: what the harness sends is data, however it is shaped (property-tested)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return Refused(422, {"error": "body is not JSON", "detail": str(exc)})
    try:
        cand = Candidate.model_validate(doc)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(x) for x in e["loc"]), "message": e["msg"]} for e in exc.errors()
        ]
        return Refused(422, {"error": "malformed candidate", "errors": errors})
    beyond = out_of_bounds(doc, cand)
    if beyond:
        return Refused(422, {"error": "malformed candidate", "errors": beyond})
    return cand


def lock_key(repo: str) -> int:
    """A stable signed 64-bit key for one repository's intakes (PostgreSQL's advisory
    locks take a bigint)."""
    digest = hashlib.blake2b(f"rsi-intake\x00{repo}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def hold_repository(s: Session, repo: str) -> None:
    """Serialise the repository's intakes until the transaction ends, so that the lookup
    of an earlier intake of the candidate, and the count of what waits against the queue
    cap, see whatever another intake committed (two candidates sent together cannot both
    take the last place)."""
    if s.get_bind().dialect.name == "postgresql":
        s.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock_key(repo)})
    else:
        # SQLite has one writer: a write that changes nothing takes its lock now, and the
        # transaction's reads start after it.
        s.execute(text("UPDATE verifications SET id = id WHERE 0"))


def promoted(s: Session, repo: str, candidate_id: str) -> Verification | None:
    """The verification an earlier intake of this candidate started."""
    return s.scalar(
        select(Verification)
        .where(
            Verification.repo == repo,
            Verification.candidate_id == candidate_id,
            Verification.trigger == triggers.INTAKE,
        )
        .order_by(Verification.created_at, Verification.id)
        .limit(1)
    )


def replayed(svc: Services, cand: Candidate, v: Verification) -> tuple[Response, int]:
    """The answer to a candidate promoted before: its verification, or a 409 when the
    commits differ (a changed candidate needs an id of its own)."""
    if (v.base_sha, v.head_sha) != (cand.base_sha, cand.head.sha):
        observability.count_delivery("candidate", "rejected")
        return jsonify(
            error=f"candidate {cand.candidate_id!r} of {cand.repo} was promoted before with "
            f"other commits (base {v.base_sha}, head {v.head_sha}); a changed candidate "
            "needs a candidate_id of its own",
            verification_id=v.id,
        ), 409
    observability.count_delivery("candidate", "duplicate")
    log.info("candidate %s promoted again: verification %s", cand.candidate_id, v.id)
    return jsonify(
        verification_id=v.id,
        pull_request=v.pr_number,
        report_url=svc.report_url(v.id),
        replayed=True,
    ), 200


def queue_full(s: Session, cand: Candidate, most: int) -> tuple[Response, int] | None:
    """A 429 while `most` requests of the repository wait: nothing is recorded, so the
    same candidate (and the same X-RSI-Delivery) is taken when sent again later, where a
    verification made only to be refused would answer every resend with its refusal."""
    waiting = store.queued_requests(s, cand.repo)
    if waiting < most:
        return None
    observability.count_delivery("candidate", "refused")
    answer = jsonify(
        error=f"{cand.repo} has {waiting} verifications waiting, its most "
        f"(RSI_REPO_MAX_QUEUED={most}); nothing was recorded: send the candidate again, "
        "with the same candidate_id and X-RSI-Delivery, once some have started",
        queued=waiting,
        most=most,
    )
    answer.headers["Retry-After"] = str(QUEUE_FULL_RETRY_S)
    return answer, 429


@bp.post("/api/v1/candidates")
def candidates() -> tuple[Response, int]:
    svc: Services = current_app.extensions["rsi"]
    body = signed_body("X-RSI-Signature-256", svc.settings.RSI_INTAKE_SECRET.get_secret_value())
    if body is None:
        return jsonify(error="bad or missing X-RSI-Signature-256"), 401
    delivery = request.headers.get("X-RSI-Delivery", "").strip()
    if not delivery or len(delivery) > 80:
        return jsonify(error="missing or over-long X-RSI-Delivery"), 400
    cand = parse_candidate(body)
    if isinstance(cand, Refused):
        observability.count_delivery("candidate", "rejected")
        return jsonify(cand.answer), cand.status
    key = f"intake:{delivery}"
    with svc.db.session() as s:
        seen = s.get(Delivery, key)
        if seen is not None:
            observability.count_delivery("candidate", "duplicate")
            return jsonify(seen.result or {}), 202
        earlier = promoted(s, cand.repo, cand.candidate_id)
        if earlier is not None:  # no need to ask GitHub for the configuration
            return replayed(svc, cand, earlier)
    try:
        plan = svc.repo_config(cand.repo).config.plan(gpus=cand.gpus or None)
    except Exception as exc:
        log.warning("intake: could not read %s's configuration: %s", cand.repo, exc)
        return jsonify(
            error="GitHub could not be asked for the repository's configuration; "
            "retry with the same X-RSI-Delivery"
        ), 503
    if not isinstance(plan, Plan):
        observability.count_delivery("candidate", "rejected")
        return jsonify(
            error="not allowed by the repository's configuration",
            errors=[{"field": "gpus", "message": plan}],
        ), 422
    try:
        with svc.db.session() as s:
            hold_repository(s, cand.repo)
            earlier = promoted(s, cand.repo, cand.candidate_id)
            if earlier is not None:  # another intake of it committed meanwhile
                return replayed(svc, cand, earlier)
            full = queue_full(s, cand, svc.settings.RSI_REPO_MAX_QUEUED)
            if full is not None:
                return full
            v = store.create(
                s,
                store.NewVerification(
                    repo=cand.repo,
                    pr_number=cand.pull_request,
                    task=cand.task,
                    base_sha=cand.base_sha,
                    head_sha=cand.head.sha,
                    head_repo=cand.head.repo,
                    head_ref=cand.head.ref,
                    gpus=plan.gpus,
                    rounds=plan.rounds,
                    adaptive=plan.adaptive,
                    gpu_minutes=plan.gpu_minutes,
                    control=plan.control,
                    modes=plan.modes,
                    candidate=cand.model_dump(mode="json"),
                    candidate_id=cand.candidate_id,
                    trigger=triggers.INTAKE,
                ),
            )
            answer = {
                "verification_id": v.id,
                "pull_request": v.pr_number,
                "report_url": svc.report_url(v.id),
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
        with svc.db.session() as s:
            seen = s.get(Delivery, key)
            return jsonify(seen.result if seen else {}), 202
    try:
        svc.queue.start(str(answer["verification_id"]))
    except Exception:
        log.exception("could not enqueue %s; the reconciler will", answer["verification_id"])
    observability.count_delivery("candidate", "accepted")
    log.info("candidate %s → verification %s", cand.candidate_id, answer["verification_id"])
    return jsonify(answer), 202
