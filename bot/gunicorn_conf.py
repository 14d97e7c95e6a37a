"""gunicorn settings for the web process (the Procfile's `web:`):

    gunicorn -c python:bot.gunicorn_conf 'bot.app:create_app()'

Threads let a worker acknowledge other webhooks while one waits on the database. Once a
worker has loaded the app, its objects (≈150,000: SQLAlchemy, PyGithub, pydantic, …) are
moved out of the garbage collector's view with `gc.freeze()`, so collections triggered by
request handling no longer walk them (bench/README.md). Command-line flags override these;
`WEB_CONCURRENCY`, `GUNICORN_THREADS` and `PORT` are read from the environment.
"""

from __future__ import annotations

import gc
import os
from typing import Any

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
worker_class = "gthread"
timeout = 30  # a webhook's acknowledgement takes milliseconds; GitHub gives up after 10 s


def post_worker_init(worker: Any) -> None:
    gc.collect()
    gc.freeze()
