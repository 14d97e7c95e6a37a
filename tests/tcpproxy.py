"""A TCP proxy that a test can cut, to take a shared server "down" for one client only.

Stopping the shared PostgreSQL would break every other test and person using it; putting
this proxy between the App and PostgreSQL gives the App the same view of an outage —
live connections drop, new ones are refused — while the server itself keeps running.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

_CHUNK = 65536


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream``. :meth:`down` closes the listener and
    cuts every live connection (new ones are then refused); :meth:`up` listens again on
    the same port. Use ``with TcpProxy(host, port) as proxy:``."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.connections_made = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._sockets: set[socket.socket] = set()
        self._pumps: set[threading.Thread] = set()

    def __enter__(self) -> TcpProxy:
        self.up()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    @property
    def is_up(self) -> bool:
        return self._listener is not None

    def up(self) -> None:
        """Listen (again, on the same port once one was chosen)."""
        if self._listener is not None:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._acceptor = threading.Thread(
            target=self._accept, args=(listener,), name=f"tcpproxy-{self.port}", daemon=True
        )
        self._acceptor.start()

    def down(self) -> None:
        """Stop listening and cut every live connection; returns once all is closed."""
        listener, self._listener = self._listener, None
        acceptor, self._acceptor = self._acceptor, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            listener.close()
        if acceptor is not None:
            acceptor.join(5)
        with self._lock:
            live, self._sockets = list(self._sockets), set()
            pumps, self._pumps = list(self._pumps), set()
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for pump in pumps:
            pump.join(5)
        for sock in live:
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was shut down
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # went down meanwhile
                    client.close()
                    server.close()
                    return
                self.connections_made += 1
                self._sockets |= {client, server}
                for src, dst in ((client, server), (server, client)):
                    pump = threading.Thread(target=_pump, args=(src, dst), daemon=True)
                    self._pumps.add(pump)
                    pump.start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy one direction until either side closes, then half-close the other side."""
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
