"""Serving the App: the web process's gunicorn worker, and gunicorn run from Python.

* `GeventWorker` — the web worker (`bot.gunicorn_conf`). A slow client holds one greenlet
  and nothing else, and cannot hold it for long: it has `keepalive` seconds to send its
  request line and headers (gunicorn's gevent worker reads them under that timeout), and
  `BODY_TIMEOUT_S` more to send its body, which is read before the application runs.
  A client too slow is disconnected.
* `WebServer` — gunicorn's own arbiter, configured by `bot.gunicorn_conf` exactly as the
  Procfile's `web:` is, with the bind and the application given here: `rsi-bot serve`
  (which also runs the queue worker beside it, `rsi-bot worker` in a child process that
  the arbiter restarts when it dies) and `rsi-bot setup` use it.
"""

from __future__ import annotations

import importlib
import io
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.glogging import Logger as GunicornLogger
from gunicorn.workers import ggevent

from bot.bodies import CHUNK, Budget, BudgetSpent, SpooledBody
from bot.observability.logs import JsonFormatter

BODY_TIMEOUT_S = 10.0
"""From the end of its headers, how long a client has to send its whole body. GitHub's
largest payload (25 MB) arrives in well under a second."""

MAX_BODY_BYTES = 25 * 1024 * 1024
"""The largest request body taken (GitHub caps payloads at 25 MB; the Flask app's
MAX_CONTENT_LENGTH is the same); a larger one is answered 413 unread."""

CONFIG_MODULE = "bot.gunicorn_conf"

_TOO_LARGE = b"HTTP/1.1 413 Content Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 10\r\nConnection: close\r\n"
    b"Content-Length: 0\r\n\r\n"
)


JITTER = 0.4
"""Each connection's timeouts are shortened by a random part of up to this fraction, so
that clients that connected together (an attack) are not all dropped, and come back, at
the same instant."""


def _jittered(seconds: float) -> float:
    return seconds * (1 - JITTER * random.random())


class SlowClient(TimeoutError):
    """The request body did not arrive in time."""


def _content_length(req: Any) -> int | None:
    for name, value in req.headers:
        if name == "CONTENT-LENGTH" and str(value).isdigit():
            return int(value)
    return None


