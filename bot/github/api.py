"""Everything the App reads from and writes to GitHub, in the App's own terms.

The rest of the App never sees PyGithub: handlers and steps call these methods with
plain values. Every text written is cut to GitHub's limit here (comments and PR bodies
65,536 characters, check-run summaries 65,535), with a notice and a link, so no caller
can produce a 422 by saying too much.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import urllib3
from github import GithubException
from requests import RequestException

from bot import clock
from bot.github.attribution import other_pulls
from bot.github.client import GitHubApp, TooLarge
from evidence.model import AttributionEntry
from evidence.render import CHECK_LIMIT, COMMENT_LIMIT, cut_notice

log = logging.getLogger(__name__)

CHECK_TEXT_LIMIT = CHECK_LIMIT  # GitHub's limits are evidence.render's, said once
CHECK_TITLE_LIMIT = 255  # check-run output title (GitHub cuts longer; we cut first)


class GitHubError(Exception):
    """GitHub refused or failed a request; `status` is its HTTP status (0: unreachable)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"GitHub answered {status}: {message}" if status else message)
        self.status = status


def github_outage(exc: BaseException) -> bool:
    """Whether `exc` is GitHub (or the way to it) failing in a way a later attempt may
    outlast: unreachable, failing (5xx) or rate-limiting (429, a 403 that says so). A
    refusal (another 4xx) fails the same way every time."""
    import urllib3
    from github import GithubException
    from requests import RequestException

    if isinstance(exc, GitHubError | GithubException):
        status = exc.status
        limited = status == 403 and "rate limit" in str(exc).lower()
        return status == 0 or status >= 500 or status == 429 or limited
    return isinstance(exc, RequestException | urllib3.exceptions.HTTPError)


def fit(text: str, limit: int, link: str | None = None) -> str:
    """`text` cut to `limit` characters with a notice (and a link to the whole) at the end:
    the last resort of every text the App writes (the evidence cuts itself first)."""
    if len(text) <= limit:
        return text
    notice = f"\n\n{cut_notice(link)}\n"
    if len(notice) >= limit:
        return text[:limit]
    return text[: limit - len(notice)] + notice


@dataclass(frozen=True)
class Pull:
    number: int
    head_sha: str
    head_ref: str
    head_repo: str
    base_ref: str
    base_sha: str
    body: str
    html_url: str
    state: str


@dataclass(frozen=True)
class CommitPeople:
    """Who wrote and who committed a commit: GitHub logins, or None where GitHub links
    the commit's e-mail to no account (then `*_name` is all there is)."""

    sha: str
    author: str | None
    author_name: str
    committer: str | None
    committer_name: str


@dataclass(frozen=True)
class Commits:
    """The commits `head` has and `base` lacks, oldest first; `total` counts them all,
    `listed` may stop short of it (one page)."""

    listed: list[CommitPeople]
    total: int

    @property
    def complete(self) -> bool:
        return len(self.listed) >= self.total


def _people(c: dict[str, Any]) -> CommitPeople:
    git = c.get("commit") or {}

    def login(user: Any) -> str | None:
        return str(user["login"]) if isinstance(user, dict) and user.get("login") else None

    return CommitPeople(
        sha=str(c.get("sha") or ""),
        author=login(c.get("author")),
        author_name=str((git.get("author") or {}).get("name") or ""),
        committer=login(c.get("committer")),
        committer_name=str((git.get("committer") or {}).get("name") or ""),
    )


@dataclass(frozen=True)
class Run:
    id: int
    title: str
    url: str | None
    path: str
    event: str


def _pull(p: Any) -> Pull:
    return Pull(
        number=int(p.number),
        head_sha=p.head.sha,
        head_ref=p.head.ref,
        head_repo=p.head.repo.full_name if p.head.repo is not None else "",
        base_ref=p.base.ref,
        base_sha=p.base.sha,
        body=p.body or "",
        html_url=p.html_url,
        state=p.state,
    )


