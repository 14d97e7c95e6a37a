"""HMAC signatures of webhooks and intake requests, checked on the raw body."""

from __future__ import annotations

import hashlib
import hmac


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def valid(body: bytes, header: str | None, secret: str) -> bool:
    """Constant-time check of `sha256=<hex>`; a missing header is never valid."""
    if not header or not header.startswith("sha256="):
        return False
    try:
        claimed = bytes.fromhex(header[7:].strip())
    except ValueError:
        return False
    return hmac.compare_digest(hmac.digest(secret.encode(), body, "sha256"), claimed)
