"""Which other pull requests a measured range contains, for the evidence's attribution caveat.

The delta the App publishes is `head` measured against `base`. When the candidate's branch
merged the base branch after `base` was taken, the head also carries PRs merged there in
between, and part of the delta may be theirs. GitHub's compare lists the commits of the
range and the commit-to-pull lookup names the merged PR behind each; that list is what
`evidence.build.Inputs.attribution` takes (the CLI reads the same list from a file).

It is a caveat, not a gate: every failure becomes an empty or partial answer with a
reason, never an exception that would stop a publish, and the requests are bounded
(one compare, at most `max_commits` lookups).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice

import requests
from github import GithubException
from github.Repository import Repository

from evidence.model import AttributionEntry

log = logging.getLogger(__name__)

MAX_COMMITS = 60  # lookups per range: one request each, so this bounds the cost
_PAGE_MAX = 100  # GitHub's largest `per_page`


@dataclass(frozen=True)
class Attribution:
    """The other merged PRs of a range and how much of the range was looked at.

    `reason` says why the list is empty or may be incomplete (None: the whole range was
    looked up). `base_only` counts commits the base has and the head lacks: their effect
    shows in the delta inverted, but the head does not contain them, so they are counted,
    not attributed.
    """

    entries: list[AttributionEntry] = field(default_factory=list)
    commits_total: int = 0
    commits_checked: int = 0
    lookups: int = 0
    base_only: int = 0
    reason: str | None = None


def other_pulls(
    repo: Repository,
    base_sha: str,
    head_sha: str,
    own_pr: int | None,
    limit: int = 50,
    *,
    max_commits: int = MAX_COMMITS,
) -> Attribution:
    """The merged PRs other than `own_pr` that `head_sha` contains and `base_sha` lacks.

    Why `compare(base_sha, head_sha)` and not the other way round: GitHub's compare is
    three-dot, so its commits are those reachable from the head and not from the base
    (`git log base..head`). These are exactly what the measured head adds to the measured
    base: the candidate's own commits, which map to its own (open) PR and are left out,
    plus, when the head branch merged the base branch after `base_sha`, the commits of
    PRs merged there meanwhile, the "also includes" of the caveat. The reverse range
    (base-only commits, GitHub's `behind_by`) is returned as a count in `base_only`.

    GitHub lists the range oldest first; past `max_commits` (at most 100, one page) the
    rest is not looked up and `reason` says how much was. Each commit costs one lookup,
    except the head and merge commits of a PR already found. PRs come ordered by merge
    time, at most `limit` of them.
    """
    if base_sha == head_sha:
        return Attribution()
    cap = max(1, min(max_commits, _PAGE_MAX))
    try:
        # One request: the first page, oldest first, of exactly the commits we may check.
        comparison = repo.compare(base_sha, head_sha, comparison_commits_per_page=cap)
        total, behind = comparison.total_commits, comparison.behind_by
        commits = list(islice(comparison.commits, cap))
    except (GithubException, requests.RequestException) as exc:
        refused = f"GitHub could not compare {base_sha[:10]}...{head_sha[:10]}: {_why(exc)}"
        log.warning("attribution of %s: %s", repo.full_name, refused)
        return Attribution(reason=refused)

    found: dict[int, tuple[datetime, AttributionEntry]] = {}
    known: set[str] = set()  # commits of PRs found already: their lookup would repeat them
    checked = lookups = 0
    reason: str | None = None
    for commit in commits:
        if len(found) >= limit:
            reason = f"stopped at {limit} pull requests"
            break
        checked += 1
        if commit.sha in known:
            continue
        lookups += 1
        try:
            pulls = list(commit.get_pulls())
        except (GithubException, requests.RequestException) as exc:
            checked -= 1
            reason = f"the pull requests of {commit.sha[:10]} could not be read: {_why(exc)}"
            log.warning("attribution of %s: %s", repo.full_name, reason)
            break
        for pull in pulls:
            if pull.merged_at is None or pull.number == own_pr or pull.number in found:
                continue
            merged = pull.merged_at.astimezone(UTC)
            found[pull.number] = (
                merged,
                AttributionEntry(
                    number=pull.number,
                    title=pull.title,
                    url=pull.html_url,
                    merged_at=merged.strftime("%Y-%m-%dT%H:%M:%SZ"),
                ),
            )
            known.update(s for s in (pull.merge_commit_sha, pull.head.sha) if s)
    if reason is None and checked < total:
        reason = f"only the oldest {checked} of the range's {total} commits were looked up"
    ordered = sorted(found.values(), key=lambda hit: (hit[0], hit[1].number))
    return Attribution(
        entries=[entry for _, entry in ordered][:limit],
        commits_total=total,
        commits_checked=checked,
        lookups=lookups,
        base_only=behind,
        reason=reason,
    )


def _why(exc: Exception) -> str:
    if isinstance(exc, GithubException):
        message = exc.data.get("message") if isinstance(exc.data, dict) else None
        return f"{exc.status} {message or ''}".strip()
    return type(exc).__name__
