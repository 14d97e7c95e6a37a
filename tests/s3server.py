"""A real S3 endpoint over HTTP for tests: moto's `moto_server` in a subprocess.

One server is started, lazily, per test session (on 127.0.0.1, a free port) and stopped
at the end of the session. Two fixtures:

- `s3_endpoint` (function scope): the server's URL, with dummy AWS credentials, region and
  `AWS_ENDPOINT_URL` set in the environment for that test only (monkeypatch), so nothing
  leaks into other tests. Use it for code that builds its own boto3 client.
- `s3_server` (session scope): the URL only, environment untouched; for session-scoped
  fixtures, which pass `DUMMY_CREDENTIALS` to boto3 themselves (see `s3_client`).

Import them into a test module (`from tests.s3server import s3_endpoint  # noqa: F401`) or
register this module in conftest (`pytest_plugins = ["tests.s3server"]`). The server keeps
its state for the whole session, so give each test its own bucket (`unique_bucket()`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

__all__ = [
    "DUMMY_CREDENTIALS",
    "MotoServer",
    "moto_server",
    "s3_client",
    "s3_endpoint",
    "s3_server",
    "unique_bucket",
]

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# Unset for the test, so a developer's own AWS setup is never used against the fake server.
_UNSET = (
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_ENDPOINT_URL_S3",
)
START_TIMEOUT_S = 30.0


def _moto_command() -> list[str]:
    exe = Path(sys.executable).parent / "moto_server"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("moto_server")
    if found:
        return [found]
    return [sys.executable, "-m", "moto.server"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class MotoServer:
    """`moto_server -H 127.0.0.1 -p <port>` as a subprocess; `url` once it answers."""

    def __init__(self) -> None:
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, attempts: int = 3) -> str:
        last = ""
        for _ in range(attempts):
            port = _free_port()
            self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
            env = {**os.environ, **DUMMY_CREDENTIALS}
            self._proc = subprocess.Popen(
                [*_moto_command(), "-H", "127.0.0.1", "-p", str(port)],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
            )
            self.url = f"http://127.0.0.1:{port}"
            if self._wait_ready():
                return self.url
            last = self._log_tail()
            self.stop()  # the port was taken in between, or it failed: try another
        raise RuntimeError(f"moto_server did not start; its output:\n{last}")

    def _wait_ready(self) -> bool:
        assert self._proc is not None
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                with opener.open(self.url + "/", timeout=1):
                    return True
            except urllib.error.HTTPError as exc:  # it answered, if not with 200
                exc.close()
                return True
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        return False

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log, self._log = self._log, None
        if log is not None:
            log.close()


@contextmanager
def moto_server() -> Iterator[str]:
    """A private server for the duration of a `with` block."""
    server = MotoServer()
    try:
        yield server.start()
    finally:
        server.stop()


_shared: MotoServer | None = None


def _stop_shared() -> None:
    global _shared
    server, _shared = _shared, None
    if server is not None:
        server.stop()


def _shared_url(config: pytest.Config) -> str:
    global _shared
    if _shared is None:
        server = MotoServer()
        server.start()
        _shared = server
        config.add_cleanup(_stop_shared)
    return _shared.url


@pytest.fixture(scope="session")
def s3_server(request: pytest.FixtureRequest) -> str:
    """The session's moto server URL; the environment is left alone."""
    return _shared_url(request.config)


@pytest.fixture
def s3_endpoint(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The session's moto server URL, with dummy credentials in the environment for this
    test only."""
    url = _shared_url(request.config)
    for name in _UNSET:
        monkeypatch.delenv(name, raising=False)
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    missing = str(Path(tempfile.gettempdir()) / "rsi-no-aws-config")
    monkeypatch.setenv("AWS_CONFIG_FILE", missing)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", missing)
    no_proxy = ",".join(
        filter(
            None,
            [os.environ.get("NO_PROXY") or os.environ.get("no_proxy"), "127.0.0.1", "localhost"],
        )
    )
    monkeypatch.setenv("NO_PROXY", no_proxy)
    monkeypatch.setenv("no_proxy", no_proxy)
    return url


def unique_bucket(stem: str = "rsi-test") -> str:
    return f"{stem}-{uuid.uuid4().hex[:12]}"


def s3_client(endpoint_url: str) -> Any:
    """A boto3 S3 client for the fake server with explicit dummy credentials; close it."""
    import boto3

    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=DUMMY_CREDENTIALS["AWS_DEFAULT_REGION"],
    )