class GeventWorker(ggevent.GeventWorker):  # type: ignore[misc]
    """gunicorn's gevent worker that reads a request's body before the application sees
    it, within `BODY_TIMEOUT_S`, as a buffering proxy would: a client too slow is
    disconnected without the application ever running (so thousands of them timing out
    at once cost next to nothing). The bodies it holds are bounded by `bot.bodies`: a
    little memory each and in all, the rest on disk, and 503 once the disk budget is
    spent."""

    def timeout_ctx(self) -> Any:
        """The time a client has for its request line and headers (and an idle keep-alive
        connection for its next request): `keepalive` seconds, less up to `JITTER`."""
        import gevent

        return gevent.Timeout(_jittered(self.cfg.keepalive), False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bodies = Budget()

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> Any:
        body = self._read_body(req, sock, addr) if req.body is not None else None
        try:
            return super().handle_request(listener_name, req, sock, addr)
        finally:
            if body is not None:
                body.release()
                req.body = io.BytesIO()  # read whole already; the parser reads what is left

    def _read_body(self, req: Any, sock: Any, addr: Any) -> SpooledBody:
        import gevent

        declared = _content_length(req)
        if declared is not None and declared > MAX_BODY_BYTES:
            sock.sendall(_TOO_LARGE)
            raise StopIteration("request body too large")
        if req._expected_100_continue:  # the client waits for this before its body
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            req._expected_100_continue = False
        body = SpooledBody(self.bodies)
        try:
            with gevent.Timeout(_jittered(BODY_TIMEOUT_S), SlowClient("request body too slow")):
                while chunk := req.body.read(CHUNK):
                    body.write(chunk)
                    if body.size > MAX_BODY_BYTES:  # chunked, without a length
                        sock.sendall(_TOO_LARGE)
                        raise StopIteration("request body too large")
        except SlowClient:
            body.release()
            self.log.debug("closing the connection of %s: its request body was too slow", addr)
            raise StopIteration("request body too slow") from None
        except BudgetSpent as exc:
            body.release()
            self.log.warning("answered %s 503: %s", addr, exc)
            sock.sendall(_BUSY)
            raise StopIteration("request bodies' budget spent") from None
        except BaseException:
            body.release()
            raise
        req.body = body.reader()
        return body


class JsonLogger(GunicornLogger):  # type: ignore[misc]
    """gunicorn's own lines (its error log, and the access log when one is set) as the
    App's JSON lines, with `LOG_FORMAT=json` (`bot.gunicorn_conf` picks it)."""

    def _set_handler(self, log: Any, output: Any, fmt: Any, stream: Any = None) -> None:
        super()._set_handler(log, output, JsonFormatter(), stream)


# --- gunicorn from Python -------------------------------------------------------------------


def raise_open_files_limit() -> None:
    """Allow as many open files as the hard limit does (each connection is one)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class WebServer(BaseApplication):  # type: ignore[misc]
    """gunicorn with `bot.gunicorn_conf`, then `options` (e.g. `bind`, `workers`) over it.
    `app` builds the WSGI application in each worker; `queue_worker` is the command line
    of a process to run (and restart) beside the web workers; `ready` is called in the
    arbiter with the addresses its listeners are bound to (`host`, `port`: the port the
    system chose for a 0), once bound and before the workers start."""

    def __init__(
        self,
        app: Callable[[], Any],
        options: dict[str, Any],
        queue_worker: list[str] | None = None,
        ready: Callable[[list[tuple[str, int]]], None] | None = None,
    ) -> None:
        self.app_factory = app
        self.options = options
        self.queue_worker = queue_worker
        self.ready = ready
        super().__init__()

    def load_config(self) -> None:
        conf = importlib.import_module(CONFIG_MODULE)
        settings = {**vars(conf), **self.options}
        for name, value in settings.items():
            if name in self.cfg.settings and value is not None:
                self.cfg.set(name, value)
        if self.ready is not None:
            ready = self.ready
            self.cfg.set("when_ready", lambda server: ready(bound_addresses(server)))

    def load(self) -> Any:
        return self.app_factory()

    def run(self) -> None:
        _ServeArbiter(self).run()


class _ServeArbiter(Arbiter):  # type: ignore[misc]
    """The arbiter, also keeping the queue worker process alive when there is one."""

    def __init__(self, app: WebServer) -> None:
        super().__init__(app)
        self.queue_cmd = app.queue_worker
        self.queue_proc: subprocess.Popen[bytes] | None = None

    def manage_workers(self) -> None:
        super().manage_workers()
        if not self.queue_cmd:
            return
        # gunicorn reaps every child (waitpid(-1)); poll() then reads 0 for ours.
        if self.queue_proc is not None and self.queue_proc.poll() is None:
            return
        if self.queue_proc is not None:
            self.log.error(
                "the queue worker (pid %s) exited; starting it again", self.queue_proc.pid
            )
            time.sleep(1)
        self.queue_proc = subprocess.Popen(self.queue_cmd)
        self.log.info("queue worker started (pid %s)", self.queue_proc.pid)

    def stop(self, graceful: bool = True) -> None:
        proc, self.queue_cmd = self.queue_proc, None
        if proc is not None and proc.poll() is None:
            # SIGINT lets huey finish its running jobs; SIGTERM stops at once.
            proc.send_signal(signal.SIGINT if graceful else signal.SIGTERM)
        super().stop(graceful)
        if proc is not None:
            try:
                proc.wait(timeout=self.cfg.graceful_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def queue_worker_command(workers: int, metrics_port: int | None) -> list[str]:
    """`rsi-bot worker` in this interpreter."""
    cmd = [sys.executable, "-m", "bot.cli", "worker", "--workers", str(workers)]
    if metrics_port:
        cmd += ["--metrics-port", str(metrics_port)]
    return cmd


def bound_addresses(server: Any) -> list[tuple[str, int]]:
    """(host, port) of each listening socket of a gunicorn arbiter, as bound."""
    out = []
    for listener in server.LISTENERS:
        name = listener.sock.getsockname()
        if isinstance(name, tuple):  # not a Unix socket
            out.append((str(name[0]), int(name[1])))
    return out


def url_of(host: str, port: int) -> str:
    """`http://host:port`; an address of every interface (0.0.0.0, ::) is reached
    through loopback on this machine."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://{bind_address(host, port)}"


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
