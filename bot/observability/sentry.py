"""Sentry without secrets: `send_default_pii=False` and a `before_send` that scrubs the
App's secrets, credential headers, GitHub tokens, private keys, report tokens and request
bodies (`Scrubber`)."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from sentry_sdk.types import Event

    from bot.config import Settings

log = logging.getLogger(__name__)


FILTERED = "[Filtered]"
# Keys whose values never leave the process, wherever they appear in an event (headers,
# frame variables, extra data); compared in lower case, with "-" read as "_".
_SECRET_KEYS = frozenset(
    {
        "authorization",
        "proxy_authorization",
        "cookie",
        "set_cookie",
        "x_hub_signature",
        "x_hub_signature_256",
        "x_rsi_signature_256",
        "webhook_secret",
        "rsi_intake_secret",
        "private_key",
        "pem",
        "client_secret",
        "secret",
        "token",
        "password",
        "sentry_dsn",
        "body",  # raw request bodies in frame variables
        "raw",
    }
)
_SECRET_KEY_PARTS = ("secret", "password", "token", "signature", "private_key")
_PATTERNS = (
    # GitHub tokens: installation, user-to-server, OAuth, personal, refresh; fine-grained.
    re.compile(r"\bgh[opsuvr]_[A-Za-z0-9]{16,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    # JSON web tokens (the App's JWT).
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    # Private keys, whole or cut off; with real or escaped newlines.
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S
    ),
    # HMAC signatures of webhooks and intake requests.
    re.compile(r"sha256=[0-9a-fA-F]{64}"),
)
# Report tokens in URLs (and the setup flow's code and state).
_URL_TOKEN = re.compile(r"((?:^|[?&])(?:token|code|state)=)[^&#\s'\"]+")
_MIN_SECRET = 6  # shorter configured secrets are only matched as whole values


class Scrubber:
    """Sentry's `before_send`: removes every secret from an event, wherever it is.

    Sentry's own scrubbing (with `send_default_pii=False`) knows common header and key
    names only; this also knows the App's secrets by value — so one that ends up in an
    exception message, a log breadcrumb or a frame's local variables is caught too —
    GitHub tokens, keys and signatures by shape, report tokens in URLs, and drops
    request bodies (webhook payloads and candidates are not Sentry's business).
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        values: set[str] = set()
        for s in secrets:
            if not s:
                continue
            values.add(s)
            # Frame variables are reprs: a multi-line key shows its newlines as "\n".
            values.add(s.replace("\n", "\\n"))
            values.add(s.strip().replace("\n", "\\n"))
        self._long = sorted((v for v in values if len(v) >= _MIN_SECRET), key=len, reverse=True)
        self._short = frozenset(v for v in values if len(v) < _MIN_SECRET)

    def text(self, value: str) -> str:
        if value in self._short:
            return FILTERED
        for secret in self._long:
            if secret in value:
                value = value.replace(secret, FILTERED)
        for pattern in _PATTERNS:
            value = pattern.sub(FILTERED, value)
        return _URL_TOKEN.sub(r"\1" + FILTERED, value)

    def _secret_key(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        k = key.lower().replace("-", "_")
        return k in _SECRET_KEYS or any(part in k for part in _SECRET_KEY_PARTS)

    def scrub(self, node: Any) -> Any:
        if isinstance(node, str):
            return self.text(node)
        if isinstance(node, dict):
            return {
                k: (FILTERED if self._secret_key(k) and v is not None else self.scrub(v))
                for k, v in node.items()
            }
        if isinstance(node, list | tuple):
            return [self.scrub(v) for v in node]
        return node

    def __call__(self, event: Event, hint: dict[str, Any]) -> Event:
        req: Any = event.get("request")
        if isinstance(req, dict):
            for key in ("data", "cookies"):
                if key in req:
                    req[key] = FILTERED
        scrubbed: Event = self.scrub(event)
        return scrubbed


def _url_password(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def configured_secrets(settings: Settings) -> list[str]:
    """Every secret the configuration holds, as plain text (for the `Scrubber`)."""
    found = [
        settings.WEBHOOK_SECRET.get_secret_value(),
        settings.RSI_INTAKE_SECRET.get_secret_value(),
    ]
    if settings.PRIVATE_KEY is not None:
        found.append(settings.PRIVATE_KEY.get_secret_value())
    with contextlib.suppress(OSError):  # PRIVATE_KEY_PATH unreadable: nothing to hide
        found.append(settings.private_key())
    if settings.SENTRY_DSN is not None:
        found.append(settings.SENTRY_DSN.get_secret_value())
    for url in (settings.DATABASE_URL, settings.REDIS_URL):
        password = _url_password(url)
        if password:
            found.append(password)
    return found


_sentry_component: str | None = None


def init_sentry(settings: Settings, component: str) -> bool:
    """Report errors to Sentry when `SENTRY_DSN` is set; True when it is.

    `component` (web, worker, serve, …) becomes the `component` tag. Once per process:
    `rsi-bot serve` initialises it as "serve" before `create_app` would as "web".
    """
    global _sentry_component
    if settings.SENTRY_DSN is None:
        return False
    if _sentry_component is not None:
        return True
    import sentry_sdk

    scrubber = Scrubber(configured_secrets(settings))
    sentry_sdk.init(
        dsn=settings.SENTRY_DSN.get_secret_value(),
        send_default_pii=False,
        before_send=scrubber,
        before_send_transaction=scrubber,
        max_request_body_size="never",
    )
    sentry_sdk.get_global_scope().set_tag("component", component)
    _sentry_component = component
    return True
