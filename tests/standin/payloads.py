"""GitHub's published webhook example payloads, and webhook signatures.

Hand-written payloads drift from what GitHub sends (a missing ``installation``, a number
where GitHub sends a string); GitHub's own examples do not. Tests start from a deep copy
of the first published example for an event/action and patch in only what they need.
The examples come from ``@octokit/webhooks-examples`` (fetched and pinned by
``tests/fetch_github_fixtures.py``).
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from functools import cache
from pathlib import Path
from typing import Any

from tests import fetch_github_fixtures


class NoExampleError(LookupError):
    """GitHub publishes no example for the requested event/action."""


@cache
def _load(path: Path) -> tuple[dict[str, Any], ...]:
    if path == fetch_github_fixtures.WEBHOOKS_PATH:
        fetch_github_fixtures.ensure()
    with path.open("rb") as fh:
        data = json.load(fh)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of webhook events")
    return tuple(data)


def load_examples(path: Path | None = None) -> list[dict[str, Any]]:
    """Every event ``{"name", "actions", "examples": [...]}``; parsed once per process.

    The returned list is a fresh deep copy, so callers may modify it freely.
    """
    return copy.deepcopy(list(_load(path or fetch_github_fixtures.WEBHOOKS_PATH)))


def example(event: str, action: str | None = None, *, path: Path | None = None) -> dict[str, Any]:
    """A deep copy of the first published example of ``event`` (with ``action``, if given)."""
    events = _load(path or fetch_github_fixtures.WEBHOOKS_PATH)
    entry = next((e for e in events if e.get("name") == event), None)
    if entry is None:
        known = ", ".join(sorted(str(e.get("name")) for e in events))
        raise NoExampleError(f"GitHub publishes no webhook examples for {event!r} (known: {known})")
    for candidate in entry.get("examples", []):
        if action is None or candidate.get("action") == action:
            return copy.deepcopy(dict(candidate))
    published = sorted({str(c.get("action")) for c in entry.get("examples", [])})
    raise NoExampleError(
        f"GitHub publishes no {event!r} example with action {action!r} "
        f"(examples exist for: {', '.join(published) or 'none'}; "
        f"the event's actions are {', '.join(entry.get('actions', []))})"
    )


def sign(body: bytes, secret: str) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body``: ``sha256=<hex>``."""
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"
