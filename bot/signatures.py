"""HMAC signatures of webhooks and intake requests, checked on the raw body."""

from __future__ import annotations

import hashlib
import hmac


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def hasher(secret: str) -> hmac.HMAC:
    """An HMAC-SHA256 to feed a body chunk by chunk, for `matches`."""
    return hmac.new(secret.encode(), digestmod=hashlib.sha256)


def valid(body: bytes, header: str | None, secret: str) -> bool:
    """Constant-time check of `sha256=<hex>`; a missing header is never valid."""
    return matches(hmac.digest(secret.encode(), body, "sha256"), header)


def matches(digest: bytes, header: str | None) -> bool:
    """Whether `header` (`sha256=<hex>`) claims `digest`, compared in constant time."""
    if not header or not header.startswith("sha256="):
        return False
    try:
        claimed = bytes.fromhex(header[7:].strip())
    except ValueError:
        return False
    return hmac.compare_digest(digest, claimed)
