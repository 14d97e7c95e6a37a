"""GitHub access as the App: JWT, installation tokens, retries, rate limits, pagination.

PyGithub does the heavy lifting: `AppInstallationAuth` caches each installation token and
renews it shortly before it expires; `GithubRetry` retries 5xx and waits out primary and
secondary rate limits as `retry-after` / `x-ratelimit-reset` say. Every list is read
through PyGithub's `PaginatedList`, never just its first page.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from github import Auth, Github, GithubException, GithubIntegration, GithubRetry
from github.Repository import Repository

from bot import observability
from bot.config import Settings, load_private_key

USER_AGENT = "rsi-bot"
DOWNLOAD_CHUNK = 1024 * 1024


class _CountedRetry(GithubRetry):
    """GithubRetry that counts every response from the GitHub API by method and status.

    urllib3 asks the retry policy about each response it receives (attempts that are
    retried included), and every requester PyGithub derives from our clients — the one
    that mints installation tokens too — carries this policy, so this is the one place
    that sees all GitHub traffic without touching PyGithub's internals.
    """

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        observability.count_github_response(method, status_code)
        if method.upper() == "POST" and status_code >= 500:
            # GitHub often creates the comment, run or PR and then answers 502: retrying
            # here would create it twice. The effect's own retry looks before it posts.
            return False
        return super().is_retry(method, status_code, has_retry_after)


def _retry(backoff: float) -> GithubRetry:
    """429 joins GithubRetry's 5xx and 403 handling. Retries here hold a worker thread,
    so they are few and short (3 tries, waits of at most a minute); a longer outage is
    the job of the effects' scheduled retries (`bot.verification.steps`), which free it."""
    return _CountedRetry(
        total=3,
        backoff_factor=backoff,
        secondary_rate_wait=30,
        max_rate_limit_wait=60,
        status_forcelist=[*range(500, 600), 429],
    )


def _signer(pem: str) -> Callable[[dict[str, Any]], str]:
    """Sign the App's JWTs with the key parsed once: PyJWT given the PEM text parses and
    checks the RSA key again for every JWT (about 40 ms of CPU each)."""
    key = load_private_key(pem)
    if not isinstance(key, rsa.RSAPrivateKey):  # Settings checked it; GitHub signs RS256
        raise ValueError("the App's private key is not an RSA key")

    def sign(payload: dict[str, Any]) -> str:
        return jwt.encode(payload, key=key, algorithm="RS256")

    return sign


