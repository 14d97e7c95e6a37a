"""`.github/rsi.yml` fetched from the repository's default branch, with ETags: after the
first read each look is a conditional request, and a 304 reuses the parsed result."""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from github import GithubException

from bot.github.client import GitHubApp
from bot.repo_config import (
    CONFIG_PATH,
    ConfigResult,
    RepoConfig,
    code_span,
    fail_with,
    parse,
    problem,
)

log = logging.getLogger(__name__)

BLOBS_KEPT = 512
"""Parsed files kept by blob sha (a result is a few kilobytes)."""


@dataclass
class _Entry:
    etag: str | None
    result: ConfigResult


@dataclass
class ConfigCache:
    """Per process, keyed by repository; thread-safe. The file is fetched from the default
    branch; after the first read each `get` is a conditional request, and a 304 reuses the
    cached result as is (no parse). A 200 whose blob sha is unchanged is not re-parsed
    either (an ETag can change with the token). 404 → defaults, no error."""

    path: str = CONFIG_PATH
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _blobs: OrderedDict[str, ConfigResult] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, gh_app: GitHubApp, installation_id: int, repo: str) -> ConfigResult:
        key = repo.lower()
        with self._lock:
            cached = self._entries.get(key)
        headers = {"If-None-Match": cached.etag} if cached is not None and cached.etag else {}
        requester = gh_app.client(installation_id).requester
        status, resp_headers, body = requester.requestJson(
            "GET", f"/repos/{repo}/contents/{self.path}", headers=headers
        )
        if status == 304 and cached is not None:
            return cached.result
        if status == 404:
            self.forget(repo)
            return ConfigResult(RepoConfig(), path=self.path)
        if status != 200:
            raise GithubException(status, _json(body), resp_headers)
        doc = _json(body)
        sha = doc.get("sha") if isinstance(doc.get("sha"), str) else None
        if cached is not None and sha is not None and cached.result.sha == sha:
            result = cached.result
        else:
            result = self._read(doc, sha)
            if result.error:
                log.info("%s: %s is not valid:\n%s", repo, self.path, result.error)
        with self._lock:
            self._entries[key] = _Entry(resp_headers.get("etag"), result)
        return result

    def _read(self, doc: dict[str, Any], sha: str | None) -> ConfigResult:
        """The file's result; a blob already read (here, or in any repository) is not
        parsed again: a hostile file costs one bounded parse, not one an event."""
        html_url = doc.get("html_url") if isinstance(doc.get("html_url"), str) else None
        with self._lock:
            known = self._blobs.get(sha) if sha else None
            if known is not None:
                self._blobs.move_to_end(sha)  # type: ignore[arg-type]
        if known is not None:
            return replace(known, html_url=html_url)
        result = self._parse(doc, sha, html_url)
        if sha:
            with self._lock:
                self._blobs[sha] = result
                while len(self._blobs) > BLOBS_KEPT:
                    self._blobs.popitem(last=False)
        return result

    def _parse(self, doc: dict[str, Any], sha: str | None, html_url: str | None) -> ConfigResult:
        source = ConfigResult(RepoConfig(), found=True, sha=sha, html_url=html_url, path=self.path)
        if doc.get("type") != "file":
            return fail_with(source, [problem("file_not_a_file", path=code_span(self.path))])
        if doc.get("encoding") != "base64" or not isinstance(doc.get("content"), str):
            return fail_with(source, [problem("file_too_large", path=code_span(self.path))])
        try:
            text = base64.b64decode(doc["content"]).decode("utf-8-sig")
        except (binascii.Error, UnicodeDecodeError):
            return fail_with(source, [problem("file_not_utf8", path=code_span(self.path))])
        return parse(text, sha=sha, html_url=html_url, path=self.path)

    def forget(self, repo: str) -> None:
        with self._lock:
            self._entries.pop(repo.lower(), None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._blobs.clear()


def _json(data: str | None) -> dict[str, Any]:
    if not data:
        return {}
    try:
        doc = json.loads(data)
    except ValueError:
        return {"message": data[:200]}
    return doc if isinstance(doc, dict) else {"items": doc}
