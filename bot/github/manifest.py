"""GitHub's App-manifest flow: trading the one-time code for the new App's credentials
(`POST /app-manifests/{code}/conversions`, which needs no credentials of its own)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests

API_VERSION = "2022-11-28"
TIMEOUT_S = 30


class Unreachable(Exception):
    """GitHub could not be reached."""


def convert(api_url: str, code: str) -> tuple[int, Any]:
    """GitHub's status and parsed answer (None when it is not JSON)."""
    url = f"{api_url}/app-manifests/{quote(code, safe='')}/conversions"
    try:
        resp = requests.post(
            url,
            headers={
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": API_VERSION,
                "User-Agent": "rsi-bot",
            },
            timeout=TIMEOUT_S,
        )
    except requests.RequestException as exc:
        raise Unreachable(type(exc).__name__) from None
    try:
        return resp.status_code, resp.json()
    except ValueError:
        return resp.status_code, None
