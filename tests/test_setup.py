"""`rsi-bot setup`: the GitHub App manifest flow end to end against the GitHub stand-in —
the form GitHub receives, the state round trip, the one-time code conversion and the env
file it leaves behind."""

from __future__ import annotations

import html
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import yaml
from click.testing import CliRunner
from dotenv import dotenv_values
from flask import Flask
from flask.testing import FlaskClient

from bot.cli import main
from bot.config import load_settings
from bot.web.setup import SetupSettings, create_setup_app, merge_env
from tests import appkit
from tests.standin import GitHubStandIn, serve

PUBLIC = "https://rsi.example.com"
APP_YML = Path(__file__).parent.parent / "app.yml"
UNRELATED = [
    "# deployment settings",
    "RSI_RUNNER_REPO=openrsi-bot/rsi-runners",
    "export DATABASE_URL=postgresql://rsi@db:5432/rsi",
    "",
    "RSI_TRUSTED_PUSHERS='openrsi-bot, someone'",
]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("APP_ID", "RSI_ENV_FILE", "PUBLIC_URL", "GITHUB_API_URL", "GITHUB_WEB_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def setup_settings(github: GitHubStandIn, env_file: Path, **overrides: Any) -> SetupSettings:
    values: dict[str, Any] = {
        "PUBLIC_URL": PUBLIC + "/",
        "GITHUB_API_URL": github.url,
        "GITHUB_WEB_URL": "https://github.com",
        "RSI_ENV_FILE": env_file,
    }
    values.update(overrides)
    return SetupSettings(_env_file=None, **values)  # type: ignore[call-arg]


def setup_client(github: GitHubStandIn, env_file: Path, **overrides: Any) -> FlaskClient:
    app: Flask = create_setup_app(setup_settings(github, env_file, **overrides))
    return app.test_client()


def start(client: FlaskClient, query: str = "") -> tuple[str, str, dict[str, Any]]:
    """GET /setup: the form's action, its state and the manifest it posts."""
    resp = client.get("/setup" + query)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    page = resp.get_data(as_text=True)
    forms = re.findall(r'<form method="post" action="([^"]+)">', page)
    assert len(forms) == 1, page
    action = html.unescape(forms[0])
    field = re.search(r'<input type="hidden" name="manifest" value="([^"]*)">', page)
    assert field is not None, page
    manifest = json.loads(html.unescape(field.group(1)))
    state = parse_qs(urlsplit(action).query)["state"]
    assert len(state) == 1
    return action, state[0], manifest


def complete(client: FlaskClient, code: str, state: str) -> tuple[int, str]:
    resp = client.get("/setup/complete", query_string={"code": code, "state": state})
    return resp.status_code, resp.get_data(as_text=True)


def test_manifest_flow_writes_the_env_file(tmp_path: Path, github: GitHubStandIn) -> None:
    env_file = tmp_path / "conf" / ".env"
    env_file.parent.mkdir()
    old_key = "-----BEGIN RSA PRIVATE KEY-----\nOLDKEY\n-----END RSA PRIVATE KEY-----"
    env_file.write_text(
        "\n".join(
            [
                UNRELATED[0],
                UNRELATED[1],
                "WEBHOOK_SECRET=old-webhook-secret",
                UNRELATED[2],
                f'PRIVATE_KEY="{old_key}"',
                UNRELATED[3],
                UNRELATED[4],
            ]
        )
        + "\n"
    )
    env_file.chmod(0o644)
    client = setup_client(github, env_file)

    action, state, manifest = start(client)
    assert action == f"https://github.com/settings/apps/new?state={state}"
    assert len(state) >= 32
    app_yml = yaml.safe_load(APP_YML.read_text())
    assert manifest["url"] == PUBLIC
    assert manifest["hook_attributes"] == {"url": f"{PUBLIC}/webhooks/github"}
    assert manifest["redirect_url"] == f"{PUBLIC}/setup/complete"
    assert manifest["default_events"] == app_yml["default_events"]
    assert manifest["default_permissions"] == app_yml["default_permissions"]
    assert manifest["name"] == app_yml["name"]
    assert manifest["public"] is False
    # Each visit gets its own state.
    assert start(client)[1] != state

    # GitHub's web side creates the App and sends the browser back with a code.
    code = github.create_app_from_manifest(manifest)
    made = github.manifest_apps[code]
    status, page = complete(client, code, state)
    assert status == 200, page

    assert f'href="https://github.com/apps/{made.slug}/installations/new"' in page
    assert str(made.id) in page
    values = dotenv_values(env_file)
    for secret in (made.pem, made.webhook_secret, values["RSI_INTAKE_SECRET"]):
        assert secret
        assert secret not in page
    assert "BEGIN RSA PRIVATE KEY" not in page

    # The env file: new identity, other lines kept as they were, owner-only.
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    text = env_file.read_text()
    lines = text.splitlines()
    for line in UNRELATED:
        assert line in lines
    assert "old-webhook-secret" not in text
    assert "OLDKEY" not in text
    assert values["APP_ID"] == str(made.id)
    assert values["WEBHOOK_SECRET"] == made.webhook_secret
    intake = values["RSI_INTAKE_SECRET"]
    assert intake is not None
    assert re.fullmatch(r"[0-9a-f]{64}", intake)
    assert sum(1 for line in lines if line.startswith("PRIVATE_KEY=")) == 1
    # The App boots from it (its own loader, newlines in the key restored).
    settings = load_settings(_env_file=str(env_file))
    assert made.id == settings.APP_ID
    assert settings.private_key().strip() == made.pem.strip()
    assert settings.WEBHOOK_SECRET.get_secret_value() == made.webhook_secret
    assert settings.RSI_RUNNER_REPO == "openrsi-bot/rsi-runners"

    # One conversion, without credentials, as GitHub documents it.
    conversions = github.matching("POST", r"^/app-manifests/")
    assert [r.path for r in conversions] == [f"/app-manifests/{code}/conversions"]
    assert conversions[0].status == 201
    assert "Authorization" not in conversions[0].headers
    assert made.converted

    # Done: setup answers 403 from now on.
    assert client.get("/setup").status_code == 403
    assert complete(client, code, state)[0] == 403


def test_a_state_not_issued_here_is_refused(tmp_path: Path, github: GitHubStandIn) -> None:
    env_file = tmp_path / ".env"
    client = setup_client(github, env_file)
    _, state, manifest = start(client)
    code = github.create_app_from_manifest(manifest)
    status, page = complete(client, code, "forged-" + state)
    assert status == 400
    assert "does not match a setup started here" in page
    status, _ = complete(client, code, "")
    assert status == 400
    assert github.count("POST", r"^/app-manifests/") == 0
    assert not env_file.exists()
    # The real state still works, once.
    assert complete(client, code, state)[0] == 200
    assert complete(client, code, state)[0] == 403


def test_a_state_is_used_once(tmp_path: Path, github: GitHubStandIn) -> None:
    client = setup_client(github, tmp_path / ".env")
    _, state, _ = start(client)
    status, page = complete(client, "not a code!", state)
    assert status == 400
    assert "no valid code" in page
    # The state was spent on that answer.
    status, page = complete(client, "abc123", state)
    assert status == 400
    assert "does not match" in page
    assert github.count("POST", r"^/app-manifests/") == 0


def test_a_reused_code_shows_an_error(tmp_path: Path, github: GitHubStandIn) -> None:
    first = setup_client(github, tmp_path / "first.env")
    _, state, manifest = start(first)
    code = github.create_app_from_manifest(manifest)
    assert complete(first, code, state)[0] == 200

    second_env = tmp_path / "second.env"
    second = setup_client(github, second_env)
    _, state2, _ = start(second)
    status, page = complete(second, code, state2)
    assert status == 400
    assert "did not accept this code" in page
    assert "each code works once" in page
    assert "<form" in page  # and a fresh form to start again
    assert not second_env.exists()
    assert [r.status for r in github.matching("POST", r"^/app-manifests/")] == [201, 404]


def test_an_organisation_gets_its_own_creation_page(tmp_path: Path, github: GitHubStandIn) -> None:
    client = setup_client(github, tmp_path / ".env")
    action, state, _ = start(client, "?org=sgl-project")
    assert action == (
        f"https://github.com/organizations/sgl-project/settings/apps/new?state={state}"
    )
    assert client.get("/setup?org=../evil").status_code == 400


def test_enterprise_server(tmp_path: Path) -> None:
    with serve(app_id=appkit.APP_ID, enterprise=True) as ghes:
        env_file = tmp_path / ".env"
        client = setup_client(ghes, env_file, GITHUB_WEB_URL=None)
        action, state, manifest = start(client)
        assert action.startswith(f"{ghes.origin}/settings/apps/new?state=")
        code = ghes.create_app_from_manifest(manifest)
        status, page = complete(client, code, state)
        assert status == 200, page
        assert f"{ghes.origin}/apps/" in page
        assert dotenv_values(env_file)["APP_ID"] == str(ghes.manifest_apps[code].id)


def test_no_webhook_secret_from_github_is_said(tmp_path: Path, github: GitHubStandIn) -> None:
    env_file = tmp_path / ".env"
    client = setup_client(github, env_file)
    _, state, manifest = start(client)
    code = github.create_app_from_manifest(manifest, webhook_secret=False)
    status, page = complete(client, code, state)
    assert status == 200
    assert "GitHub returned no webhook secret" in page
    values = dotenv_values(env_file)
    assert "WEBHOOK_SECRET" not in values
    assert values["APP_ID"]


def test_setup_refuses_once_app_id_is_set(
    tmp_path: Path, github: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Set in the environment.
    monkeypatch.setenv("APP_ID", "12345")
    monkeypatch.setenv("GITHUB_API_URL", github.url)
    app = create_setup_app()
    client = app.test_client()
    resp = client.get("/setup")
    assert resp.status_code == 403
    assert "already configured" in resp.get_data(as_text=True)
    assert "<form" not in resp.get_data(as_text=True)
    assert client.get("/setup/complete?code=abc&state=def").status_code == 403

    # Or in the env file the App reads.
    monkeypatch.delenv("APP_ID")
    env_file = tmp_path / "app.env"
    env_file.write_text("APP_ID=777\n")
    monkeypatch.setenv("RSI_ENV_FILE", str(env_file))
    assert create_setup_app().test_client().get("/setup").status_code == 403

    # Without it, the page works.
    env_file.write_text("RSI_RUNNER_REPO=o/r\n")
    assert create_setup_app().test_client().get("/setup").status_code == 200
    assert github.count("POST", r"^/app-manifests/") == 0


def test_cli_setup_refuses_when_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APP_ID", "12345")
    result = CliRunner().invoke(main, ["setup", "--port", "0"])
    assert result.exit_code == 2
    assert "APP_ID is already set" in result.output


def test_setup_pages_are_not_cached_nor_framed(tmp_path: Path, github: GitHubStandIn) -> None:
    resp = setup_client(github, tmp_path / ".env").get("/setup")
    assert resp.headers["Cache-Control"] == "no-store"
    assert resp.headers["Referrer-Policy"] == "no-referrer"
    assert "form-action https://github.com" in resp.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]


def test_merge_env_replaces_only_its_keys(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "A=1\n"
        'PRIVATE_KEY="line one\n'
        "line two\n"
        'line three"\n'
        "export APP_ID = 9\n"
        "B='two words'\n"
        "APP_ID_OLD=keep\n"
    )
    merge_env(env_file, {"APP_ID": "10", "PRIVATE_KEY": "x\ny", "WEBHOOK_SECRET": 'a "b" c'})
    assert env_file.read_text() == (
        "A=1\nB='two words'\nAPP_ID_OLD=keep\n\n"
        'APP_ID=10\nPRIVATE_KEY=x\\ny\nWEBHOOK_SECRET="a \\"b\\" c"\n'
    )
    values = dotenv_values(env_file)
    assert values == {
        "A": "1",
        "B": "two words",
        "APP_ID_OLD": "keep",
        "APP_ID": "10",
        "PRIVATE_KEY": "x\\ny",  # a literal \n, which Settings.private_key() turns back
        "WEBHOOK_SECRET": 'a "b" c',
    }
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    fresh = tmp_path / "new" / ".env"
    merge_env(fresh, {"APP_ID": "1"}, comment="made here")
    assert fresh.read_text() == "# made here\nAPP_ID=1\n"


def test_the_state_is_bound_to_the_browser_that_started(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    """Someone who starts setup and creates their own App cannot have another browser
    (the operator's, through a link) complete it: no cookie, or another browser's, is a
    400 that stores nothing and leaves the state to its own browser."""
    env_file = tmp_path / ".env"
    app = create_setup_app(setup_settings(github, env_file))
    theirs, operator = app.test_client(), app.test_client()
    _, state, manifest = start(theirs)
    code = github.create_app_from_manifest(manifest)

    # The operator's browser follows their link: it never opened /setup ...
    status, page = complete(operator, code, state)
    assert status == 400
    assert "started in another browser" in page
    assert "nothing was stored" in page
    # ... or it did, and holds a cookie of its own.
    start(operator)
    status, page = complete(operator, code, state)
    assert status == 400
    assert "started in another browser" in page
    # A forged cookie does not pass either.
    forged = app.test_client()
    forged.set_cookie("rsi_setup", "x" * 43, path="/setup")
    assert complete(forged, code, state)[0] == 400
    assert github.count("POST", r"^/app-manifests/") == 0
    assert not env_file.exists()

    # The browser that started it finishes it, once.
    status, page = complete(theirs, code, state)
    assert status == 200, page
    assert env_file.exists()
    assert complete(theirs, code, state)[0] == 403


def test_the_setup_cookie(tmp_path: Path, github: GitHubStandIn) -> None:
    client = setup_client(github, tmp_path / ".env")
    resp = client.get("/setup")
    cookie = resp.headers["Set-Cookie"]
    assert cookie.startswith("rsi_setup=")
    attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "secure", "samesite", "path", "max-age"} <= attributes
    assert "SameSite=Lax" in cookie
    assert "Path=/setup" in cookie
    # The same browser keeps its name across visits (two tabs, two states, both its own).
    browser = cookie.split(";")[0].split("=", 1)[1]
    assert client.get("/setup").headers["Set-Cookie"].startswith(f"rsi_setup={browser};")
    # A name this server did not give is replaced.
    other = setup_client(github, tmp_path / ".env")
    other.set_cookie("rsi_setup", "chosen-by-someone", path="/setup")
    assert "chosen-by-someone" not in other.get("/setup").headers["Set-Cookie"]
    # Not Secure on a plain-HTTP PUBLIC_URL (a local test), or the browser would drop it.
    plain = setup_client(github, tmp_path / ".env", PUBLIC_URL="http://localhost:8000")
    got = plain.get("/setup")
    assert "Secure" not in got.headers["Set-Cookie"]
    # The page itself says GitHub cannot reach a loopback webhook URL (not only the terminal).
    assert 'id="unreachable"' in got.get_data(as_text=True)
    assert "GitHub cannot reach this address" in got.get_data(as_text=True)
    assert 'id="unreachable"' not in client.get("/setup").get_data(as_text=True)


def test_setup_is_served_by_gunicorn(tmp_path: Path) -> None:
    """`rsi-bot setup` is not Werkzeug's development server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(PUBLIC_URL=f"http://127.0.0.1:{port}", PYTHONPATH=str(APP_YML.parent))
    log = tmp_path / "setup.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from bot.cli import main; main()",
                "setup",
                "--port",
                str(port),
            ],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                resp = requests.get(f"http://127.0.0.1:{port}/setup", timeout=5)
                break
            except requests.RequestException:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        assert resp.status_code == 200
        assert resp.headers["Server"] == "gunicorn"
        assert "rsi_setup=" in resp.headers["Set-Cookie"]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    # A stop says nothing alarming: no traceback from logging's teardown under gevent,
    # no warning that ssl was imported before gevent patched it.
    said = log.read_text()
    assert "Worker exiting" in said
    assert "Traceback" not in said, said
    assert "MonkeyPatchWarning" not in said, said


def test_github_failing_the_conversion_can_be_retried_with_the_same_answer(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    """GitHub made the App before it redirected here: when the conversion fails for a
    passing reason, reloading the page converts the same code (a new setup would make a
    second App, its name taken, the first one's key lost)."""
    env_file = tmp_path / ".env"
    client = setup_client(github, env_file)
    _, state, manifest = start(client)
    code = github.create_app_from_manifest(manifest)
    github.fail_next("POST", r"^/app-manifests/", 502)
    status, page = complete(client, code, state)
    assert status == 502
    assert "Reload this page to try again" in page
    assert "<form" not in page  # no fresh start offered: it would make a second App
    assert not env_file.exists()
    status, page = complete(client, code, state)
    assert status == 200, page
    assert dotenv_values(env_file)["APP_ID"] == str(github.manifest_apps[code].id)
    assert [r.status for r in github.matching("POST", r"^/app-manifests/")] == [502, 201]
