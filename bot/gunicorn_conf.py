"""gunicorn settings for the web process (the Procfile's `web:`, and `rsi-bot serve`):

    gunicorn -c python:bot.gunicorn_conf 'bot.web.app:create_app()'

gevent workers (`bot.serving.GeventWorker`): a webhook's acknowledgement is mostly waiting
for PostgreSQL to commit, and a greenlet waits for a fraction of what an OS thread's sleep
and wake-up cost. The waiting deliveries of a worker are committed together
(`bot.delivery_writer`). Measured against gthread workers in bench/README.md.

Slow clients: each connection costs a greenlet, so a worker holds `worker_connections` of
them at once (2,000 connections that send nothing, or a byte a second, leave a signed
webhook answered within a second: tests/test_serve.py); a client has `keepalive` seconds
to send its request line and headers and `bot.serving.BODY_TIMEOUT_S` for its body, then
it is disconnected. (gthread workers give each slow client a thread until it is done:
keep them behind a proxy that buffers requests.)

Two listeners: the public one on `PORT` (0.0.0.0), and `/metrics` on
`METRICS_HOST:METRICS_PORT` (127.0.0.1:9100; `METRICS_PORT=0`: none), which the public
one does not answer unless `METRICS_PUBLIC` is set.

Once a worker has loaded the app, its objects (≈150,000: SQLAlchemy, PyGithub, pydantic,
…) are moved out of the garbage collector's view with `gc.freeze()`, so collections
triggered by request handling no longer walk them. Command-line flags override these;
`WEB_CONCURRENCY`, `GUNICORN_WORKER_CLASS` (e.g. `gthread`, with `GUNICORN_THREADS`) and
`PORT` are read from the environment; `LOG_FORMAT=json` writes gunicorn's own lines as
JSON too. Under gunicorn's command line the App's configuration is checked here, in the
arbiter, before anything is bound (`_check_settings`).
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from typing import Any, NoReturn

from pydantic import ValidationError

from bot.config import MetricsSettings, error_lines
from bot.serving import bind_address, raise_open_files_limit


def _check_settings() -> None:
    """Under gunicorn's own command line (the Procfile's `web:`), validate the App's
    configuration in the arbiter, before it binds or starts a worker: a bad variable (a
    private key that is missing or does not parse) stops gunicorn with one line per
    variable and exit status 2, where a worker failing to build the app would print a
    traceback. `rsi-bot serve` has checked already (it runs gunicorn from Python, which
    does not load `gunicorn.app.wsgiapp`), and `rsi-bot setup` needs none of it."""
    if "gunicorn.app.wsgiapp" not in sys.modules:
        return
    from bot.config import ConfigError, load_settings, loopback_warning

    try:
        settings = load_settings()
    except ConfigError as exc:
        _stop(str(exc))
    warning = loopback_warning(settings.PUBLIC_URL)
    if warning:
        print(warning, file=sys.stderr, flush=True)


def _stop(message: str) -> NoReturn:
    """The configuration's lines on stderr, and exit status 2 (no traceback)."""
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(2)


def _metrics_settings() -> MetricsSettings:
    try:
        return MetricsSettings()
    except ValidationError as exc:
        _stop("\n".join(f"rsi-bot cannot start: {line}" for line in error_lines(exc)))


_check_settings()
_metrics = _metrics_settings()
_port = os.environ.get("PORT", "8000")
if str(_metrics.METRICS_PORT) == _port:
    _stop(f"rsi-bot cannot start: METRICS_PORT and PORT are both {_port}: /metrics needs its own")
bind = [f"0.0.0.0:{_port}"]
if _metrics.METRICS_PORT:
    bind.append(bind_address(_metrics.METRICS_HOST, _metrics.METRICS_PORT))
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "bot.serving.GeventWorker")
worker_connections = 10_000  # gevent: open connections per worker (a greenlet each)
threads = int(os.environ.get("GUNICORN_THREADS", "4"))  # gthread only
keepalive = 5  # gevent: seconds to send the request line and headers; idle keep-alive
# gunicorn's parser rescans the whole header buffer on every read, so its cost grows with
# the square of the headers' size: at its defaults (100 fields of 8 KiB) unsigned clients
# sending 800 KB of headers delayed signed webhooks by seconds. GitHub sends about 15
# short ones, a browser about 20.
limit_request_fields = 40
limit_request_field_size = 4096
timeout = 30  # a webhook's acknowledgement takes milliseconds; GitHub gives up after 10 s
if _metrics.LOG_FORMAT == "json":
    logger_class = "bot.serving.JsonLogger"  # gunicorn's lines as the App's JSON lines
control_socket_disable = True  # no control socket: nothing drives the App through it


def on_starting(server: Any) -> None:
    raise_open_files_limit()  # one file per connection


def post_worker_init(worker: Any) -> None:
    gc.collect()
    gc.freeze()


def worker_exit(server: Any, worker: Any) -> None:
    """The worker's last act: logging's handlers let go while gevent still runs. Left to
    the interpreter's teardown, each handler's weak-reference callback takes logging's
    lock through gevent's torn-down thread module and prints a traceback at every stop."""
    gc.unfreeze()
    logging.shutdown()
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        if isinstance(logger, logging.Logger):
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
    gc.collect()
