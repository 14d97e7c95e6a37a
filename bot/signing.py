"""Signed report and plot URLs.

A report page and its plots are served only with `?token=…`, an HMAC-SHA256 of the
verification id under a key derived from a configured secret. The token is deterministic
(no timestamp), so links in old PR comments keep working, and unguessable without the
secret, so a private repository's evidence is not public.

The key is derived with a label (`derive_key`), so the same configured secret (the webhook
secret) can serve other purposes without a token ever equalling an HMAC made for them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import quote

__all__ = ["URL_LABEL", "UrlSigner", "derive_key"]

URL_LABEL = "report-urls"
_DERIVE_DOMAIN = b"rsi-bot/derive-key/v1\x00"
_TOKEN_DOMAIN = b"rsi-bot/report-token/v1\x00"


def derive_key(secret: str, label: str) -> bytes:
    """A 32-byte key for one purpose (`label`) from a configured secret."""
    if not secret:
        raise ValueError("the signing secret must not be empty")
    if not label:
        raise ValueError("the key label must not be empty")
    return hmac.new(secret.encode(), _DERIVE_DOMAIN + label.encode(), hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class UrlSigner:
    """Tokens for `/reports/<verification_id>` and its plots, and for a repository's
    `/history/<owner>/<name>`."""

    def __init__(self, secret: str, label: str = URL_LABEL) -> None:
        self._key = derive_key(secret, label)

    def __repr__(self) -> str:
        return "UrlSigner(<secret>)"

    def token(self, verification_id: str) -> str:
        msg = _TOKEN_DOMAIN + verification_id.encode("utf-8", "surrogatepass")
        return _b64(hmac.new(self._key, msg, hashlib.sha256).digest())

    def verify(self, verification_id: str, token: str) -> bool:
        if not isinstance(token, str) or not token:
            return False
        return hmac.compare_digest(
            self.token(verification_id).encode(), token.encode("utf-8", "surrogatepass")
        )

    def report_url(self, public_url: str, verification_id: str) -> str:
        base = public_url.rstrip("/")
        vid = quote(verification_id, safe="")
        return f"{base}/reports/{vid}?token={self.token(verification_id)}"

    def history_token(self, repo: str) -> str:
        """The token of a repository's history page (no verification id holds a NUL)."""
        return self.token(f"history\x00{repo}")

    def history_url(
        self, public_url: str, repo: str, suffix: str = "", filters: dict[str, str] | None = None
    ) -> str:
        """`/history/<owner>/<name>` (`suffix`: `.json`, `.csv`) with its token and the
        page's `filters` (task, gpu, mode: one series' page)."""
        base = public_url.rstrip("/")
        path = "/".join(quote(part, safe="") for part in repo.split("/", 1))
        query = "".join(f"&{k}={quote(v, safe='')}" for k, v in sorted((filters or {}).items()))
        return f"{base}/history/{path}{suffix}?token={self.history_token(repo)}{query}"

    def plot_url(self, public_url: str, verification_id: str, name: str) -> str:
        base = public_url.rstrip("/")
        vid = quote(verification_id, safe="")
        plot = quote(name, safe="")
        return f"{base}/reports/{vid}/plots/{plot}.png?token={self.token(verification_id)}"
