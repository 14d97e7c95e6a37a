"""Logs that name what they are about: every record carries the delivery and the
verification being handled (context variables bound by the webhook endpoint, the
delivery job and the effects drain), so a line reads
`… bot.deliveries delivery=<X-GitHub-Delivery>: …` or `… verification=v-…: …`."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

_delivery: contextvars.ContextVar[str | None] = contextvars.ContextVar("rsi_delivery", default=None)
_verification: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rsi_verification", default=None
)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s"
_MAX_ID = 100  # the deliveries table's id column


class _HasLogLevel(Protocol):
    @property
    def LOG_LEVEL(self) -> str: ...


def current_delivery() -> str | None:
    """The delivery being handled in this context (request or job), if any."""
    return _delivery.get()


def bind_delivery(delivery_id: str | None) -> None:
    """Name the delivery for the rest of this request; `init_app` unbinds it when the
    request ends (gunicorn's sync workers reuse the thread for the next request)."""
    _delivery.set(delivery_id[:_MAX_ID] if delivery_id else None)


@contextmanager
def delivery_context(delivery_id: str) -> Iterator[None]:
    """Name the delivery for the log lines emitted inside the block."""
    token = _delivery.set(delivery_id[:_MAX_ID])
    try:
        yield
    finally:
        _delivery.reset(token)


@contextmanager
def verification_context(verification_id: str) -> Iterator[None]:
    """Name the verification for the log lines emitted inside the block."""
    token = _verification.set(verification_id[:_MAX_ID])
    try:
        yield
    finally:
        _verification.reset(token)


class DeliveryFilter(logging.Filter):
    """Sets `record.delivery_id` (for a handler that a deployment configures itself,
    e.g. through gunicorn's `--log-config`); `configure_logging` does it for every
    record through the log-record factory instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "delivery_id", None) is None:
            record.delivery_id = _delivery.get()
        return True


class ContextFormatter(logging.Formatter):
    """`LOG_FORMAT`: ` delivery=<id>` after the logger's name while a delivery is handled."""

    def __init__(self, fmt: str = LOG_FORMAT) -> None:
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        delivery = getattr(record, "delivery_id", None)
        verification = getattr(record, "verification_id", None)
        record.context = (f" delivery={delivery}" if delivery else "") + (
            f" verification={verification}" if verification else ""
        )
        return super().format(record)


def _install_record_factory() -> None:
    previous = logging.getLogRecordFactory()
    if getattr(previous, "rsi_delivery", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.delivery_id = _delivery.get()
        record.verification_id = _verification.get()
        return record

    factory.rsi_delivery = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def configure_logging(settings: _HasLogLevel) -> None:
    """The process's log set-up, idempotent: every record gets `delivery_id`; the root
    logger gets `LOG_LEVEL` and, unless something (a test runner, gunicorn's log config)
    already handles it, a stderr handler with `LOG_FORMAT`."""
    _install_record_factory()
    root = logging.getLogger()
    root.setLevel(settings.LOG_LEVEL.upper())
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(ContextFormatter())
        root.addHandler(handler)
