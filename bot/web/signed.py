"""The body of a signed request, checked as it streams.

A body's sender is unknown until its signature holds, so an unsigned body is never held
whole in memory: it is hashed a chunk at a time into a spool that keeps
`bot.bodies.MEMORY_PER_BODY` in memory and the rest on disk, and only a body whose
signature holds is read whole for the handler to parse.
"""

from __future__ import annotations

import tempfile

from flask import request

from bot import signatures
from bot.bodies import CHUNK, MEMORY_PER_BODY


def signed_body(header: str, secret: str) -> bytes | None:
    """The request's body when the signature in `header` holds for `secret`, else None.
    A body beyond the app's MAX_CONTENT_LENGTH raises werkzeug's 413 (Flask answers it)."""
    mac = signatures.hasher(secret)
    stream = request.stream
    with tempfile.SpooledTemporaryFile(max_size=MEMORY_PER_BODY) as spool:
        while chunk := stream.read(CHUNK):
            mac.update(chunk)
            spool.write(chunk)
        if not signatures.matches(mac.digest(), request.headers.get(header)):
            return None
        spool.seek(0)
        return spool.read()