def _first_parent(commit: dict[str, Any]) -> str:
    first = (commit.get("parents") or [{}])[0]
    return str(first.get("sha") or "") if isinstance(first, dict) else ""


def _level(data: dict[str, Any]) -> str:
    """The user's level from GitHub's answer: `permission` is the legacy base (a triager
    reads as `read`, a maintainer as `write`; `role_name` may be a custom role's name), so
    the user's own `permissions` flags decide where GitHub gives them."""
    flags = (data.get("user") or {}).get("permissions")
    if isinstance(flags, dict):
        for flag, level in (
            ("admin", "admin"),
            ("maintain", "maintain"),
            ("push", "write"),
            ("triage", "triage"),
            ("pull", "read"),
        ):
            if flags.get(flag) is True:
                return level
    return str(data.get("permission") or "none")


def _error(exc: Exception) -> Exception:
    """GitHub's refusal or its absence as a `GitHubError`; anything else (a bug) as is."""
    if isinstance(exc, GithubException):
        data = exc.data if isinstance(exc.data, dict) else {}
        return GitHubError(exc.status, str(data.get("message") or exc))
    if isinstance(exc, RequestException | urllib3.exceptions.HTTPError | OSError):
        return GitHubError(0, f"GitHub unreachable: {type(exc).__name__}: {exc}")
    return exc