class GitHubApp:
    """One per process; thread-safe enough for gunicorn threads and huey workers."""

    def __init__(self, settings: Settings) -> None:
        self.base_url = settings.GITHUB_API_URL
        self._backoff = settings.GITHUB_RETRY_BACKOFF_S
        self._reads = settings.GITHUB_READ_INTERVAL_S or None
        self._writes = settings.GITHUB_WRITE_INTERVAL_S or None
        self.app_id = settings.APP_ID
        self._bot_login: str | None = None
        self._auth = Auth.AppAuth(settings.APP_ID, sign_func=_signer(settings.private_key()))
        self._integration = GithubIntegration(
            auth=self._auth,
            base_url=self.base_url,
            retry=_retry(self._backoff),
            user_agent=USER_AGENT,
            seconds_between_requests=self._reads,
            seconds_between_writes=self._writes,
        )
        self._clients: dict[int, Github] = {}
        self._installations: dict[str, int] = {}
        self._default_branches: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    @property
    def bot_login(self) -> str:
        """The App's bot account (`<slug>[bot]`), read once from `GET /app`."""
        if self._bot_login is None:
            slug = self._integration.get_app().slug
            self._bot_login = f"{slug}[bot]"
        return self._bot_login

    def installation_id(self, repo: str) -> int:
        with self._lock:
            if repo in self._installations:
                return self._installations[repo]
        owner, name = repo.split("/", 1)
        iid = self._integration.get_repo_installation(owner, name).id
        with self._lock:
            self._installations[repo] = iid
        return iid

    def client(self, installation_id: int) -> Github:
        with self._lock:
            gh = self._clients.get(installation_id)
            if gh is None:
                gh = Github(
                    auth=self._auth.get_installation_auth(installation_id),
                    base_url=self.base_url,
                    retry=_retry(self._backoff),
                    per_page=100,
                    user_agent=USER_AGENT,
                    lazy=True,
                    seconds_between_requests=self._reads,
                    seconds_between_writes=self._writes,
                )
                self._clients[installation_id] = gh
            return gh

    def default_branch(self, repo: str, installation_id: int | None = None) -> str:
        """Cached for an hour: it rarely changes and every verification needs it twice."""
        now = time.monotonic()
        with self._lock:
            hit = self._default_branches.get(repo)
        if hit is not None and now - hit[1] < 3600:
            return hit[0]
        branch = self.repo(repo, installation_id).default_branch
        with self._lock:
            self._default_branches[repo] = (branch, now)
        return branch

    def rate_limits(self) -> dict[str, tuple[int, int, int]]:
        """GitHub's rate limit as each client last saw it — `(remaining, limit, reset)` by
        "app" (the App's JWT) or installation id — from the `X-RateLimit-*` headers
        PyGithub keeps on its requesters; no API call. Clients that made no call yet are
        left out."""
        with self._lock:
            clients = sorted(self._clients.items())
        requesters = [("app", self._integration.requester)]
        requesters += [(str(iid), gh.requester) for iid, gh in clients]
        seen: dict[str, tuple[int, int, int]] = {}
        for who, requester in requesters:
            remaining, limit = requester.rate_limiting
            if remaining >= 0:
                seen[who] = (remaining, limit, requester.rate_limiting_resettime)
        return seen

    def repo(self, repo: str, installation_id: int | None = None) -> Repository:
        gh = self.client(installation_id or self.installation_id(repo))
        return gh.get_repo(repo)

    def request(
        self, installation_id: int, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """A raw REST call for what PyGithub does not model, with its auth and retries."""
        gh = self.client(installation_id)
        status, _headers, data = gh.requester.requestJson(method, path, input=body)
        if status >= 400:
            raise GithubException(status, _json(data), None)
        return status, _json(data)

    def app_request(
        self, method: str, path: str
    ) -> tuple[int, dict[str, Any] | list[Any], dict[str, str]]:
        """A raw REST call as the App itself (its JWT, retries and rate-limit waits), for
        the `/app/...` endpoints PyGithub does not model (webhook deliveries). `path` may
        be a whole URL from a `Link` header. Returns status, parsed JSON body ({} when
        empty) and lower-case headers; error statuses are returned, not raised."""
        status, headers, data = self._integration.requester.requestJson(method, path)
        try:
            doc = json.loads(data) if data else {}
        except ValueError:
            doc = {}
        body: dict[str, Any] | list[Any] = doc if isinstance(doc, dict | list) else {}
        return status, body, {str(k).lower(): str(v) for k, v in headers.items()}

    def download(self, installation_id: int, path: str, dest: Path, max_bytes: int) -> None:
        """Fetch a redirecting download (artifact zips) into the file `dest`, streamed:
        the API answers 302 with a short-lived blob URL that must be fetched *without*
        our token. `TooLarge` past `max_bytes` (what was written is left to the caller)."""
        gh = self.client(installation_id)
        status, headers, data = gh.requester.requestJson("GET", path)
        location = headers.get("location") or headers.get("Location")
        if status not in (301, 302, 303, 307, 308) or not location:
            raise GithubException(status, _json(data) or {"message": "no redirect"}, None)
        with requests.get(location, timeout=120, stream=True) as resp:
            resp.raise_for_status()
            declared = resp.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise TooLarge(int(declared), max_bytes)
            written = 0
            with open(dest, "wb") as out:
                for chunk in resp.iter_content(DOWNLOAD_CHUNK):
                    written += len(chunk)
                    if written > max_bytes:
                        raise TooLarge(written, max_bytes)
                    out.write(chunk)


class TooLarge(Exception):
    """A download past its bound; `size` is what was declared or read so far."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"more than {limit} bytes (at least {size})")
        self.size = size
        self.limit = limit


def _json(data: str | None) -> dict[str, Any]:
    if not data:
        return {}
    doc = json.loads(data)
    return doc if isinstance(doc, dict) else {"items": doc}
