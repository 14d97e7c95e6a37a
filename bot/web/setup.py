"""`rsi-bot setup`: create the GitHub App from `app.yml` with GitHub's manifest flow.

The App cannot boot without its identity, so setup is its own small Flask app
(`create_setup_app`), run before the first start:

1. `GET /setup[?org=NAME]` shows a form that posts the manifest — `app.yml` with
   `url = PUBLIC_URL`, `hook_attributes.url = PUBLIC_URL/webhooks/github` and
   `redirect_url = PUBLIC_URL/setup/complete` — to GitHub's
   `/settings/apps/new?state=…` (or the organisation's), with a fresh random `state`
   kept server-side (single use, one hour) and bound to this browser: the page sets the
   `rsi_setup` cookie (HttpOnly, SameSite=Lax, Secure when PUBLIC_URL is https) naming
   the browser, and the state is kept with that name.
2. GitHub creates the App and sends the browser to
   `PUBLIC_URL/setup/complete?code=…&state=…`; the state must be one this server issued,
   to the browser that comes back with it (its cookie): an answer brought by another
   browser — a link someone else made with their own App — is refused (400) and nothing
   is stored.
   The code is exchanged once at `POST /app-manifests/{code}/conversions` (no credentials
   needed), and the App's id, private key and webhook secret, plus a new intake secret,
   are merged into `RSI_ENV_FILE` (default `.env`), mode 0600. The page never shows them.

Setup refuses (403) once `APP_ID` is set, in the environment or in that file, and after it
has created an App: it is only for the first run. Anyone who can reach the setup server
while it runs could create the App, so run it only until it is done.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import secrets
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlencode

import yaml
from flask import Blueprint, Flask, Response, current_app, request
from pydantic import ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.config import ConfigError, error_lines, is_loopback_url
from evidence.render import environment

log = logging.getLogger(__name__)

MANIFEST = Path(__file__).resolve().parents[2] / "app.yml"
STATE_TTL_S = 3600  # GitHub's manifest codes last an hour too
MAX_PENDING = 100  # states kept at once (each GET /setup makes one)
COOKIE = "rsi_setup"  # names the browser a state was issued to
ENV_KEYS = ("APP_ID", "PRIVATE_KEY", "WEBHOOK_SECRET", "RSI_INTAKE_SECRET")
_ORG = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
_CODE = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
_PLAIN = re.compile(r"^[A-Za-z0-9_.:/+=@-]*$")


class SetupSettings(BaseSettings):
    """What setup needs; the App's other settings may still be missing."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=True
    )

    APP_ID: int | None = None
    PUBLIC_URL: str = "http://localhost:8000"
    GITHUB_API_URL: str = "https://api.github.com"
    GITHUB_WEB_URL: str | None = None
    RSI_ENV_FILE: Path = Path(".env")
    LOG_LEVEL: str = "INFO"
    LOG_FORMAT: Literal["text", "json"] = "text"

    @field_validator("GITHUB_API_URL", "PUBLIC_URL")
    @classmethod
    def _no_trailing_slash(cls, v: str) -> str:
        return v.rstrip("/")

    @property
    def public_url(self) -> str:
        return self.PUBLIC_URL

    @property
    def public_url_given(self) -> bool:
        """Whether PUBLIC_URL was set (otherwise setup uses the address it listens on)."""
        return "PUBLIC_URL" in self.model_fields_set

    @property
    def web_url(self) -> str:
        """As `Settings.web_url`: github.com, or the Enterprise host of `/api/v3`."""
        if self.GITHUB_WEB_URL:
            return self.GITHUB_WEB_URL.rstrip("/")
        if self.GITHUB_API_URL == "https://api.github.com":
            return "https://github.com"
        return self.GITHUB_API_URL.removesuffix("/api/v3")


def load_setup_settings() -> SetupSettings:
    """From the environment and `RSI_ENV_FILE` (default `.env`), the file the App reads."""
    env_file = Path(os.environ.get("RSI_ENV_FILE", ".env"))
    try:
        return SetupSettings(
            _env_file=env_file if env_file.is_file() else None,
            RSI_ENV_FILE=env_file,
        )
    except ValidationError as exc:
        lines = error_lines(exc)
        raise ConfigError("\n".join(f"rsi-bot setup cannot start: {x}" for x in lines)) from None


# --- the manifest ---------------------------------------------------------------------------


