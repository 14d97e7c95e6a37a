"""Approvals mean what the maintainer saw, in both shapes of the App, tried as an attacker
would: a push between a maintainer's comment and its delivery, a replayed comment, an
outsider's commit brought in by a writer's "Update branch" merge, an allow-listed user
approving code, the Re-run button pressed by a reader, and strangers' `/rsi` spam."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from bot.models import Approval, PullCommand
from evidence.render import COMMENT_MARKER
from evidence.synth import HEAD_SHA
from tests import appkit
from tests.standin import GitHubStandIn, example
from tests.test_reviews import _repo, command, push
from tests.worlds import SHAPES, World, world

B_SHA = "b" * 40
C_SHA = "c" * 40
MERGE_SHA = "d" * 40
MAIN_SHA = "e" * 40


@pytest.fixture(params=SHAPES)
def w(request: pytest.FixtureRequest, tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world(request.param, tmp_path, github) as x:
        yield x


def published_pr(w: World) -> int:
    vid = w.promote()
    w.finish(vid)
    number = w.verification(vid).pr_number
    assert number is not None
    return number


def deliver(w: World, event: str, payload: dict[str, Any], delivery: str) -> None:
    assert w.deliver(event, payload, delivery) == 202
    w.settle()


def approved(w: World, number: int) -> set[str]:
    with w.svc.db.session() as s:
        rows = s.scalars(select(Approval).where(Approval.pr_number == number))
        return {a.sha for a in rows}


def replies(w: World, number: int, start: str) -> list[str]:
    return [c.body for c in w.github.comments_on(appkit.UPSTREAM, number) if start in c.body]


# ----------------------------------------------------------------- bound to the head seen


def test_a_comment_approves_the_head_it_saw_not_a_push_after_it(w: World) -> None:
    number = published_pr(w)
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    deliver(w, "pull_request", push(w.github, number, B_SHA, "drive-by"), "p-b")
    dispatches = len(w.github.dispatches)
    # Mia reads B and approves it; before her comment is delivered the author pushes C.
    said = command(w.github, number, "/rsi reverify", "mia")
    deliver(w, "pull_request", push(w.github, number, C_SHA, "drive-by"), "p-c")
    deliver(w, "issue_comment", said, "c-1")
    assert len(w.github.dispatches) == dispatches, "a commit pushed after the comment ran"
    assert approved(w, number) == {B_SHA}
    [reply] = replies(w, number, "was pushed since")
    assert f"`{B_SHA[:10]}`" in reply
    assert f"/rsi reverify {C_SHA}" in reply  # the SHA to approve, named
    # A comment written after the push approves it.
    deliver(w, "issue_comment", command(w.github, number, "/rsi reverify", "mia"), "c-2")
    assert len(w.github.dispatches) == dispatches + 1
    assert w.latest(number).head_sha == C_SHA
    assert approved(w, number) == {B_SHA, C_SHA}
    w.github.assert_clean()


def test_a_comment_delivered_before_the_push_it_predates_approves_the_old_head(
    w: World,
) -> None:
    """The push's own delivery is late: the App reads the new head while handling the
    comment and knows it only from then on."""
    number = published_pr(w)
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    deliver(w, "pull_request", push(w.github, number, B_SHA, "drive-by"), "p-b")
    said = command(w.github, number, "/rsi reverify", "mia")
    late_push = push(w.github, number, C_SHA, "drive-by")  # on GitHub, not delivered yet
    dispatches = len(w.github.dispatches)
    deliver(w, "issue_comment", said, "c-1")
    assert len(w.github.dispatches) == dispatches
    assert approved(w, number) == {B_SHA}
    deliver(w, "pull_request", late_push, "p-c")
    assert len(w.github.dispatches) == dispatches  # C waits for its own approval
    said = [r for r in replies(w, number, f"/rsi reverify {C_SHA}") if COMMENT_MARKER not in r]
    assert len(said) == 2  # the reply, the push note (and the evidence comment's top line)


def test_a_replayed_comment_cannot_approve_a_newer_head(w: World) -> None:
    number = published_pr(w)
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    deliver(w, "pull_request", push(w.github, number, B_SHA, "drive-by"), "p-b")
    said = command(w.github, number, "/rsi reverify", "mia")
    deliver(w, "issue_comment", said, "c-1")
    assert w.latest(number).head_sha == B_SHA
    deliver(w, "pull_request", push(w.github, number, C_SHA, "drive-by"), "p-c")
    dispatches, requests = len(w.github.dispatches), len(w.github.requests)
    deliver(w, "issue_comment", copy.deepcopy(said), "c-1-replayed")
    assert len(w.github.dispatches) == dispatches
    assert approved(w, number) == {B_SHA}
    assert len(w.github.requests) == requests  # not even a reaction


def test_reverify_sha_approves_exactly_that_commit(w: World) -> None:
    number = published_pr(w)
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    deliver(w, "pull_request", push(w.github, number, B_SHA, "drive-by"), "p-b")
    deliver(w, "pull_request", push(w.github, number, C_SHA, "drive-by"), "p-c")
    dispatches = len(w.github.dispatches)
    deliver(w, "issue_comment", command(w.github, number, "/rsi reverify 1234567", "mia"), "c-0")
    assert approved(w, number) == set()
    [which] = replies(w, number, "names no single commit")
    assert f"/rsi reverify {C_SHA}" in which
    deliver(w, "issue_comment", command(w.github, number, "/rsi reverify bbbbbbb", "mia"), "c-1")
    assert approved(w, number) == {B_SHA}
    assert len(w.github.dispatches) == dispatches  # B is not the head
    assert replies(w, number, "is the commit your comment approves, and it is not")
    # B pushed again: approved, so it runs; C, never approved, does not.
    deliver(w, "pull_request", push(w.github, number, B_SHA, "drive-by"), "p-b2")
    assert len(w.github.dispatches) == dispatches + 1
    assert w.latest(number).head_sha == B_SHA


# ----------------------------------------------------------------- trust follows the code


@pytest.mark.parametrize(
    "case", ["outsider-commit", "forged-author", "outsider-committer", "main-merge"]
)
def test_a_writers_merge_brings_no_unapproved_code(w: World, case: str) -> None:
    """pytorch's ciflow loophole: an outsider's commit waits for approval; a writer's
    "Update branch" merge containing it must wait too."""
    number = published_pr(w)
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    outsider = "drive-by"
    if case != "main-merge":
        deliver(w, "pull_request", push(w.github, number, B_SHA, outsider), "p-b")
    dispatches = len(w.github.dispatches)
    payload = push(w.github, number, MERGE_SHA, "mia")
    new = [MAIN_SHA, MERGE_SHA] if case == "main-merge" else [B_SHA, MERGE_SHA]
    authors = {B_SHA: outsider, MAIN_SHA: "someone-on-main", MERGE_SHA: "mia"}
    committers = {MERGE_SHA: "web-flow"}
    if case == "forged-author":
        authors[B_SHA] = "mia"  # an e-mail of hers in the outsider's commit
    if case == "outsider-committer":
        authors[B_SHA], committers[B_SHA] = "mia", outsider
    w.github.set_compare(
        appkit.UPSTREAM, HEAD_SHA, MERGE_SHA, commits=new, authors=authors, committers=committers
    )
    own = [MERGE_SHA] if case == "main-merge" else [B_SHA, MERGE_SHA]
    w.github.set_compare(appkit.UPSTREAM, "main", MERGE_SHA, commits=own)
    deliver(w, "pull_request", payload, "p-merge")
    if case == "main-merge":  # main's commits are trusted: merging main runs
        assert len(w.github.dispatches) == dispatches + 1
        assert w.latest(number).head_sha == MERGE_SHA
        return
    assert len(w.github.dispatches) == dispatches, "the outsider's code ran unapproved"
    [note] = replies(w, number, f"@mia pushed `{MERGE_SHA[:10]}`")
    assert f"`{B_SHA[:10]}`" in note
    assert f"/rsi reverify {MERGE_SHA}" in note
    if case == "forged-author":
        assert "pushed to this PR before and never approved" in note
    else:
        assert f"`{outsider}`" in note
        assert f"@{outsider}" not in note  # named, not notified
    w.github.assert_clean()


def test_a_trusted_push_of_its_own_commit_costs_one_compare(w: World) -> None:
    number = published_pr(w)
    before = len(w.github.requests)
    deliver(w, "pull_request", push(w.github, number, B_SHA, "openrsi-bot"), "p-b")
    assert w.latest(number).head_sha == B_SHA
    spent = [f"{r.method} {r.path}" for r in w.github.requests[before:]]
    assert len([r for r in spent if "/compare/" in r]) == 1, spent
    assert not [r for r in spent if r.endswith("/permission")], spent


# ----------------------------------------------------------------- who may approve


ALLOW = "trigger:\n  allow: [alice]\n"


def test_allow_listed_users_approve_untrusted_code_only_with_write_access(w: World) -> None:
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", ALLOW)
    w.github.set_permission(appkit.UPSTREAM, "alice", "read")
    number = published_pr(w)
    # A head the App verified already: alice may have it measured again.
    dispatches = len(w.github.dispatches)
    deliver(w, "issue_comment", command(w.github, number, "/rsi reverify", "alice"), "c-0")
    assert len(w.github.dispatches) == dispatches + 1
    # An outsider's commit: alice's word is not an approval.
    deliver(w, "pull_request", push(w.github, number, B_SHA, "drive-by"), "p-b")
    dispatches = len(w.github.dispatches)
    deliver(w, "issue_comment", command(w.github, number, "/rsi reverify", "alice"), "c-1")
    assert len(w.github.dispatches) == dispatches
    assert approved(w, number) == set()
    [refusal] = replies(w, number, "@alice you may run `/rsi` commands here")
    assert "write access" in refusal
    assert f"/rsi reverify {B_SHA}" in refusal
    # Still a user of commands: status answers.
    deliver(w, "issue_comment", command(w.github, number, "/rsi status", "alice"), "c-2")
    assert replies(w, number, "@alice verification `")
    # With write access her word approves.
    w.github.set_permission(appkit.UPSTREAM, "alice", "write")
    w.svc.github._permissions.clear()  # another process, or a minute later
    with w.svc.db.session() as s:  # and an hour later
        for row in s.scalars(select(PullCommand)):
            row.refused = None
    deliver(w, "issue_comment", command(w.github, number, "/rsi reverify", "alice"), "c-3")
    assert len(w.github.dispatches) == dispatches + 1
    assert approved(w, number) == {B_SHA}


def test_a_writer_whose_access_was_just_removed_cannot_approve(w: World) -> None:
    """Before: a permission answer up to 60 s old approved an untrusted head for a writer
    whose write access had been removed 8 s earlier. Approving untrusted code asks afresh."""
    number = published_pr(w)
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    deliver(w, "issue_comment", command(w.github, number, "/rsi status", "mia"), "c-0")
    assert w.github.count("GET", r"/collaborators/mia/permission$") == 1  # now cached
    w.github.set_permission(appkit.UPSTREAM, "mia", "read")  # removed, seconds later
    deliver(w, "pull_request", push(w.github, number, B_SHA, "drive-by"), "p-b")
    dispatches = len(w.github.dispatches)
    deliver(w, "issue_comment", command(w.github, number, "/rsi reverify", "mia"), "c-1")
    assert len(w.github.dispatches) == dispatches
    assert approved(w, number) == set()
    assert replies(w, number, "write access")


def test_a_push_by_an_account_whose_access_was_just_removed_is_not_trusted(w: World) -> None:
    number = published_pr(w)
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    deliver(w, "issue_comment", command(w.github, number, "/rsi status", "mia"), "c-0")
    w.github.set_permission(appkit.UPSTREAM, "mia", "read")
    dispatches = len(w.github.dispatches)
    deliver(w, "pull_request", push(w.github, number, B_SHA, "mia"), "p-b")
    assert len(w.github.dispatches) == dispatches  # waits for a writer's approval
    assert approved(w, number) == set()


def rerun(w: World, number: int, sha: str, sender: str) -> dict[str, Any]:
    p = _repo(copy.deepcopy(example("check_run", "rerequested")))
    p["check_run"].update(name="rsi/verify", head_sha=sha, pull_requests=[{"number": number}])
    p["sender"]["login"] = sender
    return p


def test_the_rerun_button_approves_only_for_writers(w: World) -> None:
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", ALLOW)
    number = published_pr(w)
    deliver(w, "pull_request", push(w.github, number, B_SHA, "drive-by"), "p-b")
    dispatches = len(w.github.dispatches)
    for who, role in (("reader", "read"), ("alice", "triage")):
        w.github.set_permission(appkit.UPSTREAM, who, role)
        deliver(w, "check_run", rerun(w, number, B_SHA, who), f"rr-{who}")
        assert len(w.github.dispatches) == dispatches, f"{who}'s Re-run ran unapproved code"
        assert approved(w, number) == set()
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    deliver(w, "check_run", rerun(w, number, B_SHA, "mia"), "rr-mia")
    assert len(w.github.dispatches) == dispatches + 1
    assert approved(w, number) == {B_SHA}


def test_a_strangers_commands_cost_one_lookup_and_one_reply_an_hour(w: World) -> None:
    number = published_pr(w)
    before = len(w.github.requests)
    for i in range(4):
        deliver(w, "issue_comment", command(w.github, number, "/rsi reverify", "stranger"), f"s{i}")
    assert w.github.count("GET", r"/collaborators/stranger/permission$") == 1
    assert len(replies(w, number, "Sorry @stranger")) == 1
    spent = w.github.requests[before:]
    assert len(spent) == 3, [r.path for r in spent]  # the lookup, a reaction, the reply
    w.github.assert_clean()


def test_a_command_in_a_code_block_or_quote_costs_nothing(w: World) -> None:
    number = published_pr(w)
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    before = len(w.github.requests)
    for i, body in enumerate(
        [
            "```\n```sh\n/rsi reverify\n```",  # an info string does not close a fence
            "> what did you mean by\n/rsi reverify",  # a quote's lazy continuation
            "<!--\n/rsi reverify\n-->",
            "To run it again:\n\n    /rsi reverify",
        ]
    ):
        deliver(w, "issue_comment", command(w.github, number, body, "mia"), f"q{i}")
    assert len(w.github.requests) == before


# ----------------------------------------------------------------- Approve and verify


def waiting_check(w: World, number: int, sha: str) -> Any:
    """The App's check run of `sha` awaiting approval."""
    v = w.latest(number)
    assert (v.head_sha, v.state) == (sha, "awaiting-approval")
    assert v.check_run_id is not None
    return w.github.check_runs[v.check_run_id]


