"""Prometheus metrics: counters of webhook deliveries, queue jobs, GitHub requests and
ended verifications, plus gauges read on each scrape (verifications by state from the
database, GitHub's rate limit as PyGithub last saw it). `/metrics` is served from a
dedicated registry (`metrics_registry`), on a listener of its own: the web process binds
`METRICS_HOST:METRICS_PORT` beside the public port (`bot.gunicorn_conf`) and answers
`/metrics` there alone, unless `METRICS_PUBLIC` is set."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from flask import Blueprint, Flask, Response, abort, current_app, request
from prometheus_client import CollectorRegistry, Counter, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from bot.observability.logs import bind_delivery

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


class Sessions(Protocol):
    """The database, as the gauges need it: a transaction to read in."""

    def session(self) -> AbstractContextManager[Session]: ...


class RateLimits(Protocol):
    """GitHub's client, as the gauges need it: the rate limits its responses reported."""

    def rate_limits(self) -> dict[str, tuple[int, int, int]]: ...


class Runtime(Protocol):
    """What the metrics read of the App's runtime (`bot.services.Services` is one);
    observability is imported by everything, so it names nothing of the App."""

    @property
    def db(self) -> Sessions: ...
    @property
    def github_app(self) -> RateLimits: ...


log = logging.getLogger(__name__)


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
        self.verifications_ended = Counter(
            "rsi_verifications_ended",
            "Verifications that ended, by final state.",
            ["state"],
            registry=None,
        )

    def collectors(self) -> list[Collector]:
        return [self.deliveries, self.jobs, self.github_requests, self.verifications_ended]


METRICS = Metrics()


def count_delivery(event: str, outcome: str) -> None:
    METRICS.deliveries.labels(event=event or "(none)", outcome=outcome).inc()


def count_verification_end(state: str) -> None:
    METRICS.verifications_ended.labels(state=state).inc()


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

    def __init__(self, db: Sessions) -> None:
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

        from bot.models import ACTIVE_STATES, FINAL_STATES, Verification

        try:
            with self.db.session() as s:
                rows = s.execute(
                    select(Verification.state, func.count()).group_by(Verification.state)
                ).all()
        except Exception:
            log.exception("metrics: could not count verifications")
            return []
        counts = dict.fromkeys((*ACTIVE_STATES, *FINAL_STATES), 0)
        counts.update({str(state): int(n) for state, n in rows})
        family = self._family()
        for state, n in counts.items():
            family.add_metric([state], n)
        return [family]


class GitHubRateLimit(Collector):
    """GitHub's primary rate limit per client ("app" for the App's JWT, otherwise the
    installation id), as the latest response's `X-RateLimit-*` headers said — PyGithub
    keeps them on each requester, so a scrape costs no API call."""

    def __init__(self, github: RateLimits) -> None:
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
    registry.register(GitHubRateLimit(rt.github_app))
    if process:
        ProcessCollector(registry=registry)
    return registry


bp = Blueprint("observability", __name__)


@bp.get("/metrics")
def metrics() -> Response:
    if not _metrics_listener():
        abort(404)
    registry: CollectorRegistry = current_app.extensions["rsi_metrics"]
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return Response(encoder(registry), headers={"Content-Type": content_type})


@bp.teardown_app_request
def _unbind(exc: BaseException | None) -> None:
    bind_delivery(None)


def _metrics_listener() -> bool:
    """Whether this request came in on the metrics listener (the port gunicorn accepted
    it on, not a header), or METRICS_PUBLIC opens `/metrics` on every listener."""
    settings = current_app.extensions["rsi"].settings
    if settings.METRICS_PUBLIC:
        return True
    port = settings.METRICS_PORT
    return bool(port) and request.environ.get("SERVER_PORT") == str(port)


def init_app(app: Flask, rt: Runtime) -> None:
    """`/metrics` (on the metrics listener only, `_metrics_listener`) and the per-request
    delivery binding for the App's Flask app."""
    app.extensions["rsi_metrics"] = metrics_registry(rt)
    app.register_blueprint(bp)


def serve_metrics(rt: Runtime, port: int, host: str = "127.0.0.1") -> Callable[[], None]:
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
