"""`rsi-bot serve`, `rsi-bot db upgrade` and configuration, as a user runs them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from bot.config import ConfigError, load_settings
from tests import appkit

RSI = str(Path(sys.executable).with_name("rsi-bot"))


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    base.update(
        {
            "APP_ID": str(appkit.APP_ID),
            "PRIVATE_KEY": appkit.private_key_pem(),
            "WEBHOOK_SECRET": appkit.WEBHOOK_SECRET,
            "RSI_INTAKE_SECRET": appkit.INTAKE_SECRET,
            "RSI_RUNNER_REPO": appkit.RUNNER,
            "GITHUB_API_URL": "http://127.0.0.1:9",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'state' / 'rsi.db'}",
            "QUEUE_PATH": str(tmp_path / "state" / "queue.db"),
            "ARTIFACT_STORE": str(tmp_path / "artifacts"),
            "LOG_LEVEL": "DEBUG",
        }
    )
    base.update(extra)
    return base


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_db_upgrade_from_any_directory(tmp_path: Path) -> None:
    elsewhere = tmp_path / "somewhere"
    elsewhere.mkdir()
    for _ in range(2):  # idempotent
        proc = subprocess.run(
            [RSI, "db", "upgrade"],
            cwd=elsewhere,
            env=env(tmp_path),
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "database is up to date" in proc.stdout
    assert (tmp_path / "state" / "rsi.db").exists()


def test_missing_configuration_names_every_variable(tmp_path: Path) -> None:
    e = env(tmp_path)
    for name in ("APP_ID", "WEBHOOK_SECRET", "PRIVATE_KEY"):
        e.pop(name)
    proc = subprocess.run(
        [RSI, "db", "upgrade"], env=e, capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert proc.returncode == 2
    assert "APP_ID: is missing" in proc.stderr
    assert "WEBHOOK_SECRET: is missing" in proc.stderr
    assert "PRIVATE_KEY or PRIVATE_KEY_PATH" in proc.stderr
    assert appkit.INTAKE_SECRET not in proc.stderr


def test_settings_never_show_secrets() -> None:
    s = load_settings(
        _env_file=None,
        APP_ID=1,
        PRIVATE_KEY="-----BEGIN KEY-----",
        WEBHOOK_SECRET="w-s3cr3t",
        RSI_INTAKE_SECRET="i-s3cr3t",
        RSI_RUNNER_REPO="o/r",
        SENTRY_DSN="https://k3y@sentry.example/1",
    )
    text = repr(s) + str(s.model_dump())
    for secret in ("w-s3cr3t", "i-s3cr3t", "BEGIN KEY", "k3y@"):
        assert secret not in text
    with pytest.raises(ConfigError, match="RSI_RUNNER_REPO"):
        load_settings(
            _env_file=None,
            APP_ID=1,
            PRIVATE_KEY="k",
            WEBHOOK_SECRET="w",
            RSI_INTAKE_SECRET="i",
            RSI_RUNNER_REPO="not a repo",
        )


def test_database_url_forms() -> None:
    from bot.db import normalize_url

    assert normalize_url("postgresql://u@h:5432/db") == "postgresql+psycopg://u@h:5432/db"
    assert normalize_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("sqlite:////var/lib/rsi.db") == "sqlite:////var/lib/rsi.db"


def test_serve_runs_web_and_worker_in_one_process(tmp_path: Path) -> None:
    from bot.signatures import sign
    from tests.standin import example

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [RSI, "serve", "--port", str(port)],
            env=env(tmp_path),
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        body = requests.compat.json.dumps(example("installation", "created")).encode()
        headers = {
            "X-GitHub-Event": "installation",
            "X-GitHub-Delivery": "serve-1",
            "Content-Type": "application/json",
            "X-Hub-Signature-256": sign(body, appkit.WEBHOOK_SECRET),
        }
        assert (
            requests.post(
                f"{base}/webhooks/github", data=body, headers=headers, timeout=5
            ).status_code
            == 202
        )
        bad = dict(headers, **{"X-Hub-Signature-256": "sha256=00"})
        assert (
            requests.post(f"{base}/webhooks/github", data=body, headers=bad, timeout=5).status_code
            == 401
        )
        # The embedded worker processes the delivery.
        import sqlite3

        deadline = time.monotonic() + 20
        while True:
            with sqlite3.connect(tmp_path / "state" / "rsi.db") as db:
                row = db.execute("SELECT status FROM deliveries WHERE id='serve-1'").fetchone()
            if row and row[0] == "done":
                break
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = log.read_text()
    for secret in (appkit.WEBHOOK_SECRET, appkit.INTAKE_SECRET, "BEGIN PRIVATE KEY"):
        assert secret not in text
    assert "serve-1" in text  # logs carry the delivery id