def press(w: World, check: Any, sender: str, identifier: str = "approve-and-verify") -> Any:
    p = _repo(copy.deepcopy(example("check_run", "requested_action")))
    p["check_run"].update(
        id=check.id,
        name=check.name,
        head_sha=check.head_sha,
        external_id=check.external_id,
        pull_requests=[],
    )
    p["requested_action"] = {"identifier": identifier}
    p["sender"]["login"] = sender
    return p


def test_an_outsiders_push_awaits_approval_and_the_older_heads_run_stops(w: World) -> None:
    """Before: the comment still bolded the older head as current, nothing said the new
    head awaited approval, the head had no `rsi/verify` check and the older head's run
    went on."""
    old = w.promote()
    number = w.verification(old).pr_number
    assert number is not None
    old_run = w.run_id(old, "H200")
    dispatches = len(w.github.dispatches)
    deliver(w, "pull_request", push(w.github, number, B_SHA, "drive-by"), "p-b")
    assert len(w.github.dispatches) == dispatches
    assert w.verification(old).state == "superseded"
    assert w.github.count("POST", rf"/actions/runs/{old_run}/cancel$") == 1
    check = waiting_check(w, number, B_SHA)
    assert (check.name, check.status, check.conclusion) == (
        "rsi/verify",
        "completed",
        "action_required",
    )
    [action] = check.actions
    assert action == {
        "label": "Approve and verify",
        "description": "Run this commit on the GPU runners",
        "identifier": "approve-and-verify",
    }
    assert f"/rsi reverify {B_SHA}" in check.output["summary"]
    [comment] = replies(w, number, COMMENT_MARKER)
    top = comment.split("\n\n")[1]
    assert top.startswith("**Awaiting approval:**")
    assert f"`{B_SHA[:10]}`" in top
    assert "drive-by" in top
    assert "@drive-by" not in top
    assert "Approve and verify" in top
    assert f"/rsi reverify {B_SHA}" in top
    assert f"**[`{B_SHA[:10]}`](" in comment  # the waiting head is the current row
    assert f"**[`{HEAD_SHA[:10]}`](" not in comment
    w.github.assert_clean()


