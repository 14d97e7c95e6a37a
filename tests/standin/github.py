"""A GitHub stand-in for end-to-end tests: a real HTTP server with an in-memory GitHub.

Why a server and not mocks: the app talks to GitHub through PyGithub and ``requests``
(retries, pagination, redirects, auth headers), and every one of those layers must be
exercised as in production. So the fake sits at the HTTP boundary only and is strict:

* every request is matched against GitHub's published REST description and validated
  (path and query parameters, JSON body) — see :mod:`tests.standin.openapi`;
* a route the stand-in does not serve, a bad credential, a missing permission, a repo or
  installation the test never set up: each is answered as GitHub would (404/401/403/422)
  *and* recorded in :attr:`GitHubStandIn.errors`, which :meth:`assert_clean` turns into a
  test failure. Answers that depend on state (a PR that does not exist, a PR that already
  exists, a branch that is missing) are GitHub's normal behaviour and are not errors;
* its answers are built from GitHub's own response examples and checked against the
  response schemas too (:attr:`response_errors`), so the app never learns to rely on a
  shape GitHub does not send.

What counts as an error, in short: anything the app should never send.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import math
import re
import secrets
import socket
import threading
import time
import traceback
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlencode

import jwt
from werkzeug.datastructures import Headers
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from bot import clock
from tests.standin import payloads
from tests.standin.openapi import OpenAPI
from tests.standin.state import (
    DEFAULT_PERMISSIONS,
    DEFAULT_RUN_NAME,
    Artifact,
    Blob,
    CheckRun,
    Comment,
    Fault,
    Installation,
    Issue,
    ManifestApp,
    Pull,
    RecordedRequest,
    Repo,
    Run,
    Token,
    Workflow,
)

JSONDict = dict[str, Any]
Handler = Callable[["GitHubStandIn", "_Ctx"], "_Answer"]

ENTERPRISE_PREFIX = "/api/v3"
BLOB_PREFIX = "/_blobs/"
BLOB_TTL = timedelta(minutes=1)
ARTIFACT_RETENTION = timedelta(days=90)
API_VERSIONS = ("2022-11-28", "2026-03-10")
DOCS_URL = "https://docs.github.com/rest"
JWT_MAX_LIFETIME_S = 600
JWT_CLOCK_SKEW_S = 60
_LEVELS = {"none": 0, "read": 1, "write": 2, "admin": 3}
# Legacy "permission" field of the collaborator-permission answer, by role.
_LEGACY_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}
_RUN_NAME_EXPR = re.compile(r"\$\{\{\s*([A-Za-z0-9_.\-]+)\s*\}\}")
_CREATED_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node_id(kind: str, ident: int) -> str:
    """GitHub's legacy global node id: base64 of ``0<len>:<Type><id>``."""
    return base64.b64encode(f"0{len(kind):02d}:{kind}{ident}".encode()).decode("ascii")


def _sha(*parts: object) -> str:
    return hashlib.sha1("\0".join(map(str, parts)).encode()).hexdigest()


def _blob_sha(data: bytes) -> str:
    """The git blob id of ``data`` (what the contents API calls ``sha``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _b64url(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def _replace_strings(node: Any, replacements: Sequence[tuple[str, str]]) -> Any:
    if isinstance(node, str):
        for old, new in replacements:
            node = node.replace(old, new)
        return node
    if isinstance(node, list):
        return [_replace_strings(v, replacements) for v in node]
    if isinstance(node, dict):
        return {k: _replace_strings(v, replacements) for k, v in node.items()}
    return node


@dataclass
class _Commit:
    """A commit the test declared (compare ranges, merged PRs), rendered on every read."""

    sha: str
    message: str
    author: str
    date: datetime
    parents: list[str] = field(default_factory=list)
    # Who committed it when not the author; "" for an author or committer GitHub links to
    # no account (the API's `author`/`committer` is then null).
    committer: str | None = None


@dataclass
class _Merge:
    """How a PR was merged: ``merged_at`` and the commit the merge left on its base."""

    merged_at: datetime
    merge_commit_sha: str


# --- plumbing for handlers ---------------------------------------------------------------


@dataclass
class _Answer:
    status: int
    payload: Any = None  # JSON-able; None → no JSON body
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    content_type: str | None = None


class _Refusal(Exception):
    """Stop handling and answer ``answer``; ``error`` (if any) goes into ``errors``."""

    def __init__(self, answer: _Answer, error: str | None = None) -> None:
        super().__init__(error or str(answer.status))
        self.answer = answer
        self.error = error


def _message(status: int, message: str, **extra: Any) -> _Answer:
    return _Answer(
        status, {"message": message, "documentation_url": DOCS_URL, "status": str(status), **extra}
    )


def _not_found(error: str | None = None) -> _Refusal:
    return _Refusal(_message(404, "Not Found"), error)


def _unprocessable(message: str, error: str | None = None, **extra: Any) -> _Refusal:
    return _Refusal(_message(422, message, **extra), error)


@dataclass
class _Ctx:
    method: str
    template: str
    path: str  # API path, without the Enterprise prefix
    params: dict[str, str]
    query: dict[str, str]
    body: Any
    headers: Headers
    repo: Repo | None = None
    token: Token | None = None

    @property
    def data(self) -> JSONDict:
        return self.body if isinstance(self.body, dict) else {}

    def need_repo(self) -> Repo:
        assert self.repo is not None, f"{self.template} is not a repository route"
        return self.repo

    def int_param(self, name: str) -> int:
        return int(self.params[name])


@dataclass(frozen=True)
class _RouteSpec:
    handler: Handler
    auth: str  # "jwt" or "installation"
    permissions: tuple[tuple[str, str], ...]  # any one of (permission, level) suffices


_ROUTES: dict[tuple[str, str], _RouteSpec] = {}


def _route(
    method: str,
    *templates: str,
    auth: str = "installation",
    permission: Sequence[tuple[str, str]] = (("metadata", "read"),),
) -> Callable[[Handler], Handler]:
    """Serve ``method`` on GitHub's path ``templates`` (as spelled in the description)."""

    def register(handler: Handler) -> Handler:
        for template in templates:
            _ROUTES[(method.lower(), template)] = _RouteSpec(handler, auth, tuple(permission))
        return handler

    return register


class _QuietHandler(WSGIRequestHandler):
    """Requests are recorded by the stand-in; werkzeug's access log would only be noise."""

    timeout = 30  # a client that vanishes mid-request cannot pin a thread forever

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


@dataclass
class HookAttempt:
    """One attempt to deliver a webhook to the App, as ``GET /app/hook/deliveries`` lists
    it: GitHub lists every attempt (a redelivery too) as its own entry under one ``guid``."""

    id: int
    guid: str
    event: str
    action: str | None
    status_code: int
    delivered_at: datetime
    payload: bytes  # what was sent, re-sent as is by a redelivery
    headers: dict[str, str]
    redelivery: bool = False
    duration: float = 0.0

    @property
    def status(self) -> str:
        """GitHub's wording: "OK", "Invalid HTTP Response: 500", "failed to connect"."""
        if self.status_code == 0:
            return "failed to connect"
        if 200 <= self.status_code < 300:
            return "OK"
        return f"Invalid HTTP Response: {self.status_code}"


# --- the stand-in ------------------------------------------------------------------------


