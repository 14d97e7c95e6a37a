"""Attribution in the live App: the other merged PRs of the measured range, found with
GitHub's compare and commit-to-pull lookups, over real HTTP against the stand-in, through
the App's own installation client (JWT, token, retries, lazy objects)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from github.Repository import Repository

from bot.github.attribution import MAX_COMMITS, other_pulls
from bot.github.client import GitHubApp
from evidence.caveats import write_caveats
from evidence.synth import BASE_SHA, HEAD_SHA
from tests import appkit
from tests.standin import GitHubStandIn

UPSTREAM = appkit.UPSTREAM
OWN_PR = 7
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
LOOKUPS = r"^/repos/[^/]+/[^/]+/commits/[0-9a-f]{40}/pulls$"


def _sha(i: int) -> str:
    return f"{i:040x}"


@pytest.fixture
def repo(tmp_path: Path, github: GitHubStandIn) -> Repository:
    github.add_pull(UPSTREAM, head=f"openrsi-bot:{appkit.HEAD_REF}", number=OWN_PR)
    return GitHubApp(appkit.settings(tmp_path, github.url)).repo(UPSTREAM)


def test_other_merged_pulls_are_listed_in_merge_order(
    github: GitHubStandIn, repo: Repository
) -> None:
    # The head branch merged main: the range holds the candidate's commit, two PRs merged
    # on main meanwhile (#12 before #11), and the merge commit that is the head.
    own, m11, m12 = _sha(1), _sha(11), _sha(12)
    github.add_merged_pull(UPSTREAM, 11, "Batch the vocoder", [m11], merged_at=T0 + timedelta(1))
    github.add_merged_pull(UPSTREAM, 12, "Pin CUDA graphs", [m12], merged_at=T0)
    github.set_compare(UPSTREAM, BASE_SHA, HEAD_SHA, commits=[own, m11, m12, HEAD_SHA])

    got = other_pulls(repo, BASE_SHA, HEAD_SHA, OWN_PR)

    assert [e.model_dump() for e in got.entries] == [
        {
            "number": 12,
            "title": "Pin CUDA graphs",
            "url": f"https://github.com/{UPSTREAM}/pull/12",
            "merged_at": "2025-03-01T09:00:00Z",
        },
        {
            "number": 11,
            "title": "Batch the vocoder",
            "url": f"https://github.com/{UPSTREAM}/pull/11",
            "merged_at": "2025-03-02T09:00:00Z",
        },
    ]
    assert (got.commits_total, got.commits_checked, got.lookups, got.reason) == (4, 4, 4, None)
    assert github.count("GET", r"/compare/") == 1
    assert github.count("GET", LOOKUPS) == 4
    # What the evidence makes of them: the caveat the CLI's --attribution gives.
    assert write_caveats([], [], [], None, got.entries) == [
        "Not all of this range is the candidate: it also includes "
        "#12 (Pin CUDA graphs), #11 (Batch the vocoder)."
    ]


def test_the_candidates_own_pull_is_left_out(github: GitHubStandIn, repo: Repository) -> None:
    # Even merged (a re-verification after the merge), the own PR is not "another" PR.
    own, other = _sha(1), _sha(2)
    github.add_merged_pull(UPSTREAM, OWN_PR, "The candidate", [own], merged_at=T0)
    github.add_merged_pull(UPSTREAM, 20, "Another change", [other], merged_at=T0)
    github.set_compare(UPSTREAM, BASE_SHA, HEAD_SHA, commits=[own, other])

    assert [e.number for e in other_pulls(repo, BASE_SHA, HEAD_SHA, OWN_PR).entries] == [20]
    assert [e.number for e in other_pulls(repo, BASE_SHA, HEAD_SHA, None).entries] == [OWN_PR, 20]


def test_a_pull_on_several_commits_is_listed_once(github: GitHubStandIn, repo: Repository) -> None:
    # #30 was merged with a merge commit: its three commits and the merge are all in range.
    c1, c2, c3, merge = _sha(31), _sha(32), _sha(33), _sha(34)
    github.add_merged_pull(
        UPSTREAM, 30, "Three steps", [c1, c2, c3], merged_at=T0, merge_commit_sha=merge
    )
    github.set_compare(UPSTREAM, BASE_SHA, HEAD_SHA, commits=[c1, c2, c3, merge])

    got = other_pulls(repo, BASE_SHA, HEAD_SHA, OWN_PR)

    assert [e.number for e in got.entries] == [30]
    # c2 repeats #30; c3 (its head) and the merge commit are known from c1's answer.
    assert (got.commits_checked, got.lookups) == (4, 2)
    assert github.count("GET", LOOKUPS) == 2


def test_no_other_change_in_range_is_empty(github: GitHubStandIn, repo: Repository) -> None:
    # The measured base is the head's merge base: only the candidate's own commits.
    github.set_compare(UPSTREAM, BASE_SHA, HEAD_SHA, commits=[_sha(1), HEAD_SHA])

    got = other_pulls(repo, BASE_SHA, HEAD_SHA, OWN_PR)
    assert (got.entries, got.commits_total, got.reason) == ([], 2, None)

    before = len(github.requests)
    assert other_pulls(repo, HEAD_SHA, HEAD_SHA, OWN_PR).entries == []
    assert len(github.requests) == before  # the same commit: nothing to ask


def test_base_only_commits_are_counted_not_attributed(
    github: GitHubStandIn, repo: Repository
) -> None:
    # Main moved past the head's merge base and the base was measured there: those
    # commits are not in the head, so they are no part of what the head adds.
    github.add_merged_pull(UPSTREAM, 40, "Only on main", [_sha(40)], merged_at=T0)
    github.set_compare(
        UPSTREAM, BASE_SHA, HEAD_SHA, status="diverged", behind_by=1, commits=[HEAD_SHA]
    )

    got = other_pulls(repo, BASE_SHA, HEAD_SHA, OWN_PR)
    assert (got.entries, got.base_only) == ([], 1)


@pytest.mark.parametrize("status", [404, 422])
def test_a_compare_github_refuses_is_empty_with_a_reason(
    github: GitHubStandIn, repo: Repository, status: int
) -> None:
    # 404: a head force-pushed away (the stand-in knows no such range); 422: refused.
    if status == 422:
        github.set_compare(UPSTREAM, BASE_SHA, HEAD_SHA, commits=[_sha(1)])
        github.fail_next(
            "GET",
            r"/compare/",
            422,
            body={"message": "Sorry, this diff is taking too long to generate."},
        )

    got = other_pulls(repo, BASE_SHA, HEAD_SHA, OWN_PR)

    assert got.entries == []
    assert got.reason is not None
    assert got.reason.startswith(f"GitHub could not compare {BASE_SHA[:10]}...{HEAD_SHA[:10]}")
    assert str(status) in got.reason
    assert github.count("GET", LOOKUPS) == 0


def test_a_lookup_github_refuses_keeps_what_was_found(
    github: GitHubStandIn, repo: Repository
) -> None:
    github.add_merged_pull(UPSTREAM, 50, "First", [_sha(50)], merged_at=T0)
    github.add_merged_pull(UPSTREAM, 51, "Second", [_sha(51)], merged_at=T0)
    github.set_compare(UPSTREAM, BASE_SHA, HEAD_SHA, commits=[_sha(50), _sha(51)])
    github.fail_next("GET", f"/commits/{_sha(51)}/pulls$", 422)

    got = other_pulls(repo, BASE_SHA, HEAD_SHA, OWN_PR)

    assert [e.number for e in got.entries] == [50]
    assert got.commits_checked == 1
    assert got.reason is not None
    assert got.reason.startswith(f"the pull requests of {_sha(51)[:10]} could not be read: 422")


def test_a_300_commit_range_checks_at_most_the_cap_and_says_so(
    github: GitHubStandIn, repo: Repository
) -> None:
    shas = [_sha(i) for i in range(1000, 1300)]
    github.add_merged_pull(UPSTREAM, 60, "Early", [shas[5]], merged_at=T0)
    github.add_merged_pull(UPSTREAM, 61, "Late", [shas[200]], merged_at=T0)  # past the cap
    github.set_compare(UPSTREAM, BASE_SHA, HEAD_SHA, commits=shas)

    got = other_pulls(repo, BASE_SHA, HEAD_SHA, OWN_PR)

    assert [e.number for e in got.entries] == [60]
    assert (got.commits_total, got.commits_checked) == (300, MAX_COMMITS)
    assert got.reason == f"only the oldest {MAX_COMMITS} of the range's 300 commits were looked up"
    # The bound: one compare page of exactly the cap, one lookup per checked commit.
    (compare,) = github.matching("GET", r"/compare/")
    assert compare.query == {"page": "1", "per_page": str(MAX_COMMITS)}
    assert github.count("GET", LOOKUPS) == MAX_COMMITS
    # Everything else was the App's authentication (installation id, token).
    auth = github.count(path_regex=r"/installation$|/access_tokens$")
    assert len(github.requests) - auth == 1 + MAX_COMMITS


def test_limit_stops_the_lookups(github: GitHubStandIn, repo: Repository) -> None:
    shas = [_sha(i) for i in range(70, 75)]
    for n, sha in enumerate(shas, start=70):
        github.add_merged_pull(UPSTREAM, n, f"Change {n}", [sha], merged_at=T0 - timedelta(n))
    github.set_compare(UPSTREAM, BASE_SHA, HEAD_SHA, commits=shas)

    got = other_pulls(repo, BASE_SHA, HEAD_SHA, OWN_PR, limit=2)

    assert [e.number for e in got.entries] == [71, 70]  # by merge time
    assert (got.commits_checked, got.reason) == (2, "stopped at 2 pull requests")
    assert github.count("GET", LOOKUPS) == 2
