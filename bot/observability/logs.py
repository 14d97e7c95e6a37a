"""Logs that name what they are about: every record carries the delivery and the
verification being handled (context variables bound by the webhook endpoint, the
delivery job and the effects drain), so a line reads
`… bot.deliveries delivery=<X-GitHub-Delivery>: …` or `… verification=v-…: …`.

Two formats, chosen by `LOG_FORMAT`: `text` (the line above) and `json` (one object a
line: `time`, `level`, `logger`, `message`, and `delivery` / `verification` when bound,
`exception` when there is one), for a log collector. Neither writes terminal escape
sequences (colour codes) into a stream that is not a terminal: a file or a collector
gets plain text, whatever a message carried (a runner's log, a subprocess's output).
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

_delivery: contextvars.ContextVar[str | None] = contextvars.ContextVar("rsi_delivery", default=None)
_verification: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rsi_verification", default=None
)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s"
_MAX_ID = 100  # the deliveries table's id column


_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
"""Terminal escape sequences: CSI (colours, cursor moves), OSC, and two-byte ones."""


def strip_escapes(text: str) -> str:
    """`text` without terminal escape sequences (and no lone ESC left)."""
    return _ESCAPES.sub("", text).replace("\x1b", "")


class _HasLogLevel(Protocol):
    @property
    def LOG_LEVEL(self) -> str: ...

    @property
    def LOG_FORMAT(self) -> str: ...


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
    """`LOG_FORMAT`: ` delivery=<id>` after the logger's name while a delivery is handled.
    With `plain`, terminal escape sequences are taken out of the line."""

    def __init__(self, fmt: str = LOG_FORMAT, *, plain: bool = False) -> None:
        super().__init__(fmt)
        self.plain = plain

    def format(self, record: logging.LogRecord) -> str:
        delivery = getattr(record, "delivery_id", None)
        verification = getattr(record, "verification_id", None)
        record.context = (f" delivery={delivery}" if delivery else "") + (
            f" verification={verification}" if verification else ""
        )
        line = super().format(record)
        return strip_escapes(line) if self.plain else line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: `time` (UTC, ISO 8601), `level`, `logger`, `message`, and
    `delivery`, `verification` and `exception` when there are. No escape sequences."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": strip_escapes(record.getMessage()),
        }
        for key, attr in (("delivery", "delivery_id"), ("verification", "verification_id")):
            value = getattr(record, attr, None)
            if value:
                doc[key] = value
        if record.exc_info:
            doc["exception"] = strip_escapes(self.formatException(record.exc_info))
        elif record.exc_text:
            doc["exception"] = strip_escapes(record.exc_text)
        return json.dumps(doc, ensure_ascii=False)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def formatter_for(log_format: str, stream: TextIO) -> logging.Formatter:
    """The formatter of `LOG_FORMAT` for a handler writing to `stream`."""
    if log_format == "json":
        return JsonFormatter()
    return ContextFormatter(plain=not _is_terminal(stream))


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
    already handles it, a stderr handler in the format `settings.LOG_FORMAT` names."""
    _install_record_factory()
    root = logging.getLogger()
    root.setLevel(settings.LOG_LEVEL.upper())
    # urllib3 says "Retrying (…)" for each of a request's quick retries; the App logs the
    # step that failed once per attempt itself. Kept when debugging.
    quiet = root.level > logging.DEBUG
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR if quiet else logging.NOTSET)
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(formatter_for(settings.LOG_FORMAT, sys.stderr))
        root.addHandler(handler)
