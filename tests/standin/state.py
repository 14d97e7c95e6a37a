"""The in-memory GitHub behind the stand-in: plain records, no HTTP.

Records hold only what a test sets or the app changes; the JSON GitHub would answer is
rendered from them on every read (``tests/standin/github.py``), so a later change, such
as a push to a PR's head branch, shows up everywhere at once, as on GitHub.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

DEFAULT_RUN_NAME = "rsi verify ${{ inputs.verification_id }} ${{ inputs.gpu }}"

# What app.yml asks for; an installation grants these unless a test says otherwise.
DEFAULT_PERMISSIONS: dict[str, str] = {
    "actions": "write",
    "checks": "write",
    "contents": "write",
    "issues": "write",
    "metadata": "read",
    "pull_requests": "write",
}


@dataclass
class RecordedRequest:
    """One request as the stand-in received it (the app's side of the conversation)."""

    method: str
    path: str  # without the Enterprise prefix; blob downloads keep their /_blobs/ path
    query: dict[str, str]
    json: Any  # the parsed JSON body, or None
    headers: dict[str, str]
    body: bytes = b""
    status: int = 0  # what the stand-in answered
    operation: str | None = None  # GitHub's operationId, when the route is known
    injected: bool = False  # answered by fail_next()
    at: float = field(default_factory=time.monotonic)  # when it arrived (monotonic clock)


@dataclass
class Fault:
    """A failure to answer instead of the real thing (see ``GitHubStandIn.fail_next``)."""

    method: str
    pattern: re.Pattern[str]
    status: int
    times: int
    headers: dict[str, str]
    body: Any
    used: int = 0


@dataclass
class Installation:
    id: int
    account: str
    account_type: str
    permissions: dict[str, str]
    created_at: datetime


@dataclass
class Token:
    value: str
    installation_id: int
    expires_at: datetime
    permissions: dict[str, str]
    repositories: frozenset[str] | None  # lower-case full names; None: all of the installation


@dataclass
class Workflow:
    id: int
    file: str
    name: str
    run_name_template: str | None
    inputs: tuple[str, ...] | None  # None: accept any inputs (not declared by the test)
    required: tuple[str, ...]
    created_at: datetime


@dataclass
class Pull:
    number: int
    id: int
    title: str
    body: str | None
    head_repo: str  # full name
    head_ref: str
    base_ref: str
    user: str
    user_type: str
    created_at: datetime
    updated_at: datetime
    state: str = "open"
    draft: bool = False
    maintainer_can_modify: bool = True
    closed_at: datetime | None = None
    head_sha: str = ""  # last seen head sha, in case the branch goes away
    labels: list[str] = field(default_factory=list)


@dataclass
class Issue:
    number: int
    id: int
    title: str
    body: str | None
    user: str
    user_type: str
    created_at: datetime
    updated_at: datetime
    state: str = "open"
    labels: list[str] = field(default_factory=list)


@dataclass
class Comment:
    id: int
    repo: str  # full name
    issue_number: int
    body: str
    user: str
    user_type: str
    created_at: datetime
    updated_at: datetime
    via_app: bool = False


@dataclass
class CheckRun:
    id: int
    repo: str
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    started_at: datetime
    completed_at: datetime | None
    details_url: str | None
    external_id: str | None
    output: dict[str, Any]
    actions: list[dict[str, Any]]
    check_suite_id: int
    annotations: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)  # each request body, in order


@dataclass
class Run:
    id: int
    repo: str
    workflow: str  # file name
    run_number: int
    head_branch: str
    head_sha: str
    display_title: str
    inputs: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    check_suite_id: int
    event: str = "workflow_dispatch"
    status: str = "queued"
    conclusion: str | None = None
    run_started_at: datetime | None = None
    failed_step: str | None = None  # the step a failed run's job failed at
    log: str = ""  # that job's log, as GitHub serves it
    failed_window: tuple[datetime, datetime] | None = None  # the failed step's start, end


@dataclass
class Artifact:
    id: int
    repo: str
    run_id: int
    name: str
    data: bytes
    created_at: datetime
    expires_at: datetime


@dataclass
class Blob:
    data: bytes
    expires_at: datetime
    content_type: str = "application/zip"


@dataclass
class Repo:
    owner: str
    name: str
    id: int
    installation_id: int | None  # None: the App is not installed here
    owner_type: str = "Organization"
    default_branch: str = "main"
    private: bool = False
    fork: bool = False
    branches: dict[str, str] = field(default_factory=dict)
    files: dict[tuple[str | None, str], bytes] = field(default_factory=dict)  # (ref|None, path)
    permissions: dict[str, str] = field(default_factory=dict)  # login → role name
    compares: dict[str, dict[str, Any]] = field(default_factory=dict)  # "base...head" → fields
    workflows: dict[str, Workflow] = field(default_factory=dict)  # file name → workflow
    next_number: int = 1

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass
class ManifestApp:
    """A GitHub App created from a manifest on GitHub's web side, waiting for (or past)
    its one code conversion (``POST /app-manifests/{code}/conversions``)."""

    code: str
    id: int
    slug: str
    owner: str
    owner_type: str
    manifest: dict[str, Any]
    pem: str
    webhook_secret: str | None
    client_id: str
    client_secret: str
    created_at: datetime
    converted: bool = False