def test_approve_and_verify_runs_exactly_that_sha_for_writers_only(w: World) -> None:
    number = published_pr(w)
    deliver(w, "pull_request", push(w.github, number, B_SHA, "drive-by"), "p-b")
    check = waiting_check(w, number, B_SHA)
    dispatches = len(w.github.dispatches)
    for who, role in (("reader", "read"), ("tri", "triage")):
        w.github.set_permission(appkit.UPSTREAM, who, role)
        deliver(w, "check_run", press(w, check, who), f"press-{who}")
        assert len(w.github.dispatches) == dispatches, f"{who}'s press ran unapproved code"
        assert approved(w, number) == set()
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    deliver(w, "check_run", press(w, check, "mia", "something-else"), "press-other")
    assert len(w.github.dispatches) == dispatches
    deliver(w, "check_run", press(w, check, "mia"), "press-mia")
    assert len(w.github.dispatches) == dispatches + 1
    assert w.github.dispatches[-1]["inputs"]["head_sha"] == B_SHA
    assert approved(w, number) == {B_SHA}
    v = w.latest(number)
    assert (v.head_sha, v.trigger, v.requested_by) == (B_SHA, "approve:mia", "mia")
    assert v.check_run_id is not None
    assert v.check_run_id != check.id
    assert check.actions == []  # the button is gone from the waiting check run
    [comment] = replies(w, number, COMMENT_MARKER)
    assert "Awaiting approval" not in comment
    w.github.assert_clean()


def test_a_press_for_a_head_that_is_no_longer_the_head_approves_nothing(w: World) -> None:
    number = published_pr(w)
    deliver(w, "pull_request", push(w.github, number, B_SHA, "drive-by"), "p-b")
    stale = waiting_check(w, number, B_SHA)
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    # C is pushed; mia presses B's button before its push is delivered, then after.
    late = push(w.github, number, C_SHA, "drive-by")
    dispatches = len(w.github.dispatches)
    deliver(w, "check_run", press(w, stale, "mia"), "press-1")
    deliver(w, "pull_request", late, "p-c")
    deliver(w, "check_run", press(w, stale, "mia"), "press-2")
    assert len(w.github.dispatches) == dispatches
    assert approved(w, number) == set()
    said = replies(w, number, "@mia the **Approve and verify** you pressed")
    assert len(said) == 2
    assert f"`{B_SHA[:10]}`" in said[0]
    assert f"/rsi reverify {C_SHA}" in said[0]
    assert waiting_check(w, number, C_SHA).id != stale.id
    w.github.assert_clean()
