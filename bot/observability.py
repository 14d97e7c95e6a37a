"""Operating the App: logs that name the delivery, Sentry without secrets, Prometheus.

* **Logs.** `configure_logging(settings)` is the one place the log format is set (the
  web app and every CLI command call it). Every record carries `delivery_id`, taken from
  a context variable that the webhook endpoint binds for its request and
  `tasks.process_delivery` binds for its job, so each line about a delivery reads
  `… bot.webhooks delivery=<X-GitHub-Delivery>: …`.
* **Sentry.** `init_sentry(settings, component)` when `SENTRY_DSN` is set, with
  `send_default_pii=False` and a `before_send` that scrubs the App's secrets, credential
  headers, GitHub tokens, private keys, report tokens and request bodies (`Scrubber`).
* **Metrics.** `GET /metrics` answers Prometheus' text format (or OpenMetrics, as the
  scraper asks) from a dedicated `CollectorRegistry` (`metrics_registry`): counters of
  webhook deliveries, queue jobs and GitHub requests, plus gauges read on each scrape —
  verifications by state from the database, and GitHub's rate limit as PyGithub last
  saw it in a response (no API call per scrape).

Metrics and processes: counters live in the memory of the process that counts them. Each
gunicorn worker answers `/metrics` with its own counters (so a scrape through a load
balancer sees one worker's share; scrape each instance, or sum over instances), and the
queue worker's job and GitHub counters are served by `rsi-bot worker --metrics-port N`.
`rsi-bot serve` runs web and worker in one process, so its `/metrics` has everything.
The verification gauge is read from the database on every scrape, so it is the same,
and correct, whichever process answers.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from flask import Blueprint, Flask, Response, current_app, request
from prometheus_client import CollectorRegistry, Counter, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from sentry_sdk.types import Event

    from bot.config import Settings
    from bot.db import Database
    from bot.gh import GitHubApp
    from bot.runtime import Runtime

log = logging.getLogger(__name__)

# --- logs that carry the delivery id ----------------------------------------------------

_delivery: contextvars.ContextVar[str | None] = contextvars.ContextVar("rsi_delivery", default=None)
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
        record.context = f" delivery={delivery}" if delivery else ""
        return super().format(record)


def _install_record_factory() -> None:
    previous = logging.getLogRecordFactory()
    if getattr(previous, "rsi_delivery", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.delivery_id = _delivery.get()
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


# --- Sentry -------------------------------------------------------------------------------

FILTERED = "[Filtered]"
# Keys whose values never leave the process, wherever they appear in an event (headers,
# frame variables, extra data); compared in lower case, with "-" read as "_".
_SECRET_KEYS = frozenset(
    {
        "authorization",
        "proxy_authorization",
        "cookie",
        "set_cookie",
        "x_hub_signature",
        "x_hub_signature_256",
        "x_rsi_signature_256",
        "webhook_secret",
        "rsi_intake_secret",
        "private_key",
        "pem",
        "client_secret",
        "secret",
        "token",
        "password",
        "sentry_dsn",
        "body",  # raw request bodies in frame variables
        "raw",
    }
)
_SECRET_KEY_PARTS = ("secret", "password", "token", "signature", "private_key")
_PATTERNS = (
    # GitHub tokens: installation, user-to-server, OAuth, personal, refresh; fine-grained.
    re.compile(r"\bgh[opsuvr]_[A-Za-z0-9]{16,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    # JSON web tokens (the App's JWT).
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    # Private keys, whole or cut off; with real or escaped newlines.
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S
    ),
    # HMAC signatures of webhooks and intake requests.
    re.compile(r"sha256=[0-9a-fA-F]{64}"),
)
# Report tokens in URLs (and the setup flow's code and state).
_URL_TOKEN = re.compile(r"((?:^|[?&])(?:token|code|state)=)[^&#\s'\"]+")
_MIN_SECRET = 6  # shorter configured secrets are only matched as whole values


class Scrubber:
    """Sentry's `before_send`: removes every secret from an event, wherever it is.

    Sentry's own scrubbing (with `send_default_pii=False`) knows common header and key
    names only; this also knows the App's secrets by value — so one that ends up in an
    exception message, a log breadcrumb or a frame's local variables is caught too —
    GitHub tokens, keys and signatures by shape, report tokens in URLs, and drops
    request bodies (webhook payloads and candidates are not Sentry's business).
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        values: set[str] = set()
        for s in secrets:
            if not s:
                continue
            values.add(s)
            # Frame variables are reprs: a multi-line key shows its newlines as "\n".
            values.add(s.replace("\n", "\\n"))
            values.add(s.strip().replace("\n", "\\n"))
        self._long = sorted((v for v in values if len(v) >= _MIN_SECRET), key=len, reverse=True)
        self._short = frozenset(v for v in values if len(v) < _MIN_SECRET)

    def text(self, value: str) -> str:
        if value in self._short:
            return FILTERED
        for secret in self._long:
            if secret in value:
                value = value.replace(secret, FILTERED)
        for pattern in _PATTERNS:
            value = pattern.sub(FILTERED, value)
        return _URL_TOKEN.sub(r"\1" + FILTERED, value)

    def _secret_key(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        k = key.lower().replace("-", "_")
        return k in _SECRET_KEYS or any(part in k for part in _SECRET_KEY_PARTS)

    def scrub(self, node: Any) -> Any:
        if isinstance(node, str):
            return self.text(node)
        if isinstance(node, dict):
            return {
                k: (FILTERED if self._secret_key(k) and v is not None else self.scrub(v))
                for k, v in node.items()
            }
        if isinstance(node, list | tuple):
            return [self.scrub(v) for v in node]
        return node

    def __call__(self, event: Event, hint: dict[str, Any]) -> Event:
        req: Any = event.get("request")
        if isinstance(req, dict):
            for key in ("data", "cookies"):
                if key in req:
                    req[key] = FILTERED
        scrubbed: Event = self.scrub(event)
        return scrubbed


def _url_password(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def configured_secrets(settings: Settings) -> list[str]:
    """Every secret the configuration holds, as plain text (for the `Scrubber`)."""
    found = [
        settings.WEBHOOK_SECRET.get_secret_value(),
        settings.RSI_INTAKE_SECRET.get_secret_value(),
    ]
    if settings.PRIVATE_KEY is not None:
        found.append(settings.PRIVATE_KEY.get_secret_value())
    with contextlib.suppress(OSError):  # PRIVATE_KEY_PATH unreadable: nothing to hide
        found.append(settings.private_key())
    if settings.SENTRY_DSN is not None:
        found.append(settings.SENTRY_DSN.get_secret_value())
    for url in (settings.DATABASE_URL, settings.REDIS_URL):
        password = _url_password(url)
        if password:
            found.append(password)
    return found


_sentry_component: str | None = None


def init_sentry(settings: Settings, component: str) -> bool:
    """Report errors to Sentry when `SENTRY_DSN` is set; True when it is.

    `component` (web, worker, serve, …) becomes the `component` tag. Once per process:
    `rsi-bot serve` initialises it as "serve" before `create_app` would as "web".
    """
    global _sentry_component
    if settings.SENTRY_DSN is None:
        return False
    if _sentry_component is not None:
        return True
    import sentry_sdk

    scrubber = Scrubber(configured_secrets(settings))
    sentry_sdk.init(
        dsn=settings.SENTRY_DSN.get_secret_value(),
        send_default_pii=False,
        before_send=scrubber,
        before_send_transaction=scrubber,
        max_request_body_size="never",
    )
    sentry_sdk.get_global_scope().set_tag("component", component)
    _sentry_component = component
    return True


# --- metrics ------------------------------------------------------------------------------

DELIVERY_OUTCOMES = ("accepted", "duplicate", "rejected")
UNVERIFIED = "(unverified)"  # the event of a delivery whose signature did not verify
# huey's signals → the `outcome` of rsi_jobs_total; "error" becomes "failed" when the
# attempt was the last one.
_JOB_OUTCOMES = {
    "complete": "success",
    "error": "error",
    "retrying": "retry",
    "canceled": "canceled",
    "expired": "expired",
    "revoked": "revoked",
    "locked": "locked",
    "timeout": "timeout",
    "rate-limited": "rate-limited",
    "interrupted": "interrupted",
}


class Metrics:
    """The process's counters; each `metrics_registry` exposes the same ones."""

    def __init__(self) -> None:
        self.deliveries = Counter(
            "rsi_webhook_deliveries",
            "Webhook deliveries received, by event and outcome (accepted, duplicate, "
            "rejected); the event of a delivery that failed its signature check is "
            f"{UNVERIFIED!r}.",
            ["event", "outcome"],
            registry=None,
        )
        self.jobs = Counter(
            "rsi_jobs",
            "Queue job attempts by task and outcome: success; error (raised, will be "
            "retried); failed (raised, no retries left); retry (re-queued); or huey's "
            "signal name (expired, revoked, canceled, locked, timeout, interrupted).",
            ["task", "outcome"],
            registry=None,
        )
        self.github_requests = Counter(
            "rsi_github_requests",
            "HTTP responses from the GitHub API by method and status; each retried attempt counts.",
            ["method", "status"],
            registry=None,
        )

    def collectors(self) -> list[Collector]:
        return [self.deliveries, self.jobs, self.github_requests]


METRICS = Metrics()


def count_delivery(event: str, outcome: str) -> None:
    METRICS.deliveries.labels(event=event or "(none)", outcome=outcome).inc()


def count_github_response(method: str, status: int) -> None:
    METRICS.github_requests.labels(method=method.upper(), status=str(status)).inc()


def instrument_huey(huey: Any) -> None:
    """Count every job attempt of this huey instance by task and outcome (signals)."""
    if getattr(huey, "rsi_metrics", False):
        return

    def on_signal(signal: str, task: Any, *args: Any, **kwargs: Any) -> None:
        outcome = _JOB_OUTCOMES.get(signal)
        if outcome is None:
            return
        if outcome == "error" and not getattr(task, "retries", 0):
            outcome = "failed"
        METRICS.jobs.labels(task=str(getattr(task, "name", "?")), outcome=outcome).inc()

    huey.signal()(on_signal)
    huey.rsi_metrics = True


class VerificationStates(Collector):
    """`rsi_verifications{state}` from the database on each scrape (every known state,
    zeros included, so a state that empties reads 0 rather than vanishing)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "rsi_verifications", "Verifications by state (from the database).", labels=["state"]
        )

    def collect(self) -> Iterable[Metric]:
        from sqlalchemy import func, select

        from bot.models import ACTIVE, FINAL, Verification

        try:
            with self.db.session() as s:
                rows = s.execute(
                    select(Verification.state, func.count()).group_by(Verification.state)
                ).all()
        except Exception:
            log.exception("metrics: could not count verifications")
            return []
        counts = dict.fromkeys((*ACTIVE, *FINAL), 0)
        counts.update({str(state): int(n) for state, n in rows})
        family = self._family()
        for state, n in counts.items():
            family.add_metric([state], n)
        return [family]


class GitHubRateLimit(Collector):
    """GitHub's primary rate limit per client ("app" for the App's JWT, otherwise the
    installation id), as the latest response's `X-RateLimit-*` headers said — PyGithub
    keeps them on each requester, so a scrape costs no API call."""

    def __init__(self, github: GitHubApp) -> None:
        self.github = github

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        labels = ["installation"]
        return (
            GaugeMetricFamily(
                "rsi_github_rate_limit_remaining",
                "Requests left in GitHub's rate-limit window (latest response).",
                labels=labels,
            ),
            GaugeMetricFamily(
                "rsi_github_rate_limit_limit",
                "Size of GitHub's rate-limit window (latest response).",
                labels=labels,
            ),
            GaugeMetricFamily(
                "rsi_github_rate_limit_reset_timestamp_seconds",
                "When GitHub's rate-limit window resets (Unix time, latest response).",
                labels=labels,
            ),
        )

    def collect(self) -> Iterable[Metric]:
        remaining, limit, reset = self._families()
        for who, (left, size, resets) in sorted(self.github.rate_limits().items()):
            remaining.add_metric([who], left)
            limit.add_metric([who], size)
            reset.add_metric([who], resets)
        return [remaining, limit, reset]


def metrics_registry(rt: Runtime, *, process: bool = True) -> CollectorRegistry:
    """A dedicated registry (not prometheus_client's global one) with the process's
    counters and this runtime's database and GitHub gauges."""
    registry = CollectorRegistry(auto_describe=True)
    for collector in METRICS.collectors():
        registry.register(collector)
    registry.register(VerificationStates(rt.db))
    registry.register(GitHubRateLimit(rt.github))
    if process:
        ProcessCollector(registry=registry)
    return registry


bp = Blueprint("observability", __name__)


@bp.get("/metrics")
def metrics() -> Response:
    registry: CollectorRegistry = current_app.extensions["rsi_metrics"]
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return Response(encoder(registry), headers={"Content-Type": content_type})


@bp.teardown_app_request
def _unbind(exc: BaseException | None) -> None:
    bind_delivery(None)


def init_app(app: Flask, rt: Runtime) -> None:
    """`/metrics` and the per-request delivery binding for the App's Flask app."""
    app.extensions["rsi_metrics"] = metrics_registry(rt)
    app.register_blueprint(bp)


def serve_metrics(rt: Runtime, port: int, host: str = "0.0.0.0") -> Callable[[], None]:
    """Serve `/metrics` on its own port (the queue worker has no web server); returns a
    function that stops it."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, host, registry=metrics_registry(rt))
    stopping = threading.Event()

    def stop() -> None:
        if not stopping.is_set():
            stopping.set()
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

    return stop