def build_manifest(settings: SetupSettings, path: Path = MANIFEST) -> dict[str, Any]:
    """`app.yml` with this deployment's URLs."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read the App manifest {path}: {exc.strerror}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: not a GitHub App manifest")
    public = settings.public_url
    doc["url"] = public
    doc["hook_attributes"] = {
        **(doc.get("hook_attributes") or {}),
        "url": f"{public}/webhooks/github",
    }
    doc["redirect_url"] = f"{public}/setup/complete"
    return doc


def form_action(settings: SetupSettings, state: str, org: str | None) -> str:
    where = f"/organizations/{quote(org)}/settings/apps/new" if org else "/settings/apps/new"
    return f"{settings.web_url}{where}?{urlencode({'state': state})}"


class _States:
    """Server-side, single-use states, each bound to the browser it was issued to (the
    random name in that browser's `rsi_setup` cookie)."""

    def __init__(self) -> None:
        self._pending: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._lock = threading.Lock()

    def issue(self, browser: str) -> str:
        state = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            for old, (at, _) in list(self._pending.items()):
                if now - at > STATE_TTL_S:
                    del self._pending[old]
            while len(self._pending) >= MAX_PENDING:
                self._pending.popitem(last=False)
            self._pending[state] = (now, browser)
        return state

    def knows(self, browser: str) -> bool:
        """Whether some pending state was issued to this browser name."""
        with self._lock:
            return any(hmac.compare_digest(b, browser) for _, b in self._pending.values())

    def take(self, state: str, browser: str) -> tuple[str, float]:
        """ "ok" (and the state is spent), "unknown" (never issued here, spent or over an
        hour old) or "elsewhere" (issued to another browser; it stays pending); with
        when the state was issued (for `give_back`)."""
        with self._lock:
            pending = self._pending.get(state)
            if pending is None or time.monotonic() - pending[0] > STATE_TTL_S:
                self._pending.pop(state, None)
                return "unknown", 0.0
            if not browser or not hmac.compare_digest(pending[1], browser):
                return "elsewhere", pending[0]
            del self._pending[state]
            return "ok", pending[0]

    def give_back(self, state: str, browser: str, issued_at: float) -> None:
        """A state spent on an answer GitHub could not convert for a passing reason (it
        was unreachable, or answered 5xx): pending again, with its first hour, so
        reloading the page tries the same code again (the App may exist already)."""
        with self._lock:
            self._pending[state] = (issued_at, browser)


# --- writing the env file -----------------------------------------------------------------


def _env_value(key: str, value: str) -> str:
    """One line, readable by python-dotenv, docker's --env-file and systemd alike. The
    key's newlines become a literal `\\n`, which `Settings.private_key()` turns back."""
    if key == "PRIVATE_KEY":
        return value.strip().replace("\r\n", "\n").replace("\n", "\\n")
    if _PLAIN.match(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _assigned_key(line: str) -> tuple[str, str] | None:
    m = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$", line)
    return (m.group(1), m.group(2).lstrip()) if m else None


def _open_quote(value: str) -> str | None:
    """The quote a value opens and does not close on its line (a multi-line value)."""
    if not value or value[0] not in "\"'":
        return None
    quote_char, rest, i = value[0], value[1:], 0
    while i < len(rest):
        if rest[i] == "\\" and quote_char == '"':
            i += 2
            continue
        if rest[i] == quote_char:
            return None
        i += 1
    return quote_char


def merge_env(path: Path, values: dict[str, str], *, comment: str = "") -> None:
    """Replace `values`' keys in the env file and keep every other line; written whole
    (a temporary file renamed over it) with mode 0600."""
    kept: list[str] = []
    if path.exists():
        skipping: str | None = None
        for line in path.read_text().splitlines():
            if skipping is not None:
                skipping += "\n" + line
                if _open_quote(skipping) is None:
                    skipping = None
                continue
            assigned = _assigned_key(line)
            if assigned and assigned[0] in values:
                quote_char = _open_quote(assigned[1])
                skipping = assigned[1] if quote_char else None
                continue
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    block = [f"# {comment}"] if comment else []
    block += [f"{k}={_env_value(k, v)}" for k, v in values.items()]
    text = "\n".join([*kept, *([""] if kept else []), *block]) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- the pages ------------------------------------------------------------------------------


RETRYABLE = frozenset({"unreachable", "github-status"})
"""Conversions that may work with the same code later: GitHub keeps it an hour."""


class SetupFailed(Exception):
    """Why the manifest conversion failed: an error code of `setup.html.j2` (its words
    are there), the HTTP status to answer and, for `github-status`, GitHub's."""

    def __init__(self, error: str, status: int, answered: int | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.status = status
        self.answered = answered


def convert(settings: SetupSettings, code: str) -> dict[str, Any]:
    """`POST /app-manifests/{code}/conversions`: the new App, with its secrets."""
    # Imported here, in the worker: requests loads ssl, which gevent must patch first
    # (the setup command builds the app in the master process once, to check it).
    from bot.github import manifest

    try:
        status, app = manifest.convert(settings.GITHUB_API_URL, code)
    except manifest.Unreachable as exc:
        log.warning("setup: GitHub could not be reached: %s", exc)
        raise SetupFailed("unreachable", 502) from None
    if status in (404, 422):
        raise SetupFailed("code-refused", 400)
    if status != 201:
        log.warning("setup: the manifest conversion answered %s", status)
        raise SetupFailed("github-status", 502, answered=status)
    if not isinstance(app, dict) or not all(k in app for k in ("id", "pem", "html_url")):
        raise SetupFailed("not-an-app", 502)
    return app


def _page(template: str, status: int = 200, **context: Any) -> tuple[Response, int]:
    settings: SetupSettings = current_app.extensions["rsi_setup"]
    context = {
        "public_url": settings.public_url,
        "answered": None,
        "unreachable": is_loopback_url(settings.public_url),
        **context,
    }
    html = environment().get_template(template).render(**context)
    resp = Response(html, mimetype="text/html")
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["Referrer-Policy"] = "no-referrer"  # /setup/complete carries the code
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
        f"frame-ancestors 'none'; form-action {settings.web_url}"
    )
    return resp, status


def _start_page(
    error: str | None = None, status: int = 200, answered: int | None = None
) -> tuple[Response, int]:
    """The form, with `error` (a code of `setup.html.j2`) above it when there is one."""
    settings: SetupSettings = current_app.extensions["rsi_setup"]
    org = request.args.get("org") or None
    if org is not None and not _ORG.match(org):
        return _page("setup.html.j2", 400, configured=False, error="not-an-org")
    states: _States = current_app.extensions["rsi_setup_states"]
    doc = current_app.extensions["rsi_setup_manifest"]
    browser = request.cookies.get(COOKIE, "")
    if not browser or not states.knows(browser):
        browser = secrets.token_urlsafe(32)
    resp, status = _page(
        "setup.html.j2",
        status,
        configured=False,
        error=error,
        answered=answered,
        action=form_action(settings, states.issue(browser), org),
        manifest=json.dumps(doc, separators=(",", ":")),
        app=doc,
        org=org,
        public_url=settings.public_url,
        web_url=settings.web_url,
    )
    resp.set_cookie(
        COOKIE,
        browser,
        max_age=STATE_TTL_S,
        path="/setup",
        secure=settings.public_url.startswith("https://"),
        httponly=True,
        samesite="Lax",  # sent on GitHub's redirect back, a top-level GET
    )
    return resp, status


def _configured() -> tuple[Response, int] | None:
    if current_app.extensions["rsi_setup_done"].is_set():
        return _page("setup.html.j2", 403, configured=True, error=None)
    return None


bp = Blueprint("setup", __name__)


@bp.get("/setup")
def start() -> tuple[Response, int]:
    return _configured() or _start_page()


@bp.get("/setup/complete")
def complete() -> tuple[Response, int]:
    refused = _configured()
    if refused:
        return refused
    settings: SetupSettings = current_app.extensions["rsi_setup"]
    states: _States = current_app.extensions["rsi_setup_states"]
    code, state = request.args.get("code", ""), request.args.get("state", "")
    browser = request.cookies.get(COOKIE, "")
    taken, issued_at = states.take(state, browser) if state else ("unknown", 0.0)
    if taken == "elsewhere":
        log.warning("setup: an answer from GitHub came from a browser that did not start it")
        return _page("setup.html.j2", 400, configured=False, error="elsewhere")
    if taken != "ok":
        return _start_page("unknown-state", 400)
    if not _CODE.match(code):
        return _start_page("no-code", 400)
    try:
        app = convert(settings, code)
    except SetupFailed as exc:
        if exc.error in RETRYABLE:
            states.give_back(state, browser, issued_at)
            return _page(
                "setup.html.j2",
                exc.status,
                configured=False,
                error=exc.error,
                answered=exc.answered,
            )
        return _start_page(exc.error, exc.status, exc.answered)
    values = {"APP_ID": str(app["id"]), "PRIVATE_KEY": str(app["pem"])}
    webhook_secret = app.get("webhook_secret")
    if webhook_secret:
        values["WEBHOOK_SECRET"] = str(webhook_secret)
    values["RSI_INTAKE_SECRET"] = secrets.token_hex(32)
    env_file = settings.RSI_ENV_FILE.expanduser().resolve()
    merge_env(
        env_file, values, comment=f"GitHub App {app.get('slug') or app['id']} (rsi-bot setup)"
    )
    current_app.extensions["rsi_setup_done"].set()
    log.info("setup: created GitHub App %s; credentials written to %s", app["id"], env_file)
    html_url = str(app["html_url"])
    if not html_url.startswith(("https://", "http://")):
        html_url = f"{settings.web_url}/apps/{quote(str(app.get('slug') or ''))}"
    resp, status = _page(
        "setup_done.html.j2",
        app_id=app["id"],
        name=app.get("name") or app.get("slug") or "the App",
        html_url=html_url,
        install_url=f"{html_url}/installations/new",
        env_file=str(env_file),
        webhook_secret_missing=not webhook_secret,
        public_url=settings.public_url,
    )
    resp.delete_cookie(COOKIE, path="/setup")
    return resp, status


def create_setup_app(
    settings: SetupSettings | None = None, *, manifest: Path | None = None
) -> Flask:
    """The setup app (`rsi-bot setup`); needs none of the App's configuration."""
    settings = settings or load_setup_settings()
    app = Flask(__name__)
    app.extensions["rsi_setup"] = settings
    app.extensions["rsi_setup_states"] = _States()
    app.extensions["rsi_setup_manifest"] = build_manifest(settings, manifest or MANIFEST)
    done = threading.Event()
    if settings.APP_ID is not None:
        done.set()  # already configured: every page answers 403
    app.extensions["rsi_setup_done"] = done
    app.register_blueprint(bp)
    return app
