"""Operating the App: logs that name the delivery, Sentry without secrets, Prometheus.

* **Logs.** `configure_logging(settings)` is the one place the log format is set (the
  web app and every CLI command call it). Every record carries `delivery_id`, taken from
  a context variable that the webhook endpoint binds for its request and
  the delivery job binds for its job, so each line about a delivery reads
  `… bot.web.webhooks delivery=<X-GitHub-Delivery>: …`. `LOG_FORMAT=json` writes one
  JSON object a line instead; neither writes colour codes to a stream that is not a
  terminal.
* **Sentry.** `init_sentry(settings, component)` when `SENTRY_DSN` is set, with
  `send_default_pii=False` and a `before_send` that scrubs the App's secrets, credential
  headers, GitHub tokens, private keys, report tokens and request bodies (`Scrubber`).
* **Metrics.** `GET /metrics` answers Prometheus' text format (or OpenMetrics, as the
  scraper asks) on a listener of its own — `METRICS_HOST:METRICS_PORT`, 127.0.0.1:9100 by
  default, which the web process binds beside its public port; the public one answers
  404 unless `METRICS_PUBLIC` is set — from a dedicated `CollectorRegistry`
  (`metrics_registry`): counters of
  webhook deliveries, queue jobs and GitHub requests, plus gauges read on each scrape —
  verifications by state from the database, and GitHub's rate limit as PyGithub last
  saw it in a response (no API call per scrape).

Metrics and processes: counters live in the memory of the process that counts them. Each
gunicorn worker answers `/metrics` with its own counters (so with several workers a scrape
sees one worker's share; scrape each instance, or sum over instances), and the queue
worker's job and GitHub counters are served by `rsi-bot worker --metrics-port N`.
`rsi-bot serve` runs one web worker, its `/metrics` on `METRICS_PORT`, and its queue
worker's on the next port.
The verification gauge is read from the database on every scrape, so it is the same,
and correct, whichever process answers.
"""

from bot.observability.logs import (
    LOG_FORMAT,
    ContextFormatter,
    DeliveryFilter,
    JsonFormatter,
    bind_delivery,
    configure_logging,
    current_delivery,
    delivery_context,
    strip_escapes,
    verification_context,
)
from bot.observability.metrics import (
    DELIVERY_OUTCOMES,
    METRICS,
    UNVERIFIED,
    GitHubRateLimit,
    Metrics,
    VerificationStates,
    count_delivery,
    count_github_response,
    count_verification_end,
    init_app,
    instrument_huey,
    metrics_registry,
    serve_metrics,
)
from bot.observability.sentry import FILTERED, Scrubber, configured_secrets, init_sentry

__all__ = [
    "DELIVERY_OUTCOMES",
    "FILTERED",
    "LOG_FORMAT",
    "METRICS",
    "UNVERIFIED",
    "ContextFormatter",
    "DeliveryFilter",
    "GitHubRateLimit",
    "JsonFormatter",
    "Metrics",
    "Scrubber",
    "VerificationStates",
    "bind_delivery",
    "configure_logging",
    "configured_secrets",
    "count_delivery",
    "count_github_response",
    "count_verification_end",
    "current_delivery",
    "delivery_context",
    "init_app",
    "init_sentry",
    "instrument_huey",
    "metrics_registry",
    "serve_metrics",
    "strip_escapes",
    "verification_context",
]
