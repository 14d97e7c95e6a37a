"""Booting as a user sees it on the terminal: a bad private key or variable is one line
and exit status 2 from every entry point (before the database is touched), `rsi-bot
setup` and `rsi-bot serve` say where they really listen, and a loopback PUBLIC_URL is
warned about in one line."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from tests.test_serve import CLI, ROOT, env

GUNICORN = [sys.executable, "-m", "gunicorn", "-c", "python:bot.gunicorn_conf"]
APP = "bot.web.app:create_app()"
WARNING = re.compile(r"^rsi-bot: warning: PUBLIC_URL \S+ is a loopback address: GitHub cannot")


def run(cmd: list[str], e: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, env=e, cwd=cwd, capture_output=True, text=True, check=False, timeout=60
    )


def bad_key_envs(tmp_path: Path) -> dict[str, dict[str, str]]:
    base = env(tmp_path, PYTHONPATH=str(ROOT))
    del base["PRIVATE_KEY"]
    garbage = tmp_path / "garbage.pem"
    garbage.write_text(
        "-----BEGIN RSA PRIVATE KEY-----\nbm90IGEga2V5\n-----END RSA PRIVATE KEY-----\n"
    )
    return {
        "missing file": {**base, "PRIVATE_KEY_PATH": str(tmp_path / "nowhere" / "key.pem")},
        "not PEM": {**base, "PRIVATE_KEY": "this is not a key"},
        "garbage PEM file": {**base, "PRIVATE_KEY_PATH": str(garbage)},
    }


@pytest.mark.parametrize("entry", ["serve", "worker", "gunicorn"])
def test_a_bad_private_key_is_one_line_and_exit_2(tmp_path: Path, entry: str) -> None:
    cmd = {
        "serve": [*CLI, "serve", "--port", "0"],
        "worker": [*CLI, "worker"],
        "gunicorn": [*GUNICORN, "--bind", "127.0.0.1:0", APP],  # the Procfile's web:
    }[entry]
    for case, e in bad_key_envs(tmp_path).items():
        proc = run(cmd, e, tmp_path)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2, (case, proc.stderr)
        assert len(lines) == 1, (case, proc.stderr)
        assert lines[0].startswith("rsi-bot cannot start: PRIVATE_KEY"), (case, lines)
        assert "Traceback" not in proc.stderr
        assert proc.stdout == "", (case, proc.stdout)
    # Before the migrations: no database was created.
    assert not (tmp_path / "state").exists()


def test_each_bad_variable_is_one_line_naming_it(tmp_path: Path) -> None:
    e = env(tmp_path, PYTHONPATH=str(ROOT), METRICS_PORT="many", LOG_FORMAT="xml")
    del e["WEBHOOK_SECRET"]
    for cmd in ([*CLI, "serve"], [*GUNICORN, "--bind", "127.0.0.1:0", APP]):
        proc = run(cmd, e, tmp_path)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.splitlines()
        assert len(lines) == 3, proc.stderr
        assert all(x.startswith("rsi-bot cannot start: ") for x in lines), lines
        assert any("METRICS_PORT: " in x and "whole number" in x for x in lines), lines
        assert any("LOG_FORMAT: " in x and "'json'" in x for x in lines), lines
        assert "rsi-bot cannot start: WEBHOOK_SECRET: is missing" in lines


def test_setup_configuration_error_is_one_line(tmp_path: Path) -> None:
    e = {k: v for k, v in env(tmp_path, PYTHONPATH=str(ROOT)).items() if k in ("PATH", "HOME")}
    e.update(PYTHONPATH=str(ROOT), APP_ID="twelve", RSI_ENV_FILE=str(tmp_path / ".env"))
    proc = run([*CLI, "setup", "--port", "0"], e, tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("rsi-bot setup cannot start: APP_ID: "), lines
    # The listener's settings (read by gunicorn's configuration) are checked as well.
    del e["APP_ID"]
    e["METRICS_PORT"] = "many"
    proc = run([*CLI, "setup", "--port", "0"], e, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "rsi-bot cannot start: METRICS_PORT: must be a whole number (got 'many')"
    ]


@contextmanager
def started(cmd: list[str], e: dict[str, str], cwd: Path, ready: str) -> Iterator[list[str]]:
    """The process, until `ready` shows on its stdout; yields its stdout lines so far."""
    err = cwd / "stderr.log"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            cmd, env=e, cwd=cwd, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    out: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            out.append(line.rstrip("\n"))
            if ready in line:
                break
        assert any(ready in x for x in out), (out, err.read_text())
        yield out
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_setup_says_where_it_really_listens(tmp_path: Path) -> None:
    e = {k: v for k, v in env(tmp_path).items() if k in ("PATH", "HOME", "LANG")}
    e.update(PYTHONPATH=str(ROOT), RSI_ENV_FILE=str(tmp_path / ".env"))
    with started([*CLI, "setup", "--port", "0"], e, tmp_path, "listening on") as out:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+): open (\S+)/setup ", out[-1])
        assert m, out
        port = int(m.group(1))
        assert port != 0
        assert m.group(2) == f"http://127.0.0.1:{port}"  # no PUBLIC_URL: where it listens
        page = requests.get(f"http://127.0.0.1:{port}/setup", timeout=10)
        assert page.status_code == 200
        # The manifest sends GitHub back to this server.
        assert f"http://127.0.0.1:{port}/setup/complete" in page.text
        time.sleep(0.5)
    warnings = [x for x in (tmp_path / "stderr.log").read_text().splitlines() if WARNING.match(x)]
    assert len(warnings) == 1, (tmp_path / "stderr.log").read_text()


def test_setup_with_a_public_url_is_not_warned(tmp_path: Path) -> None:
    e = {k: v for k, v in env(tmp_path).items() if k in ("PATH", "HOME", "LANG")}
    e.update(
        PYTHONPATH=str(ROOT),
        RSI_ENV_FILE=str(tmp_path / ".env"),
        PUBLIC_URL="https://rsi.example.com",
    )
    with started([*CLI, "setup", "--port", "0"], e, tmp_path, "listening on") as out:
        assert re.search(
            r"listening on http://127\.0\.0\.1:\d+: open https://rsi\.example\.com/setup ", out[-1]
        ), out
        time.sleep(0.5)
    assert "warning" not in (tmp_path / "stderr.log").read_text()


def test_serve_says_where_it_listens_and_warns_of_loopback(tmp_path: Path) -> None:
    e = env(tmp_path, PYTHONPATH=str(ROOT), PUBLIC_URL="http://127.0.0.2:8000", LOG_FORMAT="json")
    with started([*CLI, "serve", "--port", "0"], e, tmp_path, "listening on") as out:
        m = re.search(r"^rsi-bot listening on http://127\.0\.0\.1:(\d+) ", out[-1])
        assert m, out
        port = int(m.group(1))
        assert port != 0
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=60).status_code == 200
    stderr = (tmp_path / "stderr.log").read_text().splitlines()
    # LOG_FORMAT=json: the App's lines and gunicorn's are JSON objects, one a line.
    docs = [json.loads(x) for x in stderr if x.startswith("{")]
    assert {d["logger"] for d in docs} >= {"alembic.runtime.migration", "gunicorn.error"}
    assert all({"time", "level", "logger", "message"} <= d.keys() for d in docs), docs
    assert sum(1 for x in stderr if WARNING.match(x)) == 1, stderr
    assert "PUBLIC_URL http://127.0.0.2:8000 " in next(x for x in stderr if WARNING.match(x))


def test_loopback_addresses() -> None:
    from bot.config import is_loopback_url

    for url in (
        "http://localhost:8000",
        "http://LOCALHOST",
        "http://app.localhost",
        "http://127.0.0.1:8000",
        "http://127.3.2.1",
        "http://[::1]:8000",
        "http://0.0.0.0:8000",
        "http://[::1",  # not a URL: nothing GitHub reaches either
    ):
        assert is_loopback_url(url), url
    for url in ("https://rsi.example.com", "http://10.0.0.5:8000", "http://[2001:db8::1]"):
        assert not is_loopback_url(url), url


def test_serve_without_a_public_url_uses_where_it_listens(tmp_path: Path) -> None:
    """Before: the default http://localhost:8000, whatever the port, so links pointed at
    a server that was not there."""
    e = env(tmp_path, PYTHONPATH=str(ROOT))
    e.pop("PUBLIC_URL", None)
    with started([*CLI, "serve", "--port", "0"], e, tmp_path, "listening on") as out:
        m = re.search(r"^rsi-bot listening on (http://127\.0\.0\.1:\d+) ", out[-1])
        assert m, out
        time.sleep(0.5)
    stderr = (tmp_path / "stderr.log").read_text().splitlines()
    (warning,) = [x for x in stderr if WARNING.match(x)]
    assert f"PUBLIC_URL {m.group(1)} is a loopback address" in warning


def test_a_worker_on_a_database_never_upgraded_says_so_and_exits_2(tmp_path: Path) -> None:
    """Before: it started, and its minute's reconcile failed with a traceback forever."""
    e = env(tmp_path, PYTHONPATH=str(ROOT))
    (tmp_path / "state").mkdir()
    proc = run([*CLI, "worker"], e, tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("rsi-bot cannot start: the database sqlite:///")
    assert line.endswith(
        "its schema is not created, the newest is "
        f"{newest_revision()}; run `rsi-bot db upgrade` first"
    )
    assert run([*CLI, "db", "upgrade"], e, tmp_path).returncode == 0
    worker = subprocess.Popen(
        [*CLI, "worker"], env=e, cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    try:
        assert worker.stderr is not None
        # upgraded: its consumer starts (read as it says so, not after a guessed wait)
        for line in worker.stderr:
            lines.append(line)
            if "Huey consumer started" in line or "cannot start" in line:
                break
        assert worker.poll() is None, lines
    finally:
        worker.send_signal(signal.SIGINT)
        _, err = worker.communicate(timeout=30)
    assert any("Huey consumer started" in x for x in lines), lines
    assert "cannot start" not in "".join(lines) + err
    # a SIGINT while the consumer starts (as here) is a graceful stop, not a start broken
    # half-way with its threads running
    assert worker.returncode == 0, err[-3000:]
    assert "Consumer exiting" in err, err[-3000:]


@pytest.mark.parametrize(
    ("url", "shown", "step"),
    [
        ("notaurl", "(DATABASE_URL, unreadable)", "set DATABASE_URL to sqlite:///PATH or "),
        ("foo://x/y", "foo://x/y", "set DATABASE_URL to sqlite:///PATH or "),
        (
            "postgresql+psycopg://rsi:s3cret@127.0.0.1:9/db",
            "postgresql+psycopg://rsi:***@",
            "run `rsi-bot db upgrade` first",
        ),
    ],
)
def test_a_worker_on_a_database_it_cannot_use_says_so_in_one_line_without_its_password(
    tmp_path: Path, url: str, shown: str, step: str
) -> None:
    """Before: an unreadable URL, or one without a driver, was a 30-line traceback and exit
    1; a database that could not be opened was named with its password."""
    proc = run([*CLI, "worker"], env(tmp_path, PYTHONPATH=str(ROOT), DATABASE_URL=url), tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"rsi-bot cannot start: the database {shown}"), line
    assert "s3cret" not in line
    assert step in line


def newest_revision() -> str:
    from alembic.script import ScriptDirectory

    from bot.db import alembic_config

    return str(ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head())
