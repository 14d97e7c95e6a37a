"""gunicorn settings for the web process (the Procfile's `web:`):

    gunicorn -c python:bot.gunicorn_conf 'bot.web.app:create_app()'

gevent workers: a webhook's acknowledgement is mostly waiting for PostgreSQL to commit,
and a greenlet waits for a fraction of what an OS thread's sleep and wake-up cost. The
waiting deliveries of a worker are committed together (`bot.delivery_writer`). Measured
against gthread workers in bench/README.md. Once a worker has loaded the app, its objects
(≈150,000: SQLAlchemy, PyGithub, pydantic, …) are moved out of the garbage collector's
view with `gc.freeze()`, so collections triggered by request handling no longer walk them.
Command-line flags override these; `WEB_CONCURRENCY`, `GUNICORN_WORKER_CLASS` (e.g.
`gthread`, with `GUNICORN_THREADS`) and `PORT` are read from the environment.
"""

from __future__ import annotations

import gc
import os
from typing import Any

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gevent")
worker_connections = 1000  # gevent: open connections per worker
threads = int(os.environ.get("GUNICORN_THREADS", "4"))  # gthread only
timeout = 30  # a webhook's acknowledgement takes milliseconds; GitHub gives up after 10 s


def post_worker_init(worker: Any) -> None:
    gc.collect()
    gc.freeze()