class GitHub:
    """The App's GitHub, for one process. Methods raise `GitHubError` on failure."""

    def __init__(self, app: GitHubApp) -> None:
        self.app = app
        self._pulls: dict[tuple[str, int], tuple[float, Pull]] = {}
        self._permissions: dict[tuple[str, str], tuple[float, str]] = {}

    # ------------------------------------------------------------------ plumbing

    def _repo(self, repo: str) -> Any:
        return self.app.repo(repo)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GitHubError:
            raise
        except Exception as exc:
            mapped = _error(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def request(self, repo: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        def go() -> Any:
            return self.app.request(self.app.installation_id(repo), method, path, body)

        return self._call(go)

    def installation_id(self, repo: str) -> int:
        return int(self._call(self.app.installation_id, repo))

    # ------------------------------------------------------------------ reads

    def default_branch(self, repo: str) -> str:
        return str(self._call(self.app.default_branch, repo))

    def branch_sha(self, repo: str, branch: str) -> str:
        return str(self._call(lambda: self._repo(repo).get_branch(branch).commit.sha))

    def pull(self, repo: str, number: int, max_age_s: float = 0.0) -> Pull:
        """The PR; one read in the last `max_age_s` seconds (by this process) will do."""
        hit = self._pulls.get((repo, number))
        if hit is not None and time.monotonic() - hit[0] <= max_age_s:
            return hit[1]
        found: Pull = self._call(lambda: _pull(self._repo(repo).get_pull(number)))
        self._pulls[(repo, number)] = (time.monotonic(), found)
        return found

    def commits_ahead(self, repo: str, base: str, head: str) -> int:
        return int(self._call(lambda: self._repo(repo).compare(base, head).ahead_by))

    def attribution(
        self, repo: str, base_sha: str, head_sha: str, own_pr: int | None
    ) -> list[AttributionEntry]:
        """Other PRs merged in the compared range (never raises: an empty list with the
        reason logged when GitHub cannot say)."""
        found = other_pulls(self._repo(repo), base_sha, head_sha, own_pr)
        if found.reason:
            log.info(
                "attribution of %s %s..%s: %s", repo, base_sha[:10], head_sha[:10], found.reason
            )
        return list(found.entries)

    def new_commits(self, repo: str, base: str, head: str, limit: int = 100) -> Commits:
        """The commits `head` has and `base` lacks (GitHub's three-dot compare, one
        request: the first `limit` of them, oldest first, and how many there are)."""
        per_page = max(1, min(limit, 100))
        _, data = self.request(
            repo, "GET", f"/repos/{repo}/compare/{base}...{head}?per_page={per_page}&page=1"
        )
        listed = [_people(c) for c in data.get("commits") or [] if isinstance(c, dict)]
        total = int(data.get("total_commits") or data.get("ahead_by") or len(listed))
        return Commits(listed=listed, total=max(total, len(listed)))

    def first_parents(self, repo: str, good: str, bad: str, limit: int = 100) -> list[str] | None:
        """The commits from `good` (excluded) to `bad` (included) along first parents,
        oldest first: the default branch's own history, whatever a merge brought along.
        One compare when it lists the whole range; else (merges brought more commits than
        a page holds) a walk back one commit at a time. None when the chain is longer than
        `limit` or does not reach `good`."""
        per_page = max(1, min(limit, 100))
        _, data = self.request(
            repo, "GET", f"/repos/{repo}/compare/{good}...{bad}?per_page={per_page}&page=1"
        )
        commits = [c for c in data.get("commits") or [] if isinstance(c, dict)]
        parents = {str(c["sha"]): _first_parent(c) for c in commits if c.get("sha")}
        chain: list[str] = []
        at = bad
        while at != good and at in parents and len(chain) <= limit:
            chain.append(at)
            at = parents[at]
        if at != good:  # the page stopped short of it: walk on
            while at != good and at and len(chain) <= limit:
                chain.append(at)
                _, c = self.request(repo, "GET", f"/repos/{repo}/commits/{at}")
                at = _first_parent(c)
        return chain[::-1] if at == good and len(chain) <= limit else None

    def merged_pulls(self, repo: str, sha: str, branch: str) -> list[tuple[int, str]]:
        """(number, author) of the PRs merged into `branch` that brought `sha` in (GitHub's
        commit → PR association), the one whose merge commit it is first: a backport or a
        sync into another branch is not the culprit's PR."""
        _, data = self.request(repo, "GET", f"/repos/{repo}/commits/{sha}/pulls")
        items = data.get("items")
        found = [
            p
            for p in (items if isinstance(items, list) else [])
            if isinstance(p, dict)
            and p.get("merged_at")
            and isinstance(p.get("number"), int)
            and (p.get("base") or {}).get("ref") == branch
        ]
        found.sort(key=lambda p: p.get("merge_commit_sha") != sha)
        return [(int(p["number"]), str((p.get("user") or {}).get("login") or "")) for p in found]

    def permission(self, repo: str, user: str, max_age_s: float = 0.0) -> str:
        """`admin`, `maintain`, `write`, `triage`, `read` or `none`; one answer of the
        last `max_age_s` seconds (by this process) will do."""
        key = (repo, user.lower())
        hit = self._permissions.get(key)
        if hit is not None and time.monotonic() - hit[0] <= max_age_s:
            return hit[1]
        try:
            _, data = self.request(repo, "GET", f"/repos/{repo}/collaborators/{user}/permission")
            found = _level(data)
        except GitHubError as exc:
            if exc.status != 404:
                raise
            found = "none"  # not a collaborator (or a bot account GitHub won't say)
        self._permissions[key] = (time.monotonic(), found)
        return found

    def runs_since(self, repo: str, since: dt.datetime) -> Iterator[Run]:
        """Workflow-dispatch runs created since `since`, newest first (every page)."""
        stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")

        def listing() -> Any:
            return self._repo(repo).get_workflow_runs(
                event="workflow_dispatch", created=f">={stamp}"
            )

        try:
            for r in self._call(listing):
                yield Run(
                    id=int(r.id),
                    title=str(r.display_title or r.name or ""),
                    url=r.html_url,
                    path=str(r.path or ""),
                    event=str(r.event or ""),
                )
        except (GithubException, RequestException, OSError) as exc:
            raise _error(exc) from exc

    def failed_step(self, repo: str, run_id: int) -> Failure:
        """Where a failed run failed: its first failed job's failed step and, for the
        verify job, the last lines that step wrote (its time window in the job's log: the
        steps that run after a failure would bury them), at most `LOG_LINES` and
        `LOG_CHARS`, timestamps and colour codes taken off. Best effort: whatever GitHub
        does not answer is left out; a log past `LOG_MAX_BYTES` gives the step only; the
        upload job's log is never quoted (it names the bucket and the role)."""
        _, doc = self.request(repo, "GET", f"/repos/{repo}/actions/runs/{run_id}/jobs")
        jobs = [j for j in doc.get("jobs") or [] if isinstance(j, dict)]
        job = next((j for j in jobs if j.get("conclusion") not in ("success", "skipped")), None)
        if job is None:
            return Failure()
        steps = [x for x in job.get("steps") or [] if isinstance(x, dict)]
        step = next((x for x in steps if x.get("conclusion") == "failure"), None)
        name = str(step.get("name"))[:200] if step else None
        url = str(job.get("html_url") or "") or None
        if not str(job.get("name") or "").startswith(VERIFY_JOB) or step is None:
            return Failure(name, (), url)
        with tempfile.TemporaryDirectory(prefix="rsi-log-") as tmp:
            dest = Path(tmp) / "log.txt"
            try:
                self._call(
                    self.app.download,
                    self.installation_id(repo),
                    f"/repos/{repo}/actions/jobs/{int(job['id'])}/logs",
                    dest,
                    LOG_MAX_BYTES,
                )
                text = dest.read_bytes().decode("utf-8", "replace")
            except (GitHubError, TooLarge, OSError, KeyError, ValueError) as exc:
                log.info("run %s: no log lines (%s)", run_id, exc)
                return Failure(name, (), url)
        window = (_when(step.get("started_at")), _when(step.get("completed_at")))
        return Failure(name, log_tail(text, window), url)

    def artifact_zip(self, repo: str, run_id: int, name: str, dest: Path, max_bytes: int) -> bool:
        """The run's artifact `name`, streamed into the zip file `dest`; False when it has
        none (or expired). `TooLarge` when it is bigger than `max_bytes`: GitHub's listing
        says so before a byte is fetched, and the download stops there whatever it says."""
        iid = self.installation_id(repo)
        _, listing = self.request(
            repo, "GET", f"/repos/{repo}/actions/runs/{run_id}/artifacts?name={name}"
        )
        for art in listing.get("artifacts", []):
            if art.get("name") == name and not art.get("expired"):
                size = art.get("size_in_bytes")
                if isinstance(size, int) and size > max_bytes:
                    raise TooLarge(size, max_bytes)
                path = f"/repos/{repo}/actions/artifacts/{art['id']}/zip"
                self._call(self.app.download, iid, path, dest, max_bytes)
                return True
        return False

    # ------------------------------------------------------------------ writes

    def open_pull(
        self, repo: str, *, base: str, head: str, title: str, body: str
    ) -> tuple[Pull, bool]:
        """Open the PR, or attach to the open one from the same branch; whether it was
        opened now."""
        r = self._repo(repo)
        try:
            created = r.create_pull(
                base=base,
                head=head,
                title=title[:256],
                body=fit(body, COMMENT_LIMIT),
                maintainer_can_modify=True,
            )
            return _pull(created), True
        except GithubException as exc:
            if exc.status != 422 or "already exists" not in str(exc.data):
                raise _error(exc) from exc
        found = self._call(lambda: next(iter(r.get_pulls(state="open", head=head)), None))
        if found is None:
            raise GitHubError(422, f"a PR from {head} exists but is not open")
        return _pull(found), False

    def edit_pull_body(self, repo: str, number: int, body: str, link: str | None = None) -> None:
        self._pulls.pop((repo, number), None)
        self._call(
            lambda: self._repo(repo).get_pull(number).edit(body=fit(body, COMMENT_LIMIT, link))
        )

    def create_check_run(
        self,
        repo: str,
        *,
        head_sha: str,
        external_id: str,
        details_url: str,
        title: str,
        summary: str,
        conclusion: str | None = None,
        actions: list[dict[str, str]] | None = None,
        name: str = "",
    ) -> int:
        """A queued check run (`rsi/verify` unless `name` says), or one completed with
        `conclusion` (`action_required` with its `actions`, the buttons GitHub shows)."""
        kwargs: dict[str, Any] = {"status": "queued"}
        if conclusion is not None:
            kwargs = {"conclusion": conclusion, "completed_at": clock.utcnow()}
        if actions is not None:
            kwargs["actions"] = actions
        run = self._call(
            lambda: self._repo(repo).create_check_run(
                name=name or CHECK_NAME,
                head_sha=head_sha,
                external_id=external_id,
                details_url=details_url,
                output={
                    "title": fit(title, CHECK_TITLE_LIMIT),
                    "summary": fit(summary, CHECK_TEXT_LIMIT, details_url),
                },
                **kwargs,
            )
        )
        return int(run.id)

    def update_check_run(
        self,
        repo: str,
        check_run_id: int,
        *,
        title: str,
        summary: str,
        status: str | None = None,
        conclusion: str | None = None,
        details_url: str | None = None,
        actions: list[dict[str, str]] | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {
            "output": {
                "title": fit(title, CHECK_TITLE_LIMIT),
                "summary": fit(summary, CHECK_TEXT_LIMIT, details_url),
            }
        }
        if conclusion is not None:
            kwargs.update(status="completed", conclusion=conclusion, completed_at=clock.utcnow())
        elif status is not None:
            kwargs["status"] = status
        if details_url:
            kwargs["details_url"] = details_url
        if actions is not None:
            kwargs["actions"] = actions  # [] takes the buttons away
        self._call(lambda: self._repo(repo).get_check_run(check_run_id).edit(**kwargs))

    def create_comment(self, repo: str, number: int, body: str, link: str | None = None) -> int:
        c = self._call(
            lambda: (
                self._repo(repo).get_issue(number).create_comment(fit(body, COMMENT_LIMIT, link))
            )
        )
        return int(c.id)

    def edit_own_comment(
        self, repo: str, number: int, comment_id: int, body: str, link: str | None = None
    ) -> bool:
        """Edit a comment the App wrote; False when it is gone (deleted) or not the App's."""

        def edit() -> bool:
            c = self._repo(repo).get_issue(number).get_comment(comment_id)
            if not self._is_own(c):
                return False
            c.edit(fit(body, COMMENT_LIMIT, link))
            return True

        try:
            return bool(self._call(edit))
        except GitHubError as exc:
            if exc.status in (404, 410):
                return False
            raise

    def find_own_comment(self, repo: str, number: int, marker: str) -> int | None:
        """The App's own comment carrying `marker` (every page); others' are ignored."""

        def find() -> int | None:
            for c in self._repo(repo).get_issue(number).get_comments():
                if marker in (c.body or "") and self._is_own(c):
                    return int(c.id)
            return None

        return self._call(find)  # type: ignore[no-any-return]

    def _is_own(self, comment: Any) -> bool:
        via = comment.performed_via_github_app
        if via is not None:
            return int(via.id) == int(self.app.app_id)
        login = str(getattr(comment.user, "login", "") or "")
        return login.endswith("[bot]") and login == self.app.bot_login

    def add_labels(self, repo: str, number: int, labels: list[str]) -> None:
        self.request(repo, "POST", f"/repos/{repo}/issues/{number}/labels", {"labels": labels})

    def remove_label(self, repo: str, number: int, name: str) -> None:
        """Take `name` off the issue or PR; one that is not there (removed by hand) is
        done already."""
        try:
            self.request(
                repo, "DELETE", f"/repos/{repo}/issues/{number}/labels/{quote(name, safe='')}"
            )
        except GitHubError as exc:
            if exc.status != 404:
                raise

    def create_issue(self, repo: str, title: str, body: str, labels: list[str]) -> int:
        _, data = self.request(
            repo,
            "POST",
            f"/repos/{repo}/issues",
            {"title": title, "body": fit(body, COMMENT_LIMIT, None), "labels": labels},
        )
        return int(data["number"])

    def react(self, repo: str, number: int, comment_id: int, content: str) -> None:
        self._call(
            lambda: (
                self._repo(repo).get_issue(number).get_comment(comment_id).create_reaction(content)
            )
        )

    def dispatch(
        self, repo: str, workflow: str, ref: str, inputs: dict[str, str]
    ) -> tuple[int | None, str | None]:
        """Dispatch the runner workflow; the run's id and URL when GitHub returns them
        (`return_run_details`), else (None, None) (older GitHub Enterprise answers 204)."""
        path = f"/repos/{repo}/actions/workflows/{workflow}/dispatches"
        status, data = self.request(
            repo, "POST", path, {"ref": ref, "inputs": inputs, "return_run_details": True}
        )
        if status == 200 and data.get("workflow_run_id"):
            return int(data["workflow_run_id"]), data.get("html_url")
        return None, None

    def cancel_run(self, repo: str, run_id: int) -> None:
        try:
            self.request(repo, "POST", f"/repos/{repo}/actions/runs/{run_id}/cancel")
        except GitHubError as exc:
            if exc.status not in (404, 409):  # finished already, or gone
                raise


CHECK_NAME = "rsi/verify"
WATCH_CHECK_NAME = "rsi/watch"

LOG_LINES = 20
LOG_LINE_CHARS = 200
LOG_CHARS = 1800  # all of them: inside what the words quoting them keep
VERIFY_JOB = "verify "  # the workflow's measuring job, "verify TASK on GPU"
LOG_MAX_BYTES = 20 * 1024 * 1024
_STAMP = re.compile(r"^\ufeff?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) ")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class Failure:
    """Where a runner job failed, for the words that say so."""

    step: str | None = None
    lines: tuple[str, ...] = ()
    url: str | None = None


def log_tail(
    text: str, window: tuple[dt.datetime | None, dt.datetime | None] = (None, None)
) -> tuple[str, ...]:
    """The last non-empty lines of a job log inside the step's time `window` (a line with
    no timestamp goes with the one before it), without GitHub's timestamps and colours,
    each cut to `LOG_LINE_CHARS` and all of them to `LOG_CHARS` (the words that quote
    them make them inert)."""
    start, end = window
    if end is not None:
        end += dt.timedelta(seconds=1)  # the step's end is given to the second
    lines: list[str] = []
    inside = start is None and end is None
    for raw in text.splitlines():
        m = _STAMP.match(raw)
        if m is not None:
            when = _when(m.group(1))
            inside = when is None or (
                (start is None or when >= start) and (end is None or when <= end)
            )
        if not inside:
            continue
        line = _ANSI.sub("", _STAMP.sub("", raw)).rstrip()
        if line.strip():
            lines.append(line[:LOG_LINE_CHARS])
    kept: list[str] = []
    for line in reversed(lines[-LOG_LINES:]):  # the last lines are what failed
        if sum(len(x) + 1 for x in kept) + len(line) + 1 > LOG_CHARS:
            break
        kept.append(line)
    return tuple(reversed(kept))


def _when(value: object) -> dt.datetime | None:
    """An ISO time of GitHub's (a job's step, a log line), or None."""
    if not isinstance(value, str):
        return None
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


# The identifier of the Approve and verify button on a check run awaiting approval (at
# most 20 characters); the press is bound to the check run's own head SHA.
APPROVE_ACTION = "approve-and-verify"
