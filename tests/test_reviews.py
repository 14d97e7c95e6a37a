"""Review rounds end to end, with GitHub's published payloads (adapted where GitHub
publishes no example of the case, e.g. an `issue_comment` on a PR)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from bot import clock
from bot.models import Verification
from evidence.render import COMMENT_MARKER
from tests import appkit
from tests.standin import GitHubStandIn, example
from tests.test_app_flow import deliver, finish_run, promote, rt, verification

NEW_SHA = "1" * 40
LATER_SHA = "2" * 40


def _repo(payload: dict[str, Any]) -> dict[str, Any]:
    payload["repository"]["full_name"] = appkit.UPSTREAM
    payload["repository"]["name"] = appkit.UPSTREAM.split("/")[1]
    payload["repository"]["owner"]["login"] = appkit.UPSTREAM.split("/")[0]
    return payload


def push(
    github: GitHubStandIn, number: int, sha: str, sender: str, author: str | None = None
) -> dict[str, Any]:
    """`sender` pushes one commit `sha` (written by `author`, the sender by default) onto
    the PR's head: GitHub's compare of the old head and the new one lists it."""
    before = github.repo(appkit.FORK).branches[appkit.HEAD_REF]
    if before != sha:
        github.set_compare(
            appkit.UPSTREAM, before, sha, commits=[sha], authors={sha: author or sender}
        )
    github.add_branch(appkit.FORK, appkit.HEAD_REF, sha)
    p = _repo(copy.deepcopy(example("pull_request", "synchronize")))
    p["number"] = number
    p["before"], p["after"] = before, sha
    p["pull_request"]["number"] = number
    p["pull_request"]["head"]["sha"] = sha
    p["pull_request"]["updated_at"] = _iso(clock.utcnow())
    p["pull_request"]["base"]["ref"] = "main"
    p["sender"]["login"] = sender
    p["sender"]["type"] = "User"
    return p


def review(number: int, state: str) -> dict[str, Any]:
    p = _repo(copy.deepcopy(example("pull_request_review", "submitted")))
    p["pull_request"]["number"] = number
    p["review"]["state"] = state
    return p


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def command(
    github: GitHubStandIn, number: int, body: str, user: str, user_type: str = "User"
) -> dict[str, Any]:
    """`user` comments `body` now. GitHub dates a comment to the second: the comment is
    written at the next whole second, after everything the test did before it (the
    App's and the stand-in's clock is moved there: no test waits for it)."""
    now = clock.utcnow()
    clock.advance(timedelta(microseconds=1_000_000 - now.microsecond))
    [cid] = github.add_comments(
        appkit.UPSTREAM, number, 1, body=body, user=user, user_type=user_type
    )
    [written] = [c for c in github.comments_on(appkit.UPSTREAM, number) if c.id == cid]
    p = _repo(copy.deepcopy(example("issue_comment", "created")))
    p["issue"]["number"] = number
    p["issue"]["pull_request"] = {"url": f"{github.url}/repos/{appkit.UPSTREAM}/pulls/{number}"}
    p["comment"].update(
        id=cid,
        body=body,
        created_at=_iso(written.created_at),
        updated_at=_iso(written.updated_at),
    )
    p["comment"]["user"].update(login=user, type=user_type)
    p["sender"].update(login=user, type=user_type)
    return p


def published(
    app: Flask,
    client: FlaskClient,
    github: GitHubStandIn,
    tmp_path: Path,
    vid: str,
    tag: str,
    **spec: Any,
) -> Verification:
    finish_run(app, client, github, tmp_path / tag, vid, tag, **spec)
    v = verification(app, vid)
    assert v.state == "published", v.reason
    return v


def latest(app: Flask, number: int) -> Verification:
    with rt(app).db.session() as s:
        v = (
            s.query(Verification)
            .filter_by(pr_number=number)
            .order_by(Verification.created_at.desc())
            .first()
        )
        assert v is not None
        _ = list(v.jobs)
        return v


def evidence_comment(github: GitHubStandIn, number: int) -> str:
    ours = [c for c in github.comments_on(appkit.UPSTREAM, number) if COMMENT_MARKER in c.body]
    assert len(ours) == 1
    return ours[0].body


def test_review_round_trusted_push_reverify_and_ledger(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    first = promote(client)["verification_id"]
    v1 = published(app, client, github, tmp_path, first, "w1")
    number = v1.pr_number
    assert number is not None
    assert deliver(client, "pull_request_review", review(number, "changes_requested"), "r-1") == 202
    github.set_permission(appkit.UPSTREAM, "maintainer-mia", "maintain")
    assert (
        deliver(client, "pull_request", push(github, number, NEW_SHA, "maintainer-mia"), "p-1")
        == 202
    )
    v2 = latest(app, number)
    assert v2.id != first
    assert v2.head_sha == NEW_SHA
    assert v2.review_round
    assert v2.trigger == "push-after-review:maintainer-mia"
    assert v2.state == "dispatched"
    published(app, client, github, tmp_path, v2.id, "w2", seed=5, head_sha=NEW_SHA)
    body = evidence_comment(github, number)
    assert "### Commits verified on this PR" in body
    ledger = body.split("### Commits verified on this PR", 1)[1].split("\n\n", 2)[1]
    rows = [ln for ln in ledger.splitlines() if ln.startswith(("| [`", "| **["))]
    assert len(rows) == 2, ledger
    # Each commit linked to its page; the current one in bold.
    url = "https://github.com/openrsi-bot/sglang-omni/commit/"
    assert rows[0].startswith(f"| [`{v1.head_sha[:10]}`]({url}{v1.head_sha})")
    assert rows[1].startswith(f"| **[`{NEW_SHA[:10]}`]({url}{NEW_SHA})**")
    assert "push after review by `@maintainer-mia`" in rows[1]

    # A maintainer asks again: same head, a fresh verification; the ledger grows.
    assert (
        deliver(
            client,
            "issue_comment",
            command(github, number, "/rsi reverify h200", "maintainer-mia"),
            "c-1",
        )
        == 202
    )
    v3 = latest(app, number)
    assert v3.trigger == "reverify:maintainer-mia"
    assert v3.gpus == ["H200"]


def test_untrusted_push_waits_for_an_approval_of_that_sha(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    first = promote(client)["verification_id"]
    number = published(app, client, github, tmp_path, first, "w1").pr_number
    assert number is not None
    dispatches = len(github.dispatches)
    deliver(client, "pull_request", push(github, number, NEW_SHA, "drive-by"), "p-1")
    waiting = latest(app, number)
    assert (waiting.head_sha, waiting.state) == (NEW_SHA, "awaiting-approval")  # runs nothing
    assert len(github.dispatches) == dispatches
    notes = [
        c.body
        for c in github.comments_on(appkit.UPSTREAM, number)
        if "approve **exactly this commit**" in c.body
    ]
    assert len(notes) == 1
    assert NEW_SHA[:10] in notes[0]

    github.set_permission(appkit.UPSTREAM, "maintainer-mia", "write")
    deliver(
        client, "issue_comment", command(github, number, "/rsi reverify", "maintainer-mia"), "c-1"
    )
    approved = latest(app, number)
    assert approved.head_sha == NEW_SHA
    assert len(github.dispatches) == dispatches + 1

    # The approval does not stick: the next untrusted push waits again.
    deliver(client, "pull_request", push(github, number, LATER_SHA, "drive-by"), "p-2")
    assert latest(app, number).state == "awaiting-approval"
    assert verification(app, approved.id).state == "superseded"
    assert len(github.dispatches) == dispatches + 1


def test_read_only_users_are_refused_politely(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    first = promote(client)["verification_id"]
    number = verification(app, first).pr_number
    assert number is not None
    dispatches = len(github.dispatches)
    deliver(client, "issue_comment", command(github, number, "/rsi reverify", "reader"), "c-1")
    assert len(github.dispatches) == dispatches
    replies = [
        c.body
        for c in github.comments_on(appkit.UPSTREAM, number)
        if c.body.startswith("Sorry @reader")
    ]
    assert len(replies) == 1
    assert "write access" in replies[0]
    assert github.count("POST", r"/reactions$") == 1


def test_bots_and_edits_and_untracked_issues_are_ignored(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    first = promote(client)["verification_id"]
    number = verification(app, first).pr_number
    assert number is not None
    before = len(github.requests)
    deliver(
        client, "issue_comment", command(github, number, "/rsi reverify", "ci[bot]", "Bot"), "b-1"
    )
    edited = command(github, number, "/rsi reverify", "maintainer-mia")
    edited["action"] = "edited"
    deliver(client, "issue_comment", edited, "e-1")
    other = command(github, number, "/rsi reverify", "maintainer-mia")
    other["issue"]["number"] = 999
    deliver(client, "issue_comment", other, "o-1")
    assert len(github.requests) == before


def test_cancel_cancels_the_runners_run(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    vid = promote(client)["verification_id"]
    v = verification(app, vid)
    assert v.pr_number is not None
    github.set_permission(appkit.UPSTREAM, "maintainer-mia", "admin")
    deliver(
        client,
        "issue_comment",
        command(github, v.pr_number, "/rsi cancel", "maintainer-mia"),
        "c-1",
    )
    v = verification(app, vid)
    assert v.state == "cancelled"
    assert github.count("POST", rf"/actions/runs/{v.jobs[0].workflow_run_id}/cancel$") == 1
    assert any(
        "cancelled `" + vid in c.body for c in github.comments_on(appkit.UPSTREAM, v.pr_number)
    )


def test_status_and_help(app: Flask, client: FlaskClient, github: GitHubStandIn) -> None:
    clock.hold()  # "as soon as it was queued" whatever the machine's load
    vid = promote(client)["verification_id"]
    number = verification(app, vid).pr_number
    assert number is not None
    github.set_permission(appkit.UPSTREAM, "maintainer-mia", "write")
    deliver(
        client, "issue_comment", command(github, number, "/rsi status", "maintainer-mia"), "s-1"
    )
    deliver(
        client, "issue_comment", command(github, number, "/rsi frobnicate", "maintainer-mia"), "h-1"
    )
    bodies = [c.body for c in github.comments_on(appkit.UPSTREAM, number)]
    status = next(b for b in bodies if b.startswith(f"@maintainer-mia verification `{vid}`"))
    assert "**dispatched**" in status
    # Dispatched at once (no "queued for 0 s"); its runner named in words, with its run.
    assert "- dispatched as soon as it was queued" in status
    assert "- runners: H200 waiting for a runner to pick it up ([run](" in status
    assert "GPU time not estimated yet" in status  # nothing recorded for the task
    assert any(
        b.startswith("unknown command `frobnicate`") and "/rsi reverify" in b for b in bodies
    )


def test_rerun_button_reverifies_and_approves_the_sha(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    first = promote(client)["verification_id"]
    v1 = published(app, client, github, tmp_path, first, "w1")
    p = _repo(copy.deepcopy(example("check_run", "rerequested")))
    p["check_run"].update(
        name="rsi/verify", head_sha=v1.head_sha, pull_requests=[{"number": v1.pr_number}]
    )
    p["sender"]["login"] = "reader"  # GitHub shows the button to readers too
    deliver(client, "check_run", p, "rr-0")
    assert latest(app, v1.pr_number or 0).id == first
    github.set_permission(appkit.UPSTREAM, "maintainer-mia", "write")
    p["sender"]["login"] = "maintainer-mia"
    deliver(client, "check_run", p, "rr-1")
    v2 = latest(app, v1.pr_number or 0)
    assert v2.id != first
    assert v2.trigger == "rerun:maintainer-mia"
    assert v2.state == "dispatched"


def test_new_head_supersedes_the_running_verification(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    first = promote(client)["verification_id"]
    v1 = verification(app, first)
    number = v1.pr_number
    assert number is not None
    deliver(client, "pull_request", push(github, number, NEW_SHA, "openrsi-bot"), "p-1")
    old = verification(app, first)
    assert old.state == "superseded"
    assert old.superseded_by == latest(app, number).id
    assert github.count("POST", rf"/actions/runs/{v1.jobs[0].workflow_run_id}/cancel$") == 1


def test_closing_the_pr_cancels_running_verifications(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    vid = promote(client)["verification_id"]
    number = verification(app, vid).pr_number
    p = _repo(copy.deepcopy(example("pull_request", "closed")))
    p["number"] = number
    p["pull_request"]["number"] = number
    deliver(client, "pull_request", p, "x-1")
    assert verification(app, vid).state == "cancelled"


def test_malformed_repo_config_is_reported_on_the_pr(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    github.set_file(appkit.UPSTREAM, ".github/rsi.yml", "rounds: [unclosed\n")
    vid = promote(client)["verification_id"]
    number = verification(app, vid).pr_number
    assert number is not None
    notes = [
        c.body for c in github.comments_on(appkit.UPSTREAM, number) if ".github/rsi.yml" in c.body
    ]
    assert len(notes) == 1
    assert "line 2, column 1" in notes[0]
    assert "runs with the defaults" in notes[0]


def test_config_base_main_measures_pushes_against_the_current_main(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    main_tip = "9" * 40
    github.set_file(appkit.UPSTREAM, ".github/rsi.yml", "base: main\n")
    vid = promote(client)["verification_id"]
    number = verification(app, vid).pr_number
    assert number is not None
    github.add_branch(appkit.UPSTREAM, "main", main_tip)
    deliver(client, "pull_request", push(github, number, NEW_SHA, "openrsi-bot"), "p-1")
    v = latest(app, number)
    assert v.head_sha == NEW_SHA
    assert v.base_sha == main_tip
    assert v.candidate["base_sha"] == main_tip
