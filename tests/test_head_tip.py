"""The head a PR shows is the head that is measured: a candidate whose `head.sha` is not
the tip of its branch (the fork's owner pushed one more commit after the harness promoted
it) measures nothing. The PR opens at the tip (GitHub opens a PR at its branch's tip,
whatever the intake said); the promoted commit is not dispatched and gets no check run;
the PR's comment names both commits and how a maintainer approves the tip; the PR body
says nothing about the promoted commit that is not true."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evidence.synth import HEAD_SHA
from tests import appkit
from tests.standin import GitHubStandIn
from tests.test_reviews import command
from tests.worlds import SHAPES, World, world

TIP = "c" * 40  # one more commit on the candidate's branch, by the fork's owner
BRANCH = f"openrsi-bot:{appkit.HEAD_REF}"


@pytest.fixture(params=SHAPES)
def w(request: pytest.FixtureRequest, tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world(request.param, tmp_path, github) as x:
        yield x


def test_a_candidate_behind_its_branch_tip_measures_nothing_and_says_why(w: World) -> None:
    w.github.add_branch(appkit.FORK, appkit.HEAD_REF, TIP)
    vid = w.promote()
    v = w.verification(vid)
    assert v.pr_number is not None
    pull = w.github.pulls[appkit.UPSTREAM.lower()][v.pr_number]
    assert pull.head_sha == TIP  # the PR shows the tip
    assert v.state == "failed"
    assert w.github.dispatches == [], "a commit that is not the PR's head was dispatched"
    assert v.check_run_id is None
    assert w.github.count("POST", r"/check-runs$") == 0
    why = w.reason(vid)
    assert f"`{HEAD_SHA[:10]}`" in why
    assert f"`{TIP[:10]}`" in why
    assert f"`{BRANCH}`" in why
    [comment] = w.github.comments_on(appkit.UPSTREAM, v.pr_number)
    assert f"is not the tip of `{BRANCH}`" in comment.body
    assert f"/rsi reverify {TIP}" in comment.body  # the tip, sent for approval
    body = pull.body or ""
    assert "Every commit on this PR is re-measured" not in body
    assert "waiting for a GPU runner" not in body
    assert HEAD_SHA not in body, "the PR body still compares the promoted commit"
    assert f"...openrsi-bot:{TIP}" in body  # it compares the head it shows
    assert "NOT MEASURED" in body
    assert f"`{TIP[:10]}`" in body
    w.github.assert_clean()


def test_a_maintainer_approves_the_tip_and_it_is_measured(w: World) -> None:
    w.github.add_branch(appkit.FORK, appkit.HEAD_REF, TIP)
    v = w.verification(w.promote())
    number = v.pr_number
    assert number is not None
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    said = command(w.github, number, "/rsi reverify", "mia")
    assert w.deliver("issue_comment", said, "c-1") == 202
    w.settle()
    latest = w.latest(number)
    assert latest.head_sha == TIP
    assert [d["inputs"]["head_sha"] for d in w.github.dispatches] == [TIP]
    w.github.assert_clean()


def test_a_candidate_at_its_branch_tip_is_measured_as_before(w: World) -> None:
    vid = w.promote()
    v = w.verification(vid)
    assert v.state == "dispatched"
    assert [d["inputs"]["head_sha"] for d in w.github.dispatches] == [HEAD_SHA]
    assert v.pr_number is not None
    body = w.github.pulls[appkit.UPSTREAM.lower()][v.pr_number].body or ""
    assert "Every commit on this PR is re-measured" not in body
    assert "/rsi reverify" in body  # how a commit that is not trusted comes to be measured


def test_an_existing_pr_whose_head_is_not_the_candidates_is_not_measured(w: World) -> None:
    existing = w.github.add_pull(
        appkit.UPSTREAM, head=BRANCH, head_sha=TIP, title="opened by hand", body="mine"
    )
    w.github.add_branch(appkit.FORK, appkit.HEAD_REF, TIP)
    vid = w.promote()
    v = w.verification(vid)
    assert v.pr_number == existing["number"]
    assert v.state == "failed"
    assert w.github.dispatches == []
    assert w.github.pulls[appkit.UPSTREAM.lower()][v.pr_number].body == "mine"
    [comment] = w.github.comments_on(appkit.UPSTREAM, v.pr_number)
    assert f"/rsi reverify {TIP}" in comment.body
    w.github.assert_clean()


def test_a_candidate_naming_a_tracked_pr_at_another_head_is_not_measured(w: World) -> None:
    number = w.verification(w.promote()).pr_number
    assert number is not None
    w.github.add_branch(appkit.FORK, appkit.HEAD_REF, TIP)  # the PR's head moves on
    v = w.verification(w.promote("d-2", candidate_id="again", pull_request=number))
    assert v.pr_number == number
    assert v.state == "failed"
    assert [d["inputs"]["head_sha"] for d in w.github.dispatches] == [HEAD_SHA]  # the first's
    assert f"/rsi reverify {TIP}" in w.reason(v.id)
    w.github.assert_clean()