class GitHubStandIn:
    """An in-memory GitHub served over real HTTP on ``127.0.0.1`` (random port).

    Use ``with GitHubStandIn() as gh:`` or :meth:`start` / :meth:`stop`; point the app at
    :attr:`url`; set up repositories with :meth:`add_repo` / :meth:`add_branch` etc.; call
    :meth:`assert_clean` at the end of the test.
    """

    def __init__(
        self,
        *,
        app_id: int | str = 424242,
        app_slug: str = "rsi-bot",
        enterprise: bool = False,
        legacy_dispatch: bool = False,
        web_url: str | None = None,
        public_key: str | None = None,
        check_responses: bool = True,
        openapi: OpenAPI | None = None,
    ) -> None:
        """
        :param app_id: the App id JWTs must carry as ``iss``.
        :param enterprise: serve the API under ``/api/v3`` like GitHub Enterprise Server.
        :param legacy_dispatch: answer workflow dispatches 204 even when run details are
            asked for, like GHES versions that predate ``return_run_details``.
        :param web_url: base of ``html_url`` links (default ``https://github.com``; the
            server's own origin with ``enterprise=True``).
        :param public_key: the App's public key (PEM); when given, JWT signatures are
            verified too, not only their claims.
        :param check_responses: validate the stand-in's own answers against GitHub's
            response schemas into :attr:`response_errors`.
        """
        self.app_id = str(app_id)
        self.app_slug = app_slug
        self.enterprise = enterprise
        self.legacy_dispatch = legacy_dispatch
        self.public_key = public_key
        self.check_responses = check_responses
        self.openapi = openapi or OpenAPI.load()
        self._web_url = web_url
        self.prefix = ENTERPRISE_PREFIX if enterprise else ""
        self.token_lifetime = timedelta(hours=1)
        self.clock: Callable[[], datetime] = clock.utcnow  # the App's: tests move it

        self.requests: list[RecordedRequest] = []
        self.errors: list[str] = []
        self.response_errors: list[str] = []
        self.tokens_issued = 0
        self.dispatches: list[JSONDict] = []
        # The App's webhook: every attempt GitHub made (record_hook_delivery), and where a
        # redelivery is sent: ``(body, headers) -> HTTP status`` the App answered.
        self.hook_attempts: list[HookAttempt] = []
        self.webhook_target: Callable[[bytes, dict[str, str]], int] | None = None
        self._redeliveries: list[threading.Thread] = []

        self.installations: dict[int, Installation] = {}
        self.repos: dict[str, Repo] = {}  # lower-case full name → repo
        self.tokens: dict[str, Token] = {}
        self.pulls: dict[str, dict[int, Pull]] = {}
        self.issues: dict[str, dict[int, Issue]] = {}
        self.comments: dict[int, Comment] = {}
        self.reactions: dict[int, list[JSONDict]] = {}
        self.check_runs: dict[int, CheckRun] = {}
        self.runs: dict[int, Run] = {}
        self.artifacts: dict[int, Artifact] = {}
        self.blobs: dict[str, Blob] = {}
        self.manifest_apps: dict[str, ManifestApp] = {}  # code → App made from a manifest
        self.commits: dict[str, dict[str, _Commit]] = {}  # lower-case repo → sha → commit
        self.commit_pulls: dict[str, dict[str, list[int]]] = {}  # repo → sha → PR numbers
        self.merges: dict[int, _Merge] = {}  # PR id → its merge
        self._faults: list[Fault] = []
        self._user_ids: dict[str, int] = {}
        self._ids = itertools.count(1_000_001)
        self._lock = threading.RLock()

        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self._origin = ""
        self._check_routes()

    def _check_routes(self) -> None:
        """Every served route must exist in GitHub's description: no invented endpoints."""
        for method, template in _ROUTES:
            item = self.openapi.document["paths"].get(template, {})
            if method not in item:
                raise AssertionError(
                    f"stand-in serves {method.upper()} {template}, unknown to GitHub"
                )

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> GitHubStandIn:
        """Start serving on a free port; returns self."""
        if self._server is not None:
            return self
        connections, lock = self._connections, self._connections_lock

        class Tracked(_QuietHandler):
            def setup(self) -> None:
                super().setup()
                with lock:
                    connections.add(self.connection)

            def finish(self) -> None:
                with lock:
                    connections.discard(self.connection)
                super().finish()

        server = make_server("127.0.0.1", 0, self._wsgi, threaded=True, request_handler=Tracked)
        self._server = server
        self._origin = f"http://127.0.0.1:{server.server_port}"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"github-standin-{server.server_port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release every socket and thread (safe to call twice)."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._server = self._thread = None
        for redelivery in list(self._redeliveries):
            redelivery.join(timeout=10)
        server.shutdown()
        # Keep-alive connections would otherwise hold their handler threads (and
        # server_close, which joins them) until the client hangs up.
        with self._connections_lock:
            open_connections = list(self._connections)
        for conn in open_connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if thread is not None:
            thread.join(timeout=10)
        server.server_close()

    def __enter__(self) -> GitHubStandIn:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT`` (no API prefix)."""
        if not self._origin:
            raise RuntimeError("the GitHub stand-in is not started")
        return self._origin

    @property
    def url(self) -> str:
        """The API base URL to configure the app with (``GITHUB_API_URL``)."""
        return self.origin + self.prefix

    @property
    def web_url(self) -> str:
        if self._web_url is not None:
            return self._web_url
        return self.origin if self.enterprise else "https://github.com"

    # --- test set-up ----------------------------------------------------------------

    def add_installation(
        self,
        account: str,
        *,
        installation_id: int | None = None,
        account_type: str = "Organization",
        permissions: Mapping[str, str] | None = None,
    ) -> Installation:
        """Install the App on ``account`` (done for you by :meth:`add_repo`)."""
        with self._lock:
            existing = self._installation_of(account)
            if existing is not None and installation_id in (None, existing.id):
                if permissions is not None:
                    existing.permissions = dict(permissions)
                return existing
            iid = installation_id if installation_id is not None else next(self._ids)
            inst = Installation(
                iid,
                account,
                account_type,
                dict(permissions if permissions is not None else DEFAULT_PERMISSIONS),
                self.clock(),
            )
            self.installations[iid] = inst
            return inst

    def _installation_of(self, account: str) -> Installation | None:
        return next(
            (i for i in self.installations.values() if i.account.lower() == account.lower()), None
        )

    def add_repo(
        self,
        full_name: str,
        *,
        installed: bool = True,
        installation_id: int | None = None,
        default_branch: str = "main",
        default_sha: str | None = None,
        private: bool = False,
        fork: bool = False,
        owner_type: str = "Organization",
    ) -> Repo:
        """A repository (and, unless ``installed=False``, the App's installation on its
        owner). Adding it again returns the existing one unchanged."""
        with self._lock:
            key = full_name.lower()
            if key in self.repos:
                return self.repos[key]
            owner, name = full_name.split("/", 1)
            iid = None
            if installed:
                iid = self.add_installation(
                    owner, installation_id=installation_id, account_type=owner_type
                ).id
            repo = Repo(
                owner, name, next(self._ids), iid, owner_type, default_branch, private, fork
            )
            repo.branches[default_branch] = default_sha or _sha(full_name, default_branch)
            self.repos[key] = repo
            self.pulls[key] = {}
            self.issues[key] = {}
            return repo

    def repo(self, full_name: str) -> Repo:
        """The repository record (created with the defaults of :meth:`add_repo` if new)."""
        return self.add_repo(full_name)

    def add_branch(self, repo: str, ref: str, sha: str) -> None:
        """Create or move a branch (a push): open PRs on it see the new head at once."""
        with self._lock:
            self.repo(repo).branches[ref] = sha

    def add_pull(
        self,
        repo: str,
        *,
        head: str,
        head_sha: str | None = None,
        base: str = "main",
        title: str = "A pull request",
        body: str | None = "",
        user: str = "octocat",
        number: int | None = None,
        draft: bool = False,
    ) -> JSONDict:
        """An existing PR opened by a person; ``head`` is ``owner:ref`` or ``ref``."""
        with self._lock:
            target = self.repo(repo)
            head_owner, _, ref = head.rpartition(":")
            head_full = f"{head_owner}/{target.name}" if head_owner else target.full_name
            head_repo = self.repo(head_full)
            if head_sha is not None or ref not in head_repo.branches:
                head_repo.branches[ref] = head_sha or _sha(head_full, ref)
            pull = self._new_pull(target, head_repo, ref, base, title, body, user, "User", number)
            pull.draft = draft
            return self._pull_json(target, pull)

    def add_comments(
        self,
        repo: str,
        number: int,
        n: int,
        body: str = "A comment",
        *,
        user: str = "octocat",
        user_type: str = "User",
    ) -> list[int]:
        """Pre-fill ``n`` comments on issue/PR ``number`` (e.g. to push the app's own
        comment past page one). ``body`` may use ``{i}`` for the comment's index."""
        with self._lock:
            target = self.repo(repo)
            self._issue_or_pull(target, number, create=True)
            ids = []
            for i in range(n):
                ids.append(self._new_comment(target, number, body.format(i=i), user, user_type).id)
            return ids

    def delete_comment(self, comment_id: int) -> None:
        """Someone (a maintainer, the author) deleted the comment on GitHub's web side:
        from now on it is 404 to every API request."""
        with self._lock:
            del self.comments[comment_id]
            self.reactions.pop(comment_id, None)

    def add_app_comment(self, repo: str, number: int, body: str) -> int:
        """A comment the App wrote earlier (e.g. before its database was lost): by its
        bot user, ``performed_via_github_app`` set, editable by the App."""
        with self._lock:
            target = self.repo(repo)
            self._issue_or_pull(target, number, create=True)
            bot = self._bot_login()
            return self._new_comment(target, number, body, bot, "Bot", via_app=True).id

    def set_permission(self, repo: str, username: str, role: str) -> None:
        """``username``'s role on ``repo``: admin, maintain, write, triage, read or none."""
        if role not in _LEGACY_PERMISSION:
            raise ValueError(f"unknown role {role!r}")
        with self._lock:
            self.repo(repo).permissions[username.lower()] = role

    def set_file(
        self, repo: str, path: str, content: bytes | str, *, ref: str | None = None
    ) -> None:
        """A file for the contents API; ``ref=None`` serves it on every ref."""
        data = content.encode() if isinstance(content, str) else content
        with self._lock:
            self.repo(repo).files[(ref, path.strip("/"))] = data

    def set_compare(
        self,
        repo: str,
        base: str,
        head: str,
        *,
        status: str = "ahead",
        ahead_by: int | None = None,
        behind_by: int = 0,
        commits: Sequence[str] | None = None,
        authors: Mapping[str, str] | None = None,
        committers: Mapping[str, str] | None = None,
        **fields: Any,
    ) -> None:
        """What ``GET /compare/{base}...{head}`` answers (extra ``fields`` override).

        ``authors`` and ``committers`` name the GitHub account of a commit by SHA ("" for
        none: the API's user is then null); the committer defaults to the author.

        ``commits``: the SHAs only ``head`` has, oldest first, as GitHub lists them (paged
        with ``page``/``per_page``; without either, the newest 250). Commits not declared
        by :meth:`add_merged_pull` are made up, each the child of the one before.
        ``ahead_by`` defaults to their number (1 without ``commits``).
        """
        with self._lock:
            target = self.repo(repo)
            shas = list(commits or [])
            parent = base
            for sha in shas:
                commit = self._declare_commit(target, sha, parent=parent)
                if authors and sha in authors:
                    commit.author = authors[sha]
                if committers and sha in committers:
                    commit.committer = committers[sha]
                parent = sha
            ahead = ahead_by if ahead_by is not None else (len(shas) if commits is not None else 1)
            target.compares[f"{base}...{head}"] = {
                "status": status,
                "ahead_by": ahead,
                "behind_by": behind_by,
                "total_commits": ahead,
                "commits": shas,
                **fields,
            }

    def add_merged_pull(
        self,
        repo: str,
        number: int,
        title: str,
        commits: Sequence[str],
        *,
        merged_at: datetime | None = None,
        merge_commit_sha: str | None = None,
        base: str | None = None,
        user: str = "octocat",
    ) -> JSONDict:
        """A PR merged into ``base`` (default branch) at ``merged_at`` (now), with its
        ``commits`` (oldest first): ``GET /commits/{sha}/pulls`` answers it for each of
        them and for ``merge_commit_sha`` (default: the last commit, as a squash leaves
        it). An existing PR ``number`` (an open one of :meth:`add_pull`) becomes merged."""
        if not commits:
            raise ValueError("a merged PR has at least one commit")
        with self._lock:
            target = self.repo(repo)
            when = merged_at or self.clock()
            pull = self.pulls[target.full_name.lower()].get(number)
            if pull is None:
                ref = f"pr-{number}"
                target.branches.setdefault(ref, commits[-1])
                branch = base or target.default_branch
                pull = self._new_pull(target, target, ref, branch, title, "", user, "User", number)
            pull.title = title
            pull.head_sha = commits[-1]
            pull.state = "closed"
            pull.closed_at = pull.updated_at = when
            merge_sha = merge_commit_sha or commits[-1]
            self.merges[pull.id] = _Merge(when, merge_sha)
            by_sha = self.commit_pulls.setdefault(target.full_name.lower(), {})
            parent: str | None = None
            for sha in dict.fromkeys([*commits, merge_sha]):
                self._declare_commit(target, sha, title, user, when, parent)
                numbers = by_sha.setdefault(sha, [])
                if number not in numbers:
                    numbers.append(number)
                parent = sha
            return self._pull_json(target, pull)

    def _declare_commit(
        self,
        repo: Repo,
        sha: str,
        message: str | None = None,
        author: str = "octocat",
        date: datetime | None = None,
        parent: str | None = None,
    ) -> _Commit:
        """The commit ``sha`` of ``repo``, created if new; a message given later wins."""
        known = self.commits.setdefault(repo.full_name.lower(), {})
        commit = known.get(sha)
        if commit is None:
            commit = _Commit(
                sha,
                message or f"Commit {sha[:7]}",
                author,
                date or self.clock(),
                [parent] if parent and parent != sha else [],
            )
            known[sha] = commit
        elif message is not None:
            commit.message, commit.author = message, author
            commit.date = date or commit.date
        return commit

    def add_workflow(
        self,
        repo: str,
        file: str,
        *,
        name: str | None = None,
        run_name_template: str | None = DEFAULT_RUN_NAME,
        inputs: Collection[str] | None = None,
        required: Collection[str] = (),
    ) -> Workflow:
        """A workflow file. With ``inputs`` declared, a dispatch with other inputs (or
        without a ``required`` one) is refused 422 like GitHub does, and recorded."""
        with self._lock:
            target = self.repo(repo)
            workflow = Workflow(
                next(self._ids),
                file,
                name or file.rsplit(".", 1)[0],
                run_name_template,
                tuple(inputs) if inputs is not None else None,
                tuple(required),
                self.clock(),
            )
            target.workflows[file] = workflow
            return workflow

    def add_artifact(
        self, repo: str, run_id: int, name: str, data: bytes, *, expired: bool = False
    ) -> JSONDict:
        """An artifact of run ``run_id``: listed by the artifacts API, and its zip
        download redirects to a short-lived blob URL that serves ``data``."""
        with self._lock:
            target = self.repo(repo)
            if run_id not in self.runs:
                raise KeyError(f"no workflow run {run_id}")
            now = self.clock()
            artifact = Artifact(
                next(self._ids),
                target.full_name,
                run_id,
                name,
                data,
                now,
                now - timedelta(seconds=1) if expired else now + ARTIFACT_RETENTION,
            )
            self.artifacts[artifact.id] = artifact
            return self._artifact_json(artifact)

    def start_run(self, repo: str, run_id: int) -> JSONDict:
        """Mark a run in progress; returns the ``workflow_run`` ``in_progress`` webhook."""
        with self._lock:
            run = self._run(self.repo(repo), run_id)
            run.status, run.updated_at = "in_progress", self.clock()
            run.run_started_at = run.run_started_at or run.updated_at
            return self.run_event(repo, run_id, "in_progress")

    def complete_run(
        self,
        repo: str,
        run_id: int,
        conclusion: str = "success",
        *,
        failed_step: str | None = None,
        log: str = "",
        failed_window: tuple[datetime, datetime] | None = None,
    ) -> JSONDict:
        """Finish a run; returns the ``workflow_run`` ``completed`` webhook payload. A
        failed run's verify job failed at ``failed_step`` (between ``failed_window``), its
        log ``log``; the steps that run after a failure follow it, as in the workflow."""
        with self._lock:
            run = self._run(self.repo(repo), run_id)
            run.status, run.conclusion, run.updated_at = "completed", conclusion, self.clock()
            run.failed_step, run.log, run.failed_window = failed_step, log, failed_window
            return self.run_event(repo, run_id, "completed")

    def run_event(self, repo: str, run_id: int, action: str) -> JSONDict:
        """A ``workflow_run`` webhook payload for the run as it stands now, built from
        GitHub's published example (the ``completed`` one when GitHub has none for
        ``action``) with this run, repository, workflow and installation patched in."""
        with self._lock:
            target = self.repo(repo)
            run = self._run(target, run_id)
            try:
                event = payloads.example("workflow_run", action)
            except payloads.NoExampleError:
                event = payloads.example("workflow_run", "completed")
            old = str(event["repository"]["full_name"])
            event = _replace_strings(event, self._url_rewrites(old, target.full_name))
            event["action"] = action
            event["repository"] = self._repo_json(target)
            if target.owner_type == "Organization":
                event["organization"] = self._org_json(target.owner)
            else:
                event.pop("organization", None)
            event["sender"] = self._user(f"{self.app_slug}[bot]", "Bot")
            if target.installation_id is not None:
                event["installation"] = {
                    "id": target.installation_id,
                    "node_id": _node_id("Installation", target.installation_id),
                }
            workflow = self._workflow_json(target, target.workflows[run.workflow])
            event["workflow"] = {**event.get("workflow", {}), **workflow}
            rest = self._run_json(run)
            merged = {**event["workflow_run"], **rest}
            merged["repository"] = merged["head_repository"] = self._minimal_repo_json(target)
            event["workflow_run"] = merged
            return dict(event)

    def fail_next(
        self,
        method: str,
        path_regex: str,
        status: int = 502,
        times: int = 1,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status`` instead.

        ``method`` may be ``"*"``; ``path_regex`` is searched in the API path (no prefix).
        ``body`` is JSON-encoded unless bytes; by default GitHub's ``{"message": ...}``.
        Faults apply after auth and validation; unused ones fail :meth:`assert_clean`.
        Examples: ``fail_next("POST", r"/check-runs$", 502)``; a secondary rate limit:
        ``fail_next("GET", r"/pulls/", 403, headers={"retry-after": "1"}, body={"message":
        "You have exceeded a secondary rate limit..."})``.
        """
        with self._lock:
            self._faults.append(
                Fault(
                    method.upper(), re.compile(path_regex), status, times, dict(headers or {}), body
                )
            )

    def clear_faults(self) -> None:
        """Forget every injected fault, used or not."""
        with self._lock:
            self._faults.clear()

    def record_hook_delivery(
        self,
        guid: str,
        event: str,
        action: str | None,
        status_code: int,
        payload: bytes | Mapping[str, Any] = b"{}",
        headers: Mapping[str, str] | None = None,
        *,
        redelivery: bool = False,
        duration: float = 0.0,
    ) -> HookAttempt:
        """Record an attempt to deliver a webhook to the App and what the App answered
        (``status_code``; 0 when it could not be reached), as GitHub keeps it for
        ``GET /app/hook/deliveries``. ``payload`` and ``headers`` are what was sent; a
        redelivery sends them again (default headers: event, guid, JSON content type)."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        sent = dict(
            headers
            or {
                "Content-Type": "application/json",
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": guid,
            }
        )
        with self._lock:
            attempt = HookAttempt(
                next(self._ids),
                guid,
                event,
                action,
                status_code,
                self.clock(),
                body,
                sent,
                redelivery,
                duration,
            )
            self.hook_attempts.append(attempt)
            return attempt

    def wait_for_redeliveries(self, timeout: float = 10.0) -> None:
        """Block until every redelivery requested so far was attempted (GitHub answers
        the request 202 and delivers shortly after, so the stand-in does too)."""
        deadline = time.monotonic() + timeout
        for redelivery in list(self._redeliveries):
            redelivery.join(max(0.0, deadline - time.monotonic()))
            if redelivery.is_alive():
                raise AssertionError(f"a redelivery is still running after {timeout}s")

    def _redeliver(self, original: HookAttempt) -> None:
        """Send ``original``'s payload and headers to :attr:`webhook_target` again and
        record the attempt (``redelivery: true``) with the status the App answered."""
        target = self.webhook_target
        if target is None:
            return
        started = time.monotonic()
        try:
            status = target(original.payload, dict(original.headers))
        except Exception as exc:  # a target returns 0 for "unreachable"; raising is a bug
            status = 0
            with self._lock:
                self.errors.append(f"redelivery of {original.guid}: the target raised {exc!r}")
        self.record_hook_delivery(
            original.guid,
            original.event,
            original.action,
            status,
            original.payload,
            original.headers,
            redelivery=True,
            duration=round(time.monotonic() - started, 3),
        )

    def create_app_from_manifest(
        self,
        manifest: Mapping[str, Any],
        *,
        owner: str = "openrsi-bot",
        owner_type: str = "Organization",
        webhook_secret: bool = True,
    ) -> str:
        """What GitHub's web side does when a browser posts a manifest to
        ``/settings/apps/new``: check it, create the App and return the temporary
        ``code`` that the browser brings to the manifest's ``redirect_url``."""
        problems = _manifest_problems(manifest)
        if problems:
            with self._lock:
                self.errors.extend(f"app manifest: {p}" for p in problems)
            raise AssertionError("GitHub would refuse this App manifest: " + "; ".join(problems))
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode()
        with self._lock:
            app_id = next(self._ids)
            slug = re.sub(r"[^a-z0-9]+", "-", str(manifest["name"]).lower()).strip("-")
            code = secrets.token_hex(20)
            self.manifest_apps[code] = ManifestApp(
                code=code,
                id=app_id,
                slug=slug,
                owner=owner,
                owner_type=owner_type,
                manifest=json.loads(json.dumps(manifest)),
                pem=pem,
                webhook_secret=secrets.token_hex(20) if webhook_secret else None,
                client_id=f"Iv23li{secrets.token_hex(7)}",
                client_secret=secrets.token_hex(20),
                created_at=self.clock(),
            )
            return code

    # --- inspection -----------------------------------------------------------------

    def matching(
        self, method: str | None = None, path_regex: str | None = None
    ) -> list[RecordedRequest]:
        """Recorded requests by method and/or a regex searched in the path."""
        pattern = re.compile(path_regex) if path_regex is not None else None
        with self._lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method.upper())
                and (pattern is None or pattern.search(r.path))
            ]

    def count(self, method: str | None = None, path_regex: str | None = None) -> int:
        """How many requests matched (see :meth:`matching`)."""
        return len(self.matching(method, path_regex))

    def check_run_updates(self, check_run_id: int) -> list[JSONDict]:
        """The bodies the app sent for a check run: its creation, then each update."""
        with self._lock:
            return list(self.check_runs[check_run_id].history)

    def comments_on(self, repo: str, number: int) -> list[Comment]:
        with self._lock:
            return sorted(
                (
                    c
                    for c in self.comments.values()
                    if c.repo.lower() == repo.lower() and c.issue_number == number
                ),
                key=lambda c: c.id,
            )

    def pending_faults(self) -> list[str]:
        with self._lock:
            return [
                f"fail_next({f.method}, {f.pattern.pattern!r}, {f.status}) used {f.used}/{f.times}"
                for f in self._faults
                if f.used < f.times
            ]

    def assert_clean(self) -> None:
        """Fail if the app sent anything GitHub would refuse, or a fault went unused."""
        problems = [*self.errors]
        problems += [f"unused fault: {p}" for p in self.pending_faults()]
        problems += [f"stand-in answered off-schema: {p}" for p in self.response_errors]
        if problems:
            raise AssertionError(
                "GitHub stand-in saw problems:\n" + "\n".join(f"  - {p}" for p in problems)
            )

    # --- HTTP entry point -----------------------------------------------------------

    def _wsgi(self, environ: Any, start_response: Any) -> Any:
        request = Request(environ)
        try:
            with self._lock:
                response = self._handle(request)
        except Exception:  # a stand-in bug must fail the test, not kill the server thread
            detail = traceback.format_exc(limit=8)
            with self._lock:
                self.errors.append(
                    f"stand-in crashed on {request.method} {request.path}:\n{detail}"
                )
            response = Response(
                json.dumps({"message": "stand-in crashed"}), 500, content_type="application/json"
            )
        return response(environ, start_response)

    def _handle(self, request: Request) -> Response:
        raw = request.get_data(cache=True)
        content_type = request.headers.get("Content-Type")
        parsed: Any = None
        if raw.strip():
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
        record = RecordedRequest(
            method=request.method,
            path=request.path,
            query=request.args.to_dict(),
            json=parsed,
            headers=dict(request.headers.items()),
            body=raw,
        )
        self.requests.append(record)
        if request.path.startswith(BLOB_PREFIX):
            answer = self._serve_blob(request)
        else:
            answer = self._serve_api(request, record, raw, content_type, parsed)
        record.status = answer.status
        return self._response(answer)

    def _serve_api(
        self,
        request: Request,
        record: RecordedRequest,
        raw: bytes,
        content_type: str | None,
        parsed: Any,
    ) -> _Answer:
        label = f"{request.method} {request.path}"
        if not request.path.startswith(self.prefix + "/"):
            self.errors.append(f"{label}: outside the API prefix {self.prefix!r}")
            return _message(404, "Not Found")
        path = request.path[len(self.prefix) :] if self.prefix else request.path
        record.path = path
        label = f"{request.method} {path}"
        try:
            found = self.openapi.route(request.method, path)
            if found is None or found.operation is None:
                problems = self.openapi.validate(request.method, path, {}, None, None)
                raise _not_found(problems[0] if problems else f"{label}: unknown route")
            record.operation = str(found.operation.get("operationId"))
            spec = _ROUTES.get((found.method, found.template))
            if spec is None:
                raise _Refusal(
                    _message(501, "Not implemented by the GitHub stand-in"),
                    f"{label}: {record.operation} is not served by the stand-in "
                    "(add it to tests/standin/github.py if the app really needs it)",
                )
            self._check_api_version(label, request.headers)
            ctx = _Ctx(
                request.method,
                found.template,
                path,
                found.params,
                request.args.to_dict(),
                parsed,
                request.headers,
            )
            self._authenticate(label, spec, ctx)
            problems = self.openapi.validate(
                request.method, path, dict(request.args.lists()), raw, content_type
            )
            if problems:
                self.errors.extend(problems)
                raise _Refusal(_message(422, "Invalid request.\n\n" + "\n".join(problems)))
            self._authorize(label, spec, ctx)
            fault = self._take_fault(request.method, path)
            if fault is not None:
                record.injected = True
                return fault
            answer = spec.handler(self, ctx)
        except _Refusal as refusal:
            if refusal.error:
                self.errors.append(refusal.error)
            return refusal.answer
        if self.check_responses and 200 <= answer.status < 300 and answer.raw is None:
            self.response_errors.extend(
                self.openapi.validate_response(request.method, path, answer.status, answer.payload)
            )
        return answer

    def _response(self, answer: _Answer) -> Response:
        headers = Headers(answer.headers)
        body: bytes = b""
        if answer.raw is not None:
            body = answer.raw
            headers.setdefault("Content-Type", answer.content_type or "application/octet-stream")
        elif answer.payload is not None:
            body = json.dumps(answer.payload).encode()
            headers.setdefault("Content-Type", "application/json; charset=utf-8")
        used = len(self.requests)
        headers.setdefault("X-GitHub-Media-Type", "github.v3; format=json")
        headers.setdefault("X-GitHub-Api-Version-Selected", API_VERSIONS[0])
        headers.setdefault("X-GitHub-Request-Id", secrets.token_hex(8).upper())
        headers.setdefault("X-RateLimit-Limit", "5000")
        headers.setdefault("X-RateLimit-Remaining", str(max(1, 5000 - used)))
        headers.setdefault("X-RateLimit-Used", str(min(used, 4999)))
        headers.setdefault("X-RateLimit-Reset", str(int(time.time()) + 3600))
        headers.setdefault("X-RateLimit-Resource", "core")
        return Response(body, answer.status, headers)

    # --- checks before a handler runs -----------------------------------------------

    def _check_api_version(self, label: str, headers: Headers) -> None:
        version = headers.get("X-GitHub-Api-Version")
        if version is not None and version not in API_VERSIONS:
            raise _Refusal(
                _message(400, f"API version {version} is not supported."),
                f"{label}: unsupported X-GitHub-Api-Version {version!r}",
            )

    def _authenticate(self, label: str, spec: _RouteSpec, ctx: _Ctx) -> None:
        scheme, _, credential = ctx.headers.get("Authorization", "").partition(" ")
        scheme, credential = scheme.lower(), credential.strip()
        if spec.auth == "none":
            return
        if spec.auth == "jwt":
            if scheme != "bearer" or not credential:
                raise self._unauthorized(f"{label}: needs 'Authorization: Bearer <App JWT>'")
            problem = self._jwt_problem(credential)
            if problem:
                raise self._unauthorized(
                    f"{label}: {problem}", "A JSON web token could not be decoded"
                )
            return
        if scheme not in ("token", "bearer") or not credential:
            raise self._unauthorized(f"{label}: no installation token", "Requires authentication")
        token = self.tokens.get(credential)
        if token is None:
            if credential.count(".") == 2:
                raise self._unauthorized(
                    f"{label}: an App JWT cannot call {ctx.template}; use an installation token"
                )
            raise self._unauthorized(f"{label}: unknown token {credential[:12]}…")
        if token.expires_at <= self.clock():
            raise self._unauthorized(
                f"{label}: installation token expired at {_iso(token.expires_at)}"
            )
        ctx.token = token

    def _unauthorized(self, error: str, message: str = "Bad credentials") -> _Refusal:
        return _Refusal(_message(401, message), error)

    def _jwt_problem(self, credential: str) -> str | None:
        parts = credential.split(".")
        if len(parts) != 3:
            return "the bearer credential is not a JWT"
        try:
            header = json.loads(_b64url(parts[0]))
            claims = json.loads(_b64url(parts[1]))
        except ValueError:
            return "the JWT does not decode"
        if not isinstance(header, dict) or not isinstance(claims, dict):
            return "the JWT does not decode"
        if header.get("alg") != "RS256":
            return f"JWT alg is {header.get('alg')!r}, GitHub requires RS256"
        if str(claims.get("iss")) != self.app_id:
            return f"JWT iss {claims.get('iss')!r} is not the App id {self.app_id}"
        now = time.time()  # the client minted it from the real clock
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, int | float) or exp <= now:
            return f"JWT expired (exp={exp!r})"
        if not isinstance(iat, int | float) or iat > now + JWT_CLOCK_SKEW_S:
            return f"JWT iat {iat!r} is missing or in the future"
        if exp - iat > JWT_MAX_LIFETIME_S:
            return f"JWT lives {exp - iat:.0f}s; GitHub allows at most {JWT_MAX_LIFETIME_S}s"
        if self.public_key is not None:
            try:
                jwt.decode(
                    credential,
                    self.public_key,
                    algorithms=["RS256"],
                    options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
                )
            except jwt.InvalidTokenError as exc:
                return f"JWT signature does not verify with the App's key ({exc})"
        return None

    def _authorize(self, label: str, spec: _RouteSpec, ctx: _Ctx) -> None:
        """Resolve the repository and check the token may touch it with this route."""
        owner, name = ctx.params.get("owner"), ctx.params.get("repo")
        if owner is None or name is None:
            return
        repo = self.repos.get(f"{owner}/{name}".lower())
        if repo is None:
            raise _not_found(f"{label}: repository {owner}/{name} was never set up in the test")
        ctx.repo = repo
        token = ctx.token
        if token is None:  # App JWT routes (e.g. the repo's installation)
            return
        if repo.installation_id != token.installation_id:
            raise _not_found(
                f"{label}: token of installation {token.installation_id} used on "
                f"{repo.full_name}, which is "
                + (
                    f"installation {repo.installation_id}"
                    if repo.installation_id is not None
                    else "not an App installation"
                )
            )
        if token.repositories is not None and repo.full_name.lower() not in token.repositories:
            raise _not_found(
                f"{label}: token was scoped to other repositories than {repo.full_name}"
            )
        granted = [
            (perm, level)
            for perm, level in spec.permissions
            if _LEVELS.get(token.permissions.get(perm, "none"), 0) >= _LEVELS[level]
        ]
        if not granted:
            wanted = " or ".join(f"{p}:{lvl}" for p, lvl in spec.permissions)
            raise _Refusal(
                _message(403, "Resource not accessible by integration"),
                f"{label}: needs {wanted}; the token has {token.permissions}",
            )

    def _take_fault(self, method: str, path: str) -> _Answer | None:
        for fault in self._faults:
            if fault.used >= fault.times:
                continue
            if fault.method not in ("*", method.upper()) or not fault.pattern.search(path):
                continue
            fault.used += 1
            if isinstance(fault.body, bytes):
                return _Answer(fault.status, None, dict(fault.headers), raw=fault.body)
            body = fault.body
            if body is None:
                body = {"message": _DEFAULT_FAULT_MESSAGES.get(fault.status, "Server Error")}
            return _Answer(fault.status, body, dict(fault.headers))
        return None

    # --- blobs: artifact downloads --------------------------------------------------

    def _new_blob(self, data: bytes) -> str:
        key = secrets.token_urlsafe(24)
        expires = self.clock() + BLOB_TTL
        self.blobs[key] = Blob(data, expires)
        return (
            f"{self.origin}{BLOB_PREFIX}{key}?se={quote(_iso(expires))}&sig={secrets.token_hex(16)}"
        )

    def _serve_blob(self, request: Request) -> _Answer:
        """Imitate the storage behind artifact redirects: no GitHub auth, short-lived."""
        if request.method not in ("GET", "HEAD"):
            return _Answer(405, raw=b"", content_type="text/plain")
        if "Authorization" in request.headers:
            self.errors.append(
                f"{request.method} {request.path}: artifact storage was sent an Authorization "
                "header (the GitHub token must not follow the redirect to blob storage)"
            )
            return _Answer(
                403,
                raw=b"<Error><Code>InvalidAuthenticationInfo</Code></Error>",
                content_type="application/xml",
            )
        blob = self.blobs.get(request.path[len(BLOB_PREFIX) :])
        if blob is None:
            return _Answer(
                404, raw=b"<Error><Code>BlobNotFound</Code></Error>", content_type="application/xml"
            )
        if blob.expires_at <= self.clock():
            return _Answer(
                403,
                raw=b"<Error><Code>AuthenticationFailed</Code><Message>Signed expiry time has "
                b"passed</Message></Error>",
                content_type="application/xml",
            )
        data = b"" if request.method == "HEAD" else blob.data
        return _Answer(200, raw=data, content_type=blob.content_type)

    # --- JSON GitHub would answer -----------------------------------------------------

    def _url_rewrites(self, old_full_name: str, new_full_name: str) -> list[tuple[str, str]]:
        return [
            ("https://api.github.com", self.url),
            ("https://github.com", self.web_url),
            (old_full_name, new_full_name),
        ]

    def _user_id(self, login: str) -> int:
        return self._user_ids.setdefault(login.lower(), next(self._ids))

    def _user(self, login: str, kind: str = "User") -> JSONDict:
        uid = self._user_id(login)
        api = f"{self.url}/users/{quote(login)}"
        html = (
            f"{self.web_url}/apps/{login.removesuffix('[bot]')}"
            if kind == "Bot"
            else f"{self.web_url}/{login}"
        )
        return {
            "login": login,
            "id": uid,
            "node_id": _node_id(kind if kind != "Organization" else "Organization", uid),
            "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?v=4",
            "gravatar_id": "",
            "url": api,
            "html_url": html,
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": kind,
            "user_view_type": "public",
            "site_admin": False,
        }

    def _org_json(self, login: str) -> JSONDict:
        uid = self._user_id(login)
        api = f"{self.url}/orgs/{login}"
        return {
            "login": login,
            "id": uid,
            "node_id": _node_id("Organization", uid),
            "url": api,
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events",
            "hooks_url": f"{api}/hooks",
            "issues_url": f"{api}/issues",
            "members_url": f"{api}/members{{/member}}",
            "public_members_url": f"{api}/public_members{{/member}}",
            "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?v=4",
            "description": "",
        }

    def _bot_login(self) -> str:
        return f"{self.app_slug}[bot]"

    def _app_json(self) -> JSONDict:
        app = self.openapi.example("integration")
        app_id = int(self.app_id) if self.app_id.isdigit() else 1
        app.update(
            id=app_id,
            slug=self.app_slug,
            node_id=_node_id("Integration", app_id),
            owner=self._user("openrsi-bot", "Organization"),
            name=self.app_slug,
            description="",
            external_url=self.web_url,
            html_url=f"{self.web_url}/apps/{self.app_slug}",
            permissions=dict(DEFAULT_PERMISSIONS),
            events=["check_run", "issue_comment", "pull_request", "workflow_run"],
        )
        return dict(app)

    def _repo_json(self, repo: Repo) -> JSONDict:
        data = self.openapi.example("full-repository")
        for key in ("parent", "source", "template_repository", "organization", "temp_clone_token"):
            data.pop(key, None)
        data = _replace_strings(data, self._url_rewrites("octocat/Hello-World", repo.full_name))
        data.update(
            id=repo.id,
            node_id=_node_id("Repository", repo.id),
            name=repo.name,
            full_name=repo.full_name,
            owner=self._user(repo.owner, repo.owner_type),
            private=repo.private,
            visibility="private" if repo.private else "public",
            description=None,
            fork=repo.fork,
            homepage=None,
            language="Python",
            license=None,
            mirror_url=None,
            topics=[],
            default_branch=repo.default_branch,
            has_discussions=False,
            forks=0,
            forks_count=0,
            stargazers_count=0,
            watchers=0,
            watchers_count=0,
            open_issues=0,
            open_issues_count=0,
            subscribers_count=0,
            network_count=0,
        )
        if repo.owner_type == "Organization":
            data["organization"] = self._user(repo.owner, "Organization")
        return dict(data)

    def _minimal_repo_json(self, repo: Repo) -> JSONDict:
        """The short repository object that workflow runs and check suites embed."""
        full = self._repo_json(repo)
        keep = set(self.openapi.document["components"]["schemas"]["minimal-repository"]["required"])
        return {k: v for k, v in full.items() if k in keep}

    def _installation_json(self, inst: Installation) -> JSONDict:
        data = self.openapi.example("installation")
        app_id = int(self.app_id) if self.app_id.isdigit() else 1
        account = self._user(inst.account, inst.account_type)
        settings = (
            f"{self.web_url}/organizations/{inst.account}/settings/installations/{inst.id}"
            if inst.account_type == "Organization"
            else f"{self.web_url}/settings/installations/{inst.id}"
        )
        data.update(
            id=inst.id,
            account=account,
            repository_selection="selected",
            access_tokens_url=f"{self.url}/app/installations/{inst.id}/access_tokens",
            repositories_url=f"{self.url}/installation/repositories",
            html_url=settings,
            app_id=app_id,
            app_slug=self.app_slug,
            target_id=account["id"],
            target_type=inst.account_type,
            permissions=dict(inst.permissions),
            events=["check_run", "issue_comment", "pull_request", "workflow_run"],
            created_at=_iso(inst.created_at),
            updated_at=_iso(inst.created_at),
            single_file_name=None,
            has_multiple_single_files=False,
            single_file_paths=[],
            suspended_at=None,
            suspended_by=None,
        )
        return dict(data)

    def _issue_or_pull(self, repo: Repo, number: int, *, create: bool = False) -> Issue | Pull:
        key = repo.full_name.lower()
        found: Issue | Pull | None = self.pulls[key].get(number) or self.issues[key].get(number)
        if found is not None:
            return found
        if not create:
            raise _not_found()
        now = self.clock()
        issue = Issue(number, next(self._ids), f"Issue {number}", "", "octocat", "User", now, now)
        self.issues[key][number] = issue
        repo.next_number = max(repo.next_number, number + 1)
        return issue

    def _issue_json(self, repo: Repo, item: Issue | Pull) -> JSONDict:
        data = self.openapi.example("issue")
        data = _replace_strings(data, self._url_rewrites("octocat/Hello-World", repo.full_name))
        n = item.number
        api = f"{self.url}/repos/{repo.full_name}/issues/{n}"
        comments = sum(
            1
            for c in self.comments.values()
            if c.repo.lower() == repo.full_name.lower() and c.issue_number == n
        )
        data.update(
            id=item.id,
            node_id=_node_id("Issue", item.id),
            url=api,
            repository_url=f"{self.url}/repos/{repo.full_name}",
            labels_url=f"{api}/labels{{/name}}",
            comments_url=f"{api}/comments",
            events_url=f"{api}/events",
            html_url=f"{self.web_url}/{repo.full_name}/"
            + ("pull" if isinstance(item, Pull) else "issues")
            + f"/{n}",
            number=n,
            state=item.state,
            title=item.title,
            body=item.body,
            user=self._user(item.user, item.user_type),
            labels=[self._label_json(repo, name) for name in item.labels],
            assignee=None,
            assignees=[],
            milestone=None,
            locked=False,
            active_lock_reason=None,
            comments=comments,
            closed_at=_iso(item.updated_at) if item.state == "closed" else None,
            created_at=_iso(item.created_at),
            updated_at=_iso(item.updated_at),
            closed_by=None,
            author_association="NONE",
        )
        if isinstance(item, Pull):
            pull_api = f"{self.url}/repos/{repo.full_name}/pulls/{n}"
            web = f"{self.web_url}/{repo.full_name}/pull/{n}"
            data["pull_request"] = {
                "url": pull_api,
                "html_url": web,
                "diff_url": f"{web}.diff",
                "patch_url": f"{web}.patch",
                "merged_at": None,
            }
        else:
            data.pop("pull_request", None)
        return dict(data)

    def _branch_json(self, repo: Repo, ref: str, sha: str) -> JSONDict:
        return {
            "label": f"{repo.owner}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": self._user(repo.owner, repo.owner_type),
            "repo": self._repo_json(repo),
        }

    def _pull_head_sha(self, pull: Pull) -> str:
        head_repo = self.repos[pull.head_repo.lower()]
        sha = head_repo.branches.get(pull.head_ref)
        if sha is not None and pull.state == "open":
            pull.head_sha = sha
        return pull.head_sha

    def _pull_json(self, repo: Repo, pull: Pull) -> JSONDict:
        data = self.openapi.example("pull-request")
        data = _replace_strings(data, self._url_rewrites("octocat/Hello-World", repo.full_name))
        n = pull.number
        api = f"{self.url}/repos/{repo.full_name}"
        web = f"{self.web_url}/{repo.full_name}/pull/{n}"
        head_repo = self.repos[pull.head_repo.lower()]
        head_sha = self._pull_head_sha(pull)
        base_sha = repo.branches.get(pull.base_ref, _sha(repo.full_name, pull.base_ref))
        merge = self.merges.get(pull.id)
        issue_api = f"{api}/issues/{n}"
        comments = sum(
            1
            for c in self.comments.values()
            if c.repo.lower() == repo.full_name.lower() and c.issue_number == n
        )
        data.update(
            url=f"{api}/pulls/{n}",
            id=pull.id,
            node_id=_node_id("PullRequest", pull.id),
            html_url=web,
            diff_url=f"{web}.diff",
            patch_url=f"{web}.patch",
            issue_url=issue_api,
            commits_url=f"{api}/pulls/{n}/commits",
            review_comments_url=f"{api}/pulls/{n}/comments",
            review_comment_url=f"{api}/pulls/comments{{/number}}",
            comments_url=f"{issue_api}/comments",
            statuses_url=f"{api}/statuses/{head_sha}",
            number=n,
            state=pull.state,
            locked=False,
            title=pull.title,
            user=self._user(pull.user, pull.user_type),
            body=pull.body,
            labels=[],
            milestone=None,
            active_lock_reason=None,
            created_at=_iso(pull.created_at),
            updated_at=_iso(pull.updated_at),
            closed_at=_iso(pull.closed_at) if pull.closed_at else None,
            merged_at=_iso(merge.merged_at) if merge else None,
            merge_commit_sha=merge.merge_commit_sha if merge else None,
            assignee=None,
            assignees=[],
            requested_reviewers=[],
            requested_teams=[],
            head=self._branch_json(head_repo, pull.head_ref, head_sha),
            base=self._branch_json(repo, pull.base_ref, base_sha),
            _links={
                "self": {"href": f"{api}/pulls/{n}"},
                "html": {"href": web},
                "issue": {"href": issue_api},
                "comments": {"href": f"{issue_api}/comments"},
                "review_comments": {"href": f"{api}/pulls/{n}/comments"},
                "review_comment": {"href": f"{api}/pulls/comments{{/number}}"},
                "commits": {"href": f"{api}/pulls/{n}/commits"},
                "statuses": {"href": f"{api}/statuses/{head_sha}"},
            },
            author_association="NONE",
            auto_merge=None,
            draft=pull.draft,
            merged=merge is not None,
            mergeable=None,
            rebaseable=None,
            mergeable_state="unknown",
            merged_by=None,
            comments=comments,
            review_comments=0,
            maintainer_can_modify=pull.maintainer_can_modify,
            commits=1,
            additions=1,
            deletions=0,
            changed_files=1,
        )
        return dict(data)

    def _comment_json(self, comment: Comment) -> JSONDict:
        repo = self.repos[comment.repo.lower()]
        data = self.openapi.example("issue-comment")
        api = f"{self.url}/repos/{repo.full_name}"
        kind = "pull" if comment.issue_number in self.pulls[repo.full_name.lower()] else "issues"
        data.update(
            id=comment.id,
            node_id=_node_id("IssueComment", comment.id),
            url=f"{api}/issues/comments/{comment.id}",
            html_url=f"{self.web_url}/{repo.full_name}/{kind}/{comment.issue_number}"
            f"#issuecomment-{comment.id}",
            body=comment.body,
            user=self._user(comment.user, comment.user_type),
            created_at=_iso(comment.created_at),
            updated_at=_iso(comment.updated_at),
            issue_url=f"{api}/issues/{comment.issue_number}",
            author_association="NONE" if comment.via_app else "CONTRIBUTOR",
            performed_via_github_app=self._app_json() if comment.via_app else None,
        )
        data.pop("pin", None)
        data.pop("minimized", None)
        return dict(data)

    def _check_run_json(self, run: CheckRun) -> JSONDict:
        repo = self.repos[run.repo.lower()]
        data = self.openapi.example("check-run")
        api = f"{self.url}/repos/{repo.full_name}"
        pulls = [
            self._pull_minimal_json(repo, p)
            for p in self.pulls[repo.full_name.lower()].values()
            if p.state == "open"
            and p.head_repo.lower() == repo.full_name.lower()
            and self._pull_head_sha(p) == run.head_sha
        ]
        data.update(
            id=run.id,
            head_sha=run.head_sha,
            node_id=_node_id("CheckRun", run.id),
            external_id=run.external_id or "",
            url=f"{api}/check-runs/{run.id}",
            html_url=f"{self.web_url}/{repo.full_name}/runs/{run.id}",
            details_url=run.details_url or f"{self.web_url}/apps/{self.app_slug}",
            status=run.status,
            conclusion=run.conclusion,
            started_at=_iso(run.started_at),
            completed_at=_iso(run.completed_at) if run.completed_at else None,
            output={
                "title": run.output.get("title"),
                "summary": run.output.get("summary"),
                "text": run.output.get("text"),
                "annotations_count": run.annotations,
                "annotations_url": f"{api}/check-runs/{run.id}/annotations",
            },
            name=run.name,
            check_suite={"id": run.check_suite_id},
            app=self._app_json(),
            pull_requests=pulls,
        )
        return dict(data)

    def _pull_minimal_json(self, repo: Repo, pull: Pull) -> JSONDict:
        def side(r: Repo, ref: str, sha: str) -> JSONDict:
            return {
                "ref": ref,
                "sha": sha,
                "repo": {"id": r.id, "url": f"{self.url}/repos/{r.full_name}", "name": r.name},
            }

        head_repo = self.repos[pull.head_repo.lower()]
        return {
            "id": pull.id,
            "number": pull.number,
            "url": f"{self.url}/repos/{repo.full_name}/pulls/{pull.number}",
            "head": side(head_repo, pull.head_ref, self._pull_head_sha(pull)),
            "base": side(repo, pull.base_ref, repo.branches.get(pull.base_ref, "")),
        }

    def _workflow_json(self, repo: Repo, workflow: Workflow) -> JSONDict:
        data = self.openapi.example("workflow")
        web = f"{self.web_url}/{repo.full_name}"
        data.update(
            id=workflow.id,
            node_id=_node_id("Workflow", workflow.id),
            name=workflow.name,
            path=f".github/workflows/{workflow.file}",
            state="active",
            created_at=_iso(workflow.created_at),
            updated_at=_iso(workflow.created_at),
            url=f"{self.url}/repos/{repo.full_name}/actions/workflows/{workflow.id}",
            html_url=f"{web}/blob/{repo.default_branch}/.github/workflows/{workflow.file}",
            badge_url=f"{web}/workflows/{quote(workflow.name)}/badge.svg",
        )
        return dict(data)

    def _run_json(self, run: Run) -> JSONDict:
        repo = self.repos[run.repo.lower()]
        workflow = repo.workflows[run.workflow]
        data = self.openapi.example("workflow-run")
        api = f"{self.url}/repos/{repo.full_name}/actions/runs/{run.id}"
        bot = self._user(self._bot_login(), "Bot")
        data.update(
            id=run.id,
            name=workflow.name,
            node_id=_node_id("WorkflowRun", run.id),
            check_suite_id=run.check_suite_id,
            check_suite_node_id=_node_id("CheckSuite", run.check_suite_id),
            head_branch=run.head_branch,
            head_sha=run.head_sha,
            path=f".github/workflows/{workflow.file}",
            run_number=run.run_number,
            event=run.event,
            display_title=run.display_title,
            status=run.status,
            conclusion=run.conclusion,
            workflow_id=workflow.id,
            url=api,
            html_url=f"{self.web_url}/{repo.full_name}/actions/runs/{run.id}",
            pull_requests=[],
            created_at=_iso(run.created_at),
            updated_at=_iso(run.updated_at),
            actor=bot,
            triggering_actor=bot,
            run_attempt=1,
            referenced_workflows=[],
            run_started_at=_iso(run.run_started_at or run.created_at),
            jobs_url=f"{api}/jobs",
            logs_url=f"{api}/logs",
            check_suite_url=f"{self.url}/repos/{repo.full_name}/check-suites/{run.check_suite_id}",
            artifacts_url=f"{api}/artifacts",
            cancel_url=f"{api}/cancel",
            rerun_url=f"{api}/rerun",
            previous_attempt_url=None,
            workflow_url=f"{self.url}/repos/{repo.full_name}/actions/workflows/{workflow.id}",
            head_commit={
                "id": run.head_sha,
                "tree_id": _sha("tree", run.head_sha),
                "message": f"Commit {run.head_sha[:7]}",
                "timestamp": _iso(run.created_at),
                "author": {"name": "octocat", "email": "octocat@github.com"},
                "committer": {"name": "GitHub", "email": "noreply@github.com"},
            },
            repository=self._minimal_repo_json(repo),
            head_repository=self._minimal_repo_json(repo),
        )
        return dict(data)

    def _artifact_json(self, artifact: Artifact) -> JSONDict:
        repo = self.repos[artifact.repo.lower()]
        run = self.runs[artifact.run_id]
        data = self.openapi.example("artifact")
        api = f"{self.url}/repos/{repo.full_name}/actions/artifacts/{artifact.id}"
        expired = artifact.expires_at <= self.clock()
        data.update(
            id=artifact.id,
            node_id=_node_id("Artifact", artifact.id),
            name=artifact.name,
            size_in_bytes=len(artifact.data),
            url=api,
            archive_download_url=f"{api}/zip",
            expired=expired,
            created_at=_iso(artifact.created_at),
            expires_at=_iso(artifact.expires_at),
            updated_at=_iso(artifact.created_at),
            digest="sha256:" + hashlib.sha256(artifact.data).hexdigest(),
            workflow_run={
                "id": run.id,
                "repository_id": repo.id,
                "head_repository_id": repo.id,
                "head_branch": run.head_branch,
                "head_sha": run.head_sha,
            },
        )
        return dict(data)

    # --- state helpers used by handlers ---------------------------------------------

    def _new_pull(
        self,
        repo: Repo,
        head_repo: Repo,
        ref: str,
        base: str,
        title: str,
        body: str | None,
        user: str,
        user_type: str,
        number: int | None = None,
    ) -> Pull:
        now = self.clock()
        n = number if number is not None else repo.next_number
        repo.next_number = max(repo.next_number, n + 1)
        pull = Pull(
            n,
            next(self._ids),
            title,
            body,
            head_repo.full_name,
            ref,
            base,
            user,
            user_type,
            now,
            now,
            head_sha=head_repo.branches.get(ref, ""),
        )
        self.pulls[repo.full_name.lower()][n] = pull
        return pull

    def _new_comment(
        self,
        repo: Repo,
        number: int,
        body: str,
        user: str,
        user_type: str,
        *,
        via_app: bool = False,
    ) -> Comment:
        now = self.clock()
        comment = Comment(
            next(self._ids), repo.full_name, number, body, user, user_type, now, now, via_app
        )
        self.comments[comment.id] = comment
        return comment

    def _comment(self, repo: Repo, comment_id: int) -> Comment:
        comment = self.comments.get(comment_id)
        if comment is None or comment.repo.lower() != repo.full_name.lower():
            raise _not_found()
        return comment

    def _run(self, repo: Repo, run_id: int) -> Run:
        run = self.runs.get(run_id)
        if run is None or run.repo.lower() != repo.full_name.lower():
            raise _not_found()
        return run

    def _workflow(self, repo: Repo, workflow_id: str) -> Workflow:
        """By file name or numeric id. An unknown file name is created with the default
        run-name, so tests need not declare the runner workflow unless they care."""
        if workflow_id.isdigit():
            found = next((w for w in repo.workflows.values() if w.id == int(workflow_id)), None)
            if found is None:
                raise _not_found()
            return found
        if workflow_id not in repo.workflows:
            self.add_workflow(repo.full_name, workflow_id)
        return repo.workflows[workflow_id]

    def _paginate(self, ctx: _Ctx, items: Sequence[Any]) -> tuple[list[Any], dict[str, str]]:
        """One page of ``items`` and the ``Link`` header GitHub sends with it."""
        per_page = min(max(int(ctx.query.get("per_page", 30)), 1), 100)
        page = max(int(ctx.query.get("page", 1)), 1)
        last = max(1, math.ceil(len(items) / per_page))
        chunk = list(items[(page - 1) * per_page : page * per_page])

        def link(number: int, rel: str) -> str:
            query = {**ctx.query, "page": str(number)}
            return f'<{self.url}{ctx.path}?{urlencode(query)}>; rel="{rel}"'

        links = []
        if page > 1:
            links.append(link(min(page - 1, last), "prev"))
        if page < last:
            links += [link(page + 1, "next"), link(last, "last")]
        if page > 1:
            links.append(link(1, "first"))
        return chunk, ({"Link": ", ".join(links)} if links else {})

    def _render_run_name(self, workflow: Workflow, ref: str, inputs: Mapping[str, Any]) -> str:
        if workflow.run_name_template is None:
            return workflow.name

        def value(match: re.Match[str]) -> str:
            expr = match.group(1)
            for prefix in ("inputs.", "github.event.inputs."):
                if expr.startswith(prefix):
                    got = inputs.get(expr[len(prefix) :], "")
                    return str(got).lower() if isinstance(got, bool) else str(got)
            known = {
                "github.ref_name": ref,
                "github.event_name": "workflow_dispatch",
                "github.actor": self._bot_login(),
                "github.workflow": workflow.name,
            }
            return known.get(expr, match.group(0))

        return _RUN_NAME_EXPR.sub(value, workflow.run_name_template)

    # --- handlers: the App (JWT) ------------------------------------------------------

    @_route("get", "/app", auth="jwt")
    def _get_app(self, ctx: _Ctx) -> _Answer:
        return _Answer(200, self._app_json())

    @_route("post", "/app/installations/{installation_id}/access_tokens", auth="jwt")
    def _create_token(self, ctx: _Ctx) -> _Answer:
        label = f"POST {ctx.path}"
        inst = self.installations.get(ctx.int_param("installation_id"))
        if inst is None:
            raise _not_found(
                f"{label}: installation {ctx.params['installation_id']} does not exist"
            )
        requested = ctx.data.get("permissions") or {}
        for perm, level in requested.items():
            if _LEVELS.get(inst.permissions.get(perm, "none"), 0) < _LEVELS.get(str(level), 99):
                raise _unprocessable(
                    "The permissions requested are not granted to this installation.",
                    f"{label}: asks for {perm}:{level}; the installation grants "
                    f"{inst.permissions.get(perm, 'none')}",
                )
        # A token asked for with permissions gets exactly those (plus metadata), no more.
        permissions = {"metadata": "read", **requested} if requested else dict(inst.permissions)
        scope: set[str] | None = None
        names = ctx.data.get("repositories")
        ids = ctx.data.get("repository_ids")
        if names is not None or ids is not None:
            mine = [r for r in self.repos.values() if r.installation_id == inst.id]
            scope = set()
            for name in names or []:
                match = next((r for r in mine if r.name.lower() == str(name).lower()), None)
                if match is None:
                    raise _unprocessable(
                        "There is at least one repository that does not exist or is not "
                        "accessible to the parent installation.",
                        f"{label}: repository {name!r} is not in installation {inst.id}",
                    )
                scope.add(match.full_name.lower())
            for rid in ids or []:
                match = next((r for r in mine if r.id == rid), None)
                if match is None:
                    raise _unprocessable(
                        "There is at least one repository that does not exist or is not "
                        "accessible to the parent installation.",
                        f"{label}: repository id {rid} is not in installation {inst.id}",
                    )
                scope.add(match.full_name.lower())
        value = "ghs_" + secrets.token_urlsafe(27).replace("-", "A").replace("_", "b")[:36]
        expires = self.clock() + self.token_lifetime
        self.tokens[value] = Token(
            value, inst.id, expires, permissions, frozenset(scope) if scope is not None else None
        )
        self.tokens_issued += 1
        body: JSONDict = {
            "token": value,
            "expires_at": _iso(expires),
            "permissions": permissions,
            "repository_selection": "selected",
        }
        if scope is not None:
            body["repositories"] = [self._repo_json(self.repos[k]) for k in sorted(scope)]
        return _Answer(201, body)

    @_route("get", "/app/hook/deliveries", auth="jwt")
    def _list_hook_deliveries(self, ctx: _Ctx) -> _Answer:
        """Every attempt, newest first, paged by an opaque ``cursor`` that only the
        ``Link`` header's ``next`` URL carries (no page numbers, no ``last``), like GitHub;
        ``status=success`` is 200–399, ``failure`` 400–599."""
        attempts = sorted(self.hook_attempts, key=lambda a: a.id, reverse=True)
        wanted = ctx.query.get("status")
        if wanted is not None:
            low = 200 if wanted == "success" else 400
            attempts = [a for a in attempts if low <= a.status_code < low + 200]
        cursor = ctx.query.get("cursor")
        if cursor is not None:
            match = re.fullmatch(r"v1_(\d+)", cursor)
            if match is None:
                raise _Refusal(
                    _message(400, "Bad Request"),
                    f"GET {ctx.path}: cursor {cursor!r} is not one a Link header gave",
                )
            attempts = [a for a in attempts if a.id <= int(match.group(1))]
        per_page = min(max(int(ctx.query.get("per_page", 30)), 1), 100)
        page, rest = attempts[:per_page], attempts[per_page:]
        headers: dict[str, str] = {}
        if rest:
            query = urlencode({**ctx.query, "cursor": f"v1_{rest[0].id}"})
            headers["Link"] = f'<{self.url}{ctx.path}?{query}>; rel="next"'
        return _Answer(200, [self._hook_attempt_json(a) for a in page], headers)

    @_route("post", "/app/hook/deliveries/{delivery_id}/attempts", auth="jwt")
    def _redeliver_hook(self, ctx: _Ctx) -> _Answer:
        """202 at once; the payload is sent again shortly after, off the request (as on
        GitHub), to :attr:`webhook_target` (see :meth:`wait_for_redeliveries`)."""
        label = f"POST {ctx.path}"
        wanted = ctx.int_param("delivery_id")
        original = next((a for a in self.hook_attempts if a.id == wanted), None)
        if original is None:
            raise _not_found(f"{label}: no hook delivery {wanted}")
        if self.webhook_target is None:
            self.errors.append(f"{label}: redelivery asked for; the test set no webhook_target")
        else:
            thread = threading.Thread(
                target=self._redeliver, args=(original,), name=f"redeliver-{wanted}", daemon=True
            )
            self._redeliveries.append(thread)
            thread.start()
        return _Answer(202, {})

    def _hook_attempt_json(self, attempt: HookAttempt) -> JSONDict:
        try:
            doc = json.loads(attempt.payload)
        except ValueError:
            doc = None
        ids: dict[str, int | None] = {"installation": None, "repository": None}
        for key in ids:
            found = doc.get(key) if isinstance(doc, dict) else None
            if isinstance(found, dict) and isinstance(found.get("id"), int):
                ids[key] = found["id"]
        return {
            "id": attempt.id,
            "guid": attempt.guid,
            "delivered_at": _iso(attempt.delivered_at),
            "redelivery": attempt.redelivery,
            "duration": attempt.duration,
            "status": attempt.status,
            "status_code": attempt.status_code,
            "event": attempt.event,
            "action": attempt.action,
            "installation_id": ids["installation"],
            "repository_id": ids["repository"],
            "throttled_at": None,
        }

    @_route("get", "/repos/{owner}/{repo}/installation", auth="jwt")
    def _repo_installation(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        if repo.installation_id is None:
            raise _not_found()  # GitHub's answer for "not installed" (the app may probe)
        return _Answer(200, self._installation_json(self.installations[repo.installation_id]))

    @_route("post", "/app-manifests/{code}/conversions", auth="none")
    def _convert_manifest(self, ctx: _Ctx) -> _Answer:
        """Valid once: a second conversion of the same code is GitHub's 404."""
        made = self.manifest_apps.get(ctx.params["code"])
        if made is None or made.converted:
            raise _not_found()
        made.converted = True
        doc = made.manifest
        body = self.openapi.example("integration-from-manifest")
        body.update(
            id=made.id,
            slug=made.slug,
            node_id=_node_id("Integration", made.id),
            client_id=made.client_id,
            owner=self._user(made.owner, made.owner_type),
            name=str(doc["name"]),
            description=str(doc.get("description") or ""),
            external_url=str(doc["url"]),
            html_url=f"{self.web_url}/apps/{made.slug}",
            created_at=_iso(made.created_at),
            updated_at=_iso(made.created_at),
            permissions=dict(doc.get("default_permissions") or {}),
            events=list(doc.get("default_events") or []),
            client_secret=made.client_secret,
            webhook_secret=made.webhook_secret,
            pem=made.pem,
        )
        return _Answer(201, body)

    # --- handlers: repositories, issues, pulls ----------------------------------------

    @_route("get", "/repos/{owner}/{repo}")
    def _get_repo(self, ctx: _Ctx) -> _Answer:
        return _Answer(200, self._repo_json(ctx.need_repo()))

    @_route(
        "get",
        "/repos/{owner}/{repo}/issues/{issue_number}",
        permission=(("issues", "read"), ("pull_requests", "read")),
    )
    def _get_issue(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        return _Answer(
            200, self._issue_json(repo, self._issue_or_pull(repo, ctx.int_param("issue_number")))
        )

    @_route("post", "/repos/{owner}/{repo}/pulls", permission=(("pull_requests", "write"),))
    def _create_pull(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        data = ctx.data
        head = str(data["head"])
        head_owner, _, ref = head.rpartition(":")
        head_name = str(data.get("head_repo") or repo.name)
        head_full = f"{head_owner}/{head_name}" if head_owner else repo.full_name
        head_repo = self.repos.get(head_full.lower())
        base = str(data["base"])
        invalid = []
        if head_repo is None or ref not in head_repo.branches:
            invalid.append({"resource": "PullRequest", "field": "head", "code": "invalid"})
        if base not in repo.branches:
            invalid.append({"resource": "PullRequest", "field": "base", "code": "invalid"})
        if invalid:
            raise _unprocessable("Validation Failed", errors=invalid)
        assert head_repo is not None
        for existing in self.pulls[repo.full_name.lower()].values():
            if (
                existing.state == "open"
                and existing.head_repo.lower() == head_full.lower()
                and existing.head_ref == ref
                and existing.base_ref == base
            ):
                raise _unprocessable(
                    "Validation Failed",
                    errors=[
                        {
                            "resource": "PullRequest",
                            "code": "custom",
                            "message": "A pull request already exists for "
                            f"{head_repo.owner}:{ref}.",
                        }
                    ],
                )
        pull = self._new_pull(
            repo,
            head_repo,
            ref,
            base,
            str(data.get("title") or ""),
            data.get("body"),
            self._bot_login(),
            "Bot",
        )
        pull.draft = bool(data.get("draft", False))
        pull.maintainer_can_modify = bool(data.get("maintainer_can_modify", True))
        return _Answer(
            201,
            self._pull_json(repo, pull),
            {"Location": f"{self.url}/repos/{repo.full_name}/pulls/{pull.number}"},
        )

    @_route("get", "/repos/{owner}/{repo}/pulls", permission=(("pull_requests", "read"),))
    def _list_pulls(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        state = ctx.query.get("state", "open")
        head = ctx.query.get("head")
        base = ctx.query.get("base")
        found = []
        for pull in sorted(self.pulls[repo.full_name.lower()].values(), key=lambda p: -p.number):
            if state != "all" and pull.state != state:
                continue
            if head is not None:
                head_owner, _, ref = head.rpartition(":")
                if ref != pull.head_ref or (
                    head_owner and head_owner.lower() != pull.head_repo.split("/")[0].lower()
                ):
                    continue
            if base is not None and pull.base_ref != base:
                continue
            found.append(pull)
        page, links = self._paginate(ctx, found)
        return _Answer(200, [self._pull_json(repo, p) for p in page], links)

    def _pull(self, ctx: _Ctx) -> tuple[Repo, Pull]:
        repo = ctx.need_repo()
        pull = self.pulls[repo.full_name.lower()].get(ctx.int_param("pull_number"))
        if pull is None:
            raise _not_found()
        return repo, pull

    @_route(
        "get", "/repos/{owner}/{repo}/pulls/{pull_number}", permission=(("pull_requests", "read"),)
    )
    def _get_pull(self, ctx: _Ctx) -> _Answer:
        repo, pull = self._pull(ctx)
        return _Answer(200, self._pull_json(repo, pull))

    @_route(
        "patch",
        "/repos/{owner}/{repo}/pulls/{pull_number}",
        permission=(("pull_requests", "write"),),
    )
    def _update_pull(self, ctx: _Ctx) -> _Answer:
        repo, pull = self._pull(ctx)
        data = ctx.data
        if "base" in data and data["base"] not in repo.branches:
            raise _unprocessable(
                "Validation Failed",
                errors=[{"resource": "PullRequest", "field": "base", "code": "invalid"}],
            )
        pull.title = str(data.get("title", pull.title))
        pull.body = data.get("body", pull.body)
        pull.base_ref = str(data.get("base", pull.base_ref))
        pull.maintainer_can_modify = bool(
            data.get("maintainer_can_modify", pull.maintainer_can_modify)
        )
        if "state" in data and data["state"] != pull.state:
            pull.state = str(data["state"])
            pull.closed_at = self.clock() if pull.state == "closed" else None
        pull.updated_at = self.clock()
        return _Answer(200, self._pull_json(repo, pull))

    # --- handlers: issue comments and reactions -----------------------------------

    @_route(
        "get",
        "/repos/{owner}/{repo}/issues/{issue_number}/comments",
        permission=(("issues", "read"), ("pull_requests", "read")),
    )
    def _list_comments(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        number = ctx.int_param("issue_number")
        self._issue_or_pull(repo, number)
        comments = self.comments_on(repo.full_name, number)
        since = ctx.query.get("since")
        if since is not None:
            try:
                cutoff = _parse_time(since)
            except ValueError:
                cutoff = None
            if cutoff is None or cutoff.tzinfo is None:
                raise _unprocessable(
                    f"Invalid since {since!r}",
                    f"GET {ctx.path}: since={since!r} is not an ISO 8601 timestamp with a zone",
                )
            comments = [c for c in comments if c.updated_at >= cutoff]
        page, links = self._paginate(ctx, comments)
        return _Answer(200, [self._comment_json(c) for c in page], links)

    @_route(
        "post",
        "/repos/{owner}/{repo}/issues/{issue_number}/comments",
        permission=(("issues", "write"), ("pull_requests", "write")),
    )
    def _create_comment(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        number = ctx.int_param("issue_number")
        self._issue_or_pull(repo, number)
        comment = self._new_comment(
            repo, number, str(ctx.data["body"]), self._bot_login(), "Bot", via_app=True
        )
        return _Answer(
            201, self._comment_json(comment), {"Location": self._comment_json(comment)["url"]}
        )

    def _label_json(self, repo: Repo, name: str) -> JSONDict:
        ident = int(hashlib.sha1(f"{repo.full_name}/{name}".encode()).hexdigest()[:8], 16)
        return {
            "id": ident,
            "node_id": _node_id("Label", ident),
            "url": f"{self.url}/repos/{repo.full_name}/labels/{name}",
            "name": name,
            "description": None,
            "color": "d73a4a",
            "default": False,
        }

    @_route(
        "post",
        "/repos/{owner}/{repo}/issues/{issue_number}/labels",
        permission=(("issues", "write"), ("pull_requests", "write")),
    )
    def _add_labels(self, ctx: _Ctx) -> _Answer:
        """Labels by name (GitHub makes a label that does not exist yet)."""
        repo = ctx.need_repo()
        item = self._issue_or_pull(repo, ctx.int_param("issue_number"))
        names = ctx.data.get("labels") if isinstance(ctx.data, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise _unprocessable(
                "Invalid request.", f"POST {ctx.path}: `labels` is not a list of label names"
            )
        for name in names:
            if name not in item.labels:
                item.labels.append(name)
        return _Answer(200, [self._label_json(repo, n) for n in item.labels])

    @_route(
        "delete",
        "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}",
        permission=(("issues", "write"), ("pull_requests", "write")),
    )
    def _remove_label(self, ctx: _Ctx) -> _Answer:
        """GitHub answers the labels left, or 404 when the label is not on it."""
        repo = ctx.need_repo()
        item = self._issue_or_pull(repo, ctx.int_param("issue_number"))
        name = ctx.params["name"]
        if name not in item.labels:
            raise _not_found()
        item.labels.remove(name)
        return _Answer(200, [self._label_json(repo, n) for n in item.labels])

    @_route("post", "/repos/{owner}/{repo}/issues", permission=(("issues", "write"),))
    def _create_issue(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        data = ctx.data if isinstance(ctx.data, dict) else {}
        title = data.get("title")
        if not isinstance(title, str) or not title:
            raise _unprocessable("Invalid request.", f"POST {ctx.path}: no `title`")
        item = self._issue_or_pull(repo, repo.next_number, create=True)
        assert isinstance(item, Issue)
        item.title, item.body = title, data.get("body")
        item.user, item.user_type = self._bot_login(), "Bot"
        item.labels = [str(n) for n in data.get("labels") or [] if isinstance(n, str)]
        body = self._issue_json(repo, item)
        return _Answer(201, body, {"Location": body["url"]})

    @_route(
        "get",
        "/repos/{owner}/{repo}/issues/comments/{comment_id}",
        permission=(("issues", "read"), ("pull_requests", "read")),
    )
    def _get_comment(self, ctx: _Ctx) -> _Answer:
        return _Answer(
            200, self._comment_json(self._comment(ctx.need_repo(), ctx.int_param("comment_id")))
        )

    @_route(
        "patch",
        "/repos/{owner}/{repo}/issues/comments/{comment_id}",
        permission=(("issues", "write"), ("pull_requests", "write")),
    )
    def _update_comment(self, ctx: _Ctx) -> _Answer:
        comment = self._comment(ctx.need_repo(), ctx.int_param("comment_id"))
        if not comment.via_app:
            raise _Refusal(
                _message(403, "Resource not accessible by integration"),
                f"PATCH {ctx.path}: the App edits a comment written by {comment.user}",
            )
        comment.body = str(ctx.data["body"])
        comment.updated_at = self.clock()
        return _Answer(200, self._comment_json(comment))

    @_route(
        "delete",
        "/repos/{owner}/{repo}/issues/comments/{comment_id}",
        permission=(("issues", "write"), ("pull_requests", "write")),
    )
    def _delete_comment(self, ctx: _Ctx) -> _Answer:
        comment = self._comment(ctx.need_repo(), ctx.int_param("comment_id"))
        del self.comments[comment.id]
        return _Answer(204)

    @_route(
        "post",
        "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions",
        permission=(("issues", "write"), ("pull_requests", "write")),
    )
    def _react(self, ctx: _Ctx) -> _Answer:
        comment = self._comment(ctx.need_repo(), ctx.int_param("comment_id"))
        content = str(ctx.data["content"])
        existing = self.reactions.setdefault(comment.id, [])
        for reaction in existing:
            if reaction["content"] == content and reaction["user"]["login"] == self._bot_login():
                return _Answer(200, reaction)
        reaction = self.openapi.example("reaction")
        rid = next(self._ids)
        reaction.update(
            id=rid,
            node_id=_node_id("Reaction", rid),
            user=self._user(self._bot_login(), "Bot"),
            content=content,
            created_at=_iso(self.clock()),
        )
        existing.append(reaction)
        return _Answer(201, reaction)

    @_route("get", "/repos/{owner}/{repo}/collaborators/{username}/permission")
    def _permission(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        login = ctx.params["username"]
        role = repo.permissions.get(login.lower(), "read")
        levels = {
            "pull": role != "none",
            "triage": role in ("triage", "write", "maintain", "admin"),
            "push": role in ("write", "maintain", "admin"),
            "maintain": role in ("maintain", "admin"),
            "admin": role == "admin",
        }
        user = {**self._user(login), "permissions": levels, "role_name": role}
        return _Answer(
            200, {"permission": _LEGACY_PERMISSION[role], "role_name": role, "user": user}
        )

    # --- handlers: check runs ------------------------------------------------------

    def _check_run_fields(self, ctx: _Ctx, run: CheckRun | None) -> JSONDict:
        """Apply GitHub's documented rules that the schema cannot express."""
        data = dict(ctx.data)
        if "conclusion" in data and data["conclusion"] is not None:
            data["status"] = "completed"
        status = data.get("status", run.status if run else "queued")
        conclusion = data.get("conclusion", run.conclusion if run else None)
        if (status == "completed" or data.get("completed_at")) and conclusion is None:
            raise _unprocessable(
                'Invalid request.\n\nNo subschema in "anyOf" matched.\n'
                '"conclusion" wasn\'t supplied.',
                f"{ctx.method} {ctx.path}: status completed (or completed_at) needs a conclusion",
            )
        return data

    @_route("post", "/repos/{owner}/{repo}/check-runs", permission=(("checks", "write"),))
    def _create_check_run(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        data = self._check_run_fields(ctx, None)
        now = self.clock()
        status = str(data.get("status", "queued"))
        run = CheckRun(
            id=next(self._ids),
            repo=repo.full_name,
            name=str(data["name"]),
            head_sha=str(data["head_sha"]),
            status=status,
            conclusion=data.get("conclusion"),
            started_at=_parse_time(data.get("started_at")) or now,
            completed_at=_parse_time(data.get("completed_at"))
            or (now if status == "completed" else None),
            details_url=data.get("details_url"),
            external_id=data.get("external_id"),
            output={},
            actions=list(data.get("actions", [])),
            check_suite_id=next(self._ids),
        )
        self._apply_output(run, data.get("output"))
        run.history.append(dict(ctx.data))
        self.check_runs[run.id] = run
        return _Answer(201, self._check_run_json(run))

    def _apply_output(self, run: CheckRun, output: Any) -> None:
        if not isinstance(output, dict):
            return
        for key in ("title", "summary", "text"):
            if key in output:
                run.output[key] = output[key]
        run.annotations += len(output.get("annotations", []))

    def _check_run(self, ctx: _Ctx) -> CheckRun:
        repo = ctx.need_repo()
        run = self.check_runs.get(ctx.int_param("check_run_id"))
        if run is None or run.repo.lower() != repo.full_name.lower():
            raise _not_found()
        return run

    @_route(
        "get", "/repos/{owner}/{repo}/check-runs/{check_run_id}", permission=(("checks", "read"),)
    )
    def _get_check_run(self, ctx: _Ctx) -> _Answer:
        return _Answer(200, self._check_run_json(self._check_run(ctx)))

    @_route(
        "patch",
        "/repos/{owner}/{repo}/check-runs/{check_run_id}",
        permission=(("checks", "write"),),
    )
    def _update_check_run(self, ctx: _Ctx) -> _Answer:
        run = self._check_run(ctx)
        data = self._check_run_fields(ctx, run)
        for key in ("name", "details_url", "external_id"):
            if key in data:
                setattr(run, key, data[key])
        if "started_at" in data:
            run.started_at = _parse_time(data["started_at"]) or run.started_at
        if "status" in data:
            run.status = str(data["status"])
        if "conclusion" in data:
            run.conclusion = data["conclusion"]
        if "completed_at" in data:
            run.completed_at = _parse_time(data["completed_at"])
        if run.status == "completed" and run.completed_at is None:
            run.completed_at = self.clock()
        if "actions" in data:
            run.actions = list(data["actions"])
        self._apply_output(run, data.get("output"))
        run.history.append(dict(ctx.data))
        return _Answer(200, self._check_run_json(run))

    # --- handlers: Actions ---------------------------------------------------------

    @_route(
        "get",
        "/repos/{owner}/{repo}/actions/workflows/{workflow_id}",
        permission=(("actions", "read"),),
    )
    def _get_workflow(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        return _Answer(
            200, self._workflow_json(repo, self._workflow(repo, ctx.params["workflow_id"]))
        )

    @_route(
        "post",
        "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches",
        permission=(("actions", "write"),),
    )
    def _dispatch(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        label = f"POST {ctx.path}"
        workflow = self._workflow(repo, ctx.params["workflow_id"])
        data = ctx.data
        ref = str(data["ref"]).removeprefix("refs/heads/")
        inputs = dict(data.get("inputs") or {})
        if workflow.inputs is not None:
            unexpected = sorted(set(inputs) - set(workflow.inputs))
            if unexpected:
                raise _unprocessable(
                    f"Unexpected inputs provided: {json.dumps(unexpected)}",
                    f"{label}: inputs {unexpected} are not declared by {workflow.file}",
                )
            for name in workflow.required:
                if name not in inputs:
                    raise _unprocessable(
                        f"Required input '{name}' not provided",
                        f"{label}: required input {name!r} of {workflow.file} is missing",
                    )
        sha = repo.branches.get(ref)
        if sha is None:
            raise _unprocessable(f"No ref found for: {ref}")
        now = self.clock()
        run_number = 1 + sum(
            1
            for r in self.runs.values()
            if r.repo == repo.full_name and r.workflow == workflow.file
        )
        run = Run(
            id=next(self._ids),
            repo=repo.full_name,
            workflow=workflow.file,
            run_number=run_number,
            head_branch=ref,
            head_sha=sha,
            display_title=self._render_run_name(workflow, ref, inputs),
            inputs=inputs,
            created_at=now,
            updated_at=now,
            check_suite_id=next(self._ids),
        )
        self.runs[run.id] = run
        self.dispatches.append(
            {
                "repo": repo.full_name,
                "workflow": workflow.file,
                "ref": ref,
                "inputs": inputs,
                "run_id": run.id,
            }
        )
        new_api = ctx.headers.get("X-GitHub-Api-Version") == "2026-03-10"
        if (data.get("return_run_details") is True or new_api) and not self.legacy_dispatch:
            return _Answer(
                200,
                {
                    "workflow_run_id": run.id,
                    "run_url": f"{self.url}/repos/{repo.full_name}/actions/runs/{run.id}",
                    "html_url": f"{self.web_url}/{repo.full_name}/actions/runs/{run.id}",
                },
            )
        return _Answer(204)

    def _runs_matching(self, ctx: _Ctx, repo: Repo, workflow: Workflow | None) -> list[Run]:
        query = ctx.query
        created = query.get("created")
        test = _created_filter(created) if created else None
        if created and test is None:
            raise _unprocessable(
                f"Invalid created filter {created!r}",
                f"{ctx.method} {ctx.path}: cannot parse created={created!r}",
            )
        found = []
        for run in sorted(self.runs.values(), key=lambda r: -r.id):
            if run.repo != repo.full_name or (workflow and run.workflow != workflow.file):
                continue
            if "event" in query and run.event != query["event"]:
                continue
            if "status" in query and query["status"] not in (run.status, run.conclusion):
                continue
            if "branch" in query and run.head_branch != query["branch"]:
                continue
            if "head_sha" in query and run.head_sha != query["head_sha"]:
                continue
            if "actor" in query and query["actor"].lower() != self._bot_login().lower():
                continue
            if test is not None and not test(run.created_at):
                continue
            found.append(run)
        return found

    @_route("get", "/repos/{owner}/{repo}/actions/runs", permission=(("actions", "read"),))
    def _list_runs(self, ctx: _Ctx) -> _Answer:
        runs = self._runs_matching(ctx, ctx.need_repo(), None)
        page, links = self._paginate(ctx, runs)
        return _Answer(
            200,
            {"total_count": len(runs), "workflow_runs": [self._run_json(r) for r in page]},
            links,
        )

    @_route(
        "get",
        "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs",
        permission=(("actions", "read"),),
    )
    def _list_workflow_runs(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        runs = self._runs_matching(ctx, repo, self._workflow(repo, ctx.params["workflow_id"]))
        page, links = self._paginate(ctx, runs)
        return _Answer(
            200,
            {"total_count": len(runs), "workflow_runs": [self._run_json(r) for r in page]},
            links,
        )

    @_route("get", "/repos/{owner}/{repo}/actions/runs/{run_id}", permission=(("actions", "read"),))
    def _get_run(self, ctx: _Ctx) -> _Answer:
        return _Answer(200, self._run_json(self._run(ctx.need_repo(), ctx.int_param("run_id"))))

    @_route(
        "get", "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs", permission=(("actions", "read"),)
    )
    def _run_jobs(self, ctx: _Ctx) -> _Answer:
        """The run's one job (id: run id × 10 + 1), its steps ending at the failed one."""
        repo = ctx.need_repo()
        run = self._run(repo, ctx.int_param("run_id"))
        job = self.openapi.example("job")
        failed = run.failed_step or "Verify base and head"
        names = ["Set up job", "Check out the runner repository", failed]
        names += ["Upload the bundle", "Clean the workspace"]  # `if: always()` steps
        done = run.status == "completed"
        window = run.failed_window or (run.created_at, run.updated_at)
        steps = [
            {
                "name": name,
                "status": "completed" if done else "in_progress",
                "conclusion": (run.conclusion if name == failed else "success") if done else None,
                "number": i + 1,
                "started_at": _iso(window[0] if name == failed else run.created_at),
                "completed_at": _iso(window[1] if name == failed else run.updated_at)
                if done
                else None,
            }
            for i, name in enumerate(names)
        ]
        job.update(
            id=run.id * 10 + 1,
            run_id=run.id,
            run_url=f"{self.url}/repos/{repo.full_name}/actions/runs/{run.id}",
            head_sha=run.head_sha,
            name=f"verify {run.inputs.get('task', 'task')} on {run.inputs.get('gpu', 'GPU')}",
            status="completed" if done else "in_progress",
            conclusion=run.conclusion if done else None,
            steps=steps,
            created_at=_iso(run.created_at),
            started_at=_iso(run.created_at),
            completed_at=_iso(run.updated_at) if done else None,
            html_url=f"{self.web_url}/{repo.full_name}/actions/runs/{run.id}/job/{run.id * 10 + 1}",
        )
        if run.conclusion == "startup_failure":
            return _Answer(200, {"total_count": 0, "jobs": []})  # no job ever started
        return _Answer(200, {"total_count": 1, "jobs": [job]})

    @_route(
        "get", "/repos/{owner}/{repo}/actions/jobs/{job_id}/logs", permission=(("actions", "read"),)
    )
    def _job_logs(self, ctx: _Ctx) -> _Answer:
        run = self._run(ctx.need_repo(), ctx.int_param("job_id") // 10)
        return _Answer(302, None, {"Location": self._new_blob(run.log.encode())})

    @_route(
        "post",
        "/repos/{owner}/{repo}/actions/runs/{run_id}/cancel",
        permission=(("actions", "write"),),
    )
    def _cancel_run(self, ctx: _Ctx) -> _Answer:
        run = self._run(ctx.need_repo(), ctx.int_param("run_id"))
        if run.status == "completed":
            return _message(409, "Cannot cancel a workflow run that is completed.")
        run.status, run.conclusion, run.updated_at = "completed", "cancelled", self.clock()
        return _Answer(202, {})

    @_route(
        "get",
        "/repos/{owner}/{repo}/actions/runs/{run_id}/artifacts",
        permission=(("actions", "read"),),
    )
    def _list_artifacts(self, ctx: _Ctx) -> _Answer:
        run = self._run(ctx.need_repo(), ctx.int_param("run_id"))
        name = ctx.query.get("name")
        found = [
            a
            for a in sorted(self.artifacts.values(), key=lambda a: a.id)
            if a.run_id == run.id and (name is None or a.name == name)
        ]
        if ctx.query.get("direction") == "desc":
            found.reverse()
        page, links = self._paginate(ctx, found)
        return _Answer(
            200,
            {"total_count": len(found), "artifacts": [self._artifact_json(a) for a in page]},
            links,
        )

    def _artifact(self, ctx: _Ctx) -> Artifact:
        repo = ctx.need_repo()
        artifact = self.artifacts.get(ctx.int_param("artifact_id"))
        if artifact is None or artifact.repo.lower() != repo.full_name.lower():
            raise _not_found()
        return artifact

    @_route(
        "get",
        "/repos/{owner}/{repo}/actions/artifacts/{artifact_id}",
        permission=(("actions", "read"),),
    )
    def _get_artifact(self, ctx: _Ctx) -> _Answer:
        return _Answer(200, self._artifact_json(self._artifact(ctx)))

    @_route(
        "get",
        "/repos/{owner}/{repo}/actions/artifacts/{artifact_id}/{archive_format}",
        permission=(("actions", "read"),),
    )
    def _download_artifact(self, ctx: _Ctx) -> _Answer:
        artifact = self._artifact(ctx)
        if ctx.params["archive_format"] != "zip":
            raise _not_found(f"GET {ctx.path}: archive_format must be zip")
        if artifact.expires_at <= self.clock():
            return _message(410, "Artifact has expired")
        return _Answer(302, None, {"Location": self._new_blob(artifact.data)})

    # --- handlers: contents and compare --------------------------------------------

    @_route("get", "/repos/{owner}/{repo}/contents/{path}", permission=(("contents", "read"),))
    def _get_contents(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        path = ctx.params["path"].strip("/")
        ref = ctx.query.get("ref") or repo.default_branch
        data = repo.files.get((ref, path), repo.files.get((None, path)))
        if data is None:
            raise _not_found()
        sha = _blob_sha(data)
        etag = f'"{sha}"'
        wanted = [
            t.strip().removeprefix("W/") for t in ctx.headers.get("If-None-Match", "").split(",")
        ]
        if etag in wanted:
            return _Answer(304, None, {"ETag": etag})
        encoded = base64.b64encode(data).decode("ascii")
        wrapped = "\n".join(encoded[i : i + 60] for i in range(0, len(encoded), 60)) + "\n"
        api = f"{self.url}/repos/{repo.full_name}"
        web = f"{self.web_url}/{repo.full_name}/blob/{ref}/{path}"
        raw = f"https://raw.githubusercontent.com/{repo.full_name}/{ref}/{path}"
        body = {
            "type": "file",
            "encoding": "base64",
            "size": len(data),
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "content": wrapped,
            "sha": sha,
            "url": f"{api}/contents/{quote(path)}?ref={quote(ref)}",
            "git_url": f"{api}/git/blobs/{sha}",
            "html_url": web,
            "download_url": raw,
            "_links": {
                "self": f"{api}/contents/{quote(path)}?ref={quote(ref)}",
                "git": f"{api}/git/blobs/{sha}",
                "html": web,
            },
        }
        return _Answer(
            200, body, {"ETag": etag, "Cache-Control": "private, max-age=60, s-maxage=60"}
        )

    @_route("get", "/repos/{owner}/{repo}/branches/{branch}", permission=(("contents", "read"),))
    def _get_branch(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        name = ctx.params["branch"]
        sha = repo.branches.get(name)
        if sha is None:
            raise _not_found()
        data = self.openapi.example("branch-with-protection")
        data = _replace_strings(data, self._url_rewrites("octocat/Hello-World", repo.full_name))
        data["name"] = name
        data["protected"] = False
        data["protection"] = {"enabled": False}  # GitHub's own example is off its schema
        data["commit"]["sha"] = sha
        data["commit"]["url"] = f"{self.url}/repos/{repo.full_name}/commits/{sha}"
        return _Answer(200, data)

    @_route(
        "get",
        "/repos/{owner}/{repo}/compare/{basehead}",
        "/repos/{owner}/{repo}/compare/{base}...{head}",
        permission=(("contents", "read"),),
    )
    def _compare(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        basehead = ctx.params.get("basehead") or f"{ctx.params['base']}...{ctx.params['head']}"
        fields = repo.compares.get(basehead)
        if fields is None:
            raise _not_found()
        data = self.openapi.example("commit-comparison")
        data = _replace_strings(data, self._url_rewrites("octocat/Hello-World", repo.full_name))
        web = f"{self.web_url}/{repo.full_name}/compare/{basehead}"
        data.update(
            url=f"{self.url}/repos/{repo.full_name}/compare/{basehead}",
            html_url=web,
            permalink_url=web,
            diff_url=f"{web}.diff",
            patch_url=f"{web}.patch",
            commits=[],
            files=[],
        )
        data.update(fields)
        shas = [s for s in fields.get("commits", []) if isinstance(s, str)]
        if len(shas) != len(fields.get("commits", [])):
            return _Answer(200, data)  # commit objects given verbatim through **fields
        headers: dict[str, str] = {}
        if "page" in ctx.query or "per_page" in ctx.query:
            shas, headers = self._paginate(ctx, shas)
        else:  # GitHub's unpaged answer: the newest 250, oldest first
            shas = shas[-250:]
        known = self.commits.get(repo.full_name.lower(), {})
        data["commits"] = [self._commit_json(repo, known[s], full=False) for s in shas]
        return _Answer(200, data, headers)

    def _commit_json(self, repo: Repo, commit: _Commit, *, full: bool) -> JSONDict:
        """A ``commit`` object; ``full`` adds the stats and files of ``GET /commits/{ref}``
        (the stand-in knows no files: none)."""
        data = self.openapi.example("commit")
        api = f"{self.url}/repos/{repo.full_name}"
        committer = commit.author if commit.committer is None else commit.committer

        def signed(login: str) -> JSONDict:
            name = login or "Someone Unknown"
            return {"name": name, "email": f"{name}@example.com", "date": _iso(commit.date)}

        data.update(
            url=f"{api}/commits/{commit.sha}",
            sha=commit.sha,
            node_id=_node_id("Commit", int(hashlib.sha1(commit.sha.encode()).hexdigest()[:8], 16)),
            html_url=f"{self.web_url}/{repo.full_name}/commit/{commit.sha}",
            comments_url=f"{api}/commits/{commit.sha}/comments",
            author=self._user(commit.author) if commit.author else None,
            committer=self._user(committer) if committer else None,
            parents=[
                {
                    "url": f"{api}/commits/{p}",
                    "html_url": f"{self.web_url}/{repo.full_name}/commit/{p}",
                    "sha": p,
                }
                for p in commit.parents
            ],
        )
        data["commit"].update(
            url=f"{api}/git/commits/{commit.sha}",
            author=signed(commit.author),
            committer=signed(committer),
            message=commit.message,
            tree={"url": f"{api}/git/trees/{_sha(commit.sha)}", "sha": _sha(commit.sha)},
        )
        if full:
            data.update(stats={"additions": 0, "deletions": 0, "total": 0}, files=[])
        else:
            data.pop("stats", None)
            data.pop("files", None)
        return dict(data)

    def _known_commit(self, repo: Repo, ref: str) -> _Commit | None:
        """A declared commit, a branch (``heads/`` optional) or a branch's or PR's head SHA."""
        key = repo.full_name.lower()
        sha = repo.branches.get(ref.removeprefix("heads/"), ref)
        heads = {*repo.branches.values()}
        heads.update(self._pull_head_sha(p) for p in self.pulls.get(key, {}).values())
        if sha in self.commits.get(key, {}) or sha in heads:
            return self._declare_commit(repo, sha)
        return None

    @_route("get", "/repos/{owner}/{repo}/commits/{ref}", permission=(("contents", "read"),))
    def _get_commit(self, ctx: _Ctx) -> _Answer:
        repo = ctx.need_repo()
        commit = self._known_commit(repo, ctx.params["ref"])
        if commit is None:
            raise _unprocessable(f"No commit found for SHA: {ctx.params['ref']}")
        return _Answer(200, self._commit_json(repo, commit, full=True))

    @_route(
        "get",
        "/repos/{owner}/{repo}/commits/{commit_sha}/pulls",
        permission=(("pull_requests", "read"),),
    )
    def _commit_pulls(self, ctx: _Ctx) -> _Answer:
        """The merged PR that brought the commit in (:meth:`add_merged_pull`) and open PRs
        whose head it is."""
        repo = ctx.need_repo()
        key = repo.full_name.lower()
        commit = self._known_commit(repo, ctx.params["commit_sha"])
        if commit is None:
            raise _unprocessable(f"No commit found for SHA: {ctx.params['commit_sha']}")
        sha = commit.sha
        numbers = set(self.commit_pulls.get(key, {}).get(sha, []))
        numbers.update(
            p.number
            for p in self.pulls[key].values()
            if p.state == "open" and self._pull_head_sha(p) == sha
        )
        keep = self.openapi.document["components"]["schemas"]["pull-request-simple"]["properties"]
        items = [
            {k: v for k, v in self._pull_json(repo, self.pulls[key][n]).items() if k in keep}
            for n in sorted(numbers)
        ]
        page, headers = self._paginate(ctx, items)
        return _Answer(200, page, headers)


_DEFAULT_FAULT_MESSAGES = {
    403: "You have exceeded a secondary rate limit. Please wait a few minutes before you try "
    "again.",
    429: "API rate limit exceeded",
    500: "Server Error",
    502: "Server Error",
    503: "Service Unavailable",
    504: "We couldn't respond to your request in time. Sorry about that. Please try "
    "resubmitting your request and contact us if the problem persists.",
}


_MANIFEST_KEYS = frozenset(
    {
        "name",
        "url",
        "hook_attributes",
        "redirect_url",
        "callback_urls",
        "setup_url",
        "description",
        "public",
        "default_events",
        "default_permissions",
        "request_oauth_on_install",
        "setup_on_update",
    }
)


def _manifest_problems(manifest: Mapping[str, Any]) -> list[str]:
    """What GitHub's app-creation page would refuse in a manifest (its documented
    parameters: https://docs.github.com/apps/sharing-github-apps/registering-a-github-app-from-a-manifest)."""
    problems = [f"unknown parameter {k!r}" for k in manifest if k not in _MANIFEST_KEYS]

    def url(value: Any) -> bool:
        return isinstance(value, str) and value.startswith(("https://", "http://"))

    if not isinstance(manifest.get("name"), str) or not manifest["name"].strip():
        problems.append("name is required")
    if not url(manifest.get("url")):
        problems.append("url (the App's homepage) is required")
    hook = manifest.get("hook_attributes")
    if hook is not None and (not isinstance(hook, dict) or not url(hook.get("url"))):
        problems.append("hook_attributes.url must be a URL")
    for key in ("redirect_url", "setup_url"):
        if key in manifest and not url(manifest[key]):
            problems.append(f"{key} must be a URL")
    permissions = manifest.get("default_permissions") or {}
    if not isinstance(permissions, dict) or any(
        v not in ("read", "write", "admin") for v in permissions.values()
    ):
        problems.append("default_permissions must map permissions to read/write/admin")
    events = manifest.get("default_events") or []
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        problems.append("default_events must be a list of event names")
    return problems


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.upper().replace("Z", "+00:00"))


def _bound(text: str, *, end: bool) -> datetime | None:
    """A date or date-time of GitHub's search syntax as an instant (``*``: open)."""
    if text == "*":
        return None
    if _CREATED_DATE.match(text):
        day = date.fromisoformat(text)
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        return start + timedelta(days=1) - timedelta(microseconds=1) if end else start
    moment = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _created_filter(expr: str) -> Callable[[datetime], bool] | None:
    """GitHub's ``created`` qualifier (``>=2024-01-01``, ``a..b``, a date) as a test;
    None when it does not parse."""
    tick = timedelta(microseconds=1)
    span: tuple[datetime | None, datetime | None]
    try:
        if expr.startswith((">=", "<=")):
            text = expr[2:]
            span = (
                (_bound(text, end=False), None)
                if expr[0] == ">"
                else (None, _bound(text, end=True))
            )
        elif expr.startswith((">", "<")):
            text = expr[1:]
            low, high = _bound(text, end=False), _bound(text, end=True)
            if low is None or high is None:
                return None
            span = (high + tick, None) if expr[0] == ">" else (None, low - tick)
        elif ".." in expr:
            a, b = expr.split("..", 1)
            span = (_bound(a, end=False), _bound(b, end=True))
        else:
            span = (_bound(expr, end=False), _bound(expr, end=True))
    except ValueError:
        return None
    first, last = span
    return lambda t: (first is None or t >= first) and (last is None or t <= last)


def iter_routes() -> Iterator[tuple[str, str]]:
    """``(METHOD, template)`` of every route the stand-in serves (for docs and tests)."""
    for method, template in sorted(_ROUTES, key=lambda k: (k[1], k[0])):
        yield method.upper(), template
