"""The GitHub stand-in, proven with the clients the App uses (PyGithub, requests).

If the stand-in accepted what GitHub refuses, or answered what GitHub never answers, the
App's end-to-end tests would prove nothing; so it is tested against real clients here,
and every test ends with ``assert_clean()`` (which includes the stand-in's own answers
being valid against GitHub's response schemas).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import re
import tarfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from github import Auth, Github, GithubException, GithubIntegration, GithubRetry

from tests import fetch_github_fixtures
from tests.standin import (
    DEFAULT_RUN_NAME,
    GitHubStandIn,
    OpenAPI,
    example,
    iter_routes,
    load_examples,
    serve,
    sign,
)
from tests.standin.payloads import NoExampleError

APP_ID = 424242
UPSTREAM = "sgl-project/sglang-omni"
FORK = "openrsi-bot/sglang-omni"
RUNNER = "openrsi-bot/rsi-runners"
HEAD_REF = "rsi/cosyvoice3-idle-threads"
HEAD_SHA = "fe4b23f06b27f7b2492703891c8036a919d2041e"
BASE_SHA = "f29a1195d12826bcedfda78f4e58429745eda5b8"
WORKFLOW = "rsi-verify.yml"
INPUTS = {"verification_id": "v-2c1f0e", "gpu": "H100", "repo": UPSTREAM, "pr": "7"}
# PyGithub spaces requests 0.25 s (writes 1 s) apart by default; not needed against a local server.
FAST: dict[str, Any] = {"seconds_between_requests": None, "seconds_between_writes": None}


@cache
def _key_pair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def _populate(gh: GitHubStandIn) -> None:
    gh.add_repo(UPSTREAM, default_sha=BASE_SHA)
    gh.add_repo(FORK, fork=True)
    gh.add_branch(FORK, HEAD_REF, HEAD_SHA)
    gh.add_repo(RUNNER)


@pytest.fixture
def standin() -> Iterator[GitHubStandIn]:
    """A populated stand-in; tests that provoke errors on purpose clear them."""
    with serve(app_id=APP_ID, public_key=_key_pair()[1]) as gh:
        _populate(gh)
        yield gh


def _mint(gh: GitHubStandIn, repo: str, **kwargs: Any) -> str:
    with GithubIntegration(
        auth=Auth.AppAuth(APP_ID, _key_pair()[0]), base_url=gh.url, **FAST
    ) as app:
        iid = app.get_repo_installation(*repo.split("/")).id
        return app.get_access_token(iid, **kwargs).token


@pytest.fixture
def client(standin: GitHubStandIn) -> Iterator[Github]:
    """PyGithub as the App uses it: an installation token of the upstream repo."""
    retry = GithubRetry(total=3, backoff_factor=0.01, status_forcelist=[*range(500, 600), 429])
    with Github(
        auth=Auth.Token(_mint(standin, UPSTREAM)), base_url=standin.url, retry=retry, **FAST
    ) as gh:
        yield gh


@pytest.fixture
def runner_client(standin: GitHubStandIn) -> Iterator[Github]:
    with Github(auth=Auth.Token(_mint(standin, RUNNER)), base_url=standin.url, **FAST) as gh:
        yield gh


def _session(token: str | None = None) -> requests.Session:
    session = requests.Session()
    if token:
        session.headers["Authorization"] = f"token {token}"
    session.headers["Accept"] = "application/vnd.github+json"
    return session


def _take_errors(gh: GitHubStandIn) -> list[str]:
    errors, gh.errors[:] = list(gh.errors), []
    return errors


# --- App authentication -------------------------------------------------------------------


def test_installation_token_is_minted_with_the_app_jwt(standin: GitHubStandIn) -> None:
    token = _mint(standin, UPSTREAM)
    assert token.startswith("ghs_")
    assert standin.tokens_issued == 1
    (minted,) = standin.matching("POST", r"^/app/installations/\d+/access_tokens$")
    assert minted.status == 201
    assert minted.headers["Authorization"].startswith("Bearer ey")
    assert minted.operation == "apps/create-installation-access-token"
    assert standin.tokens[token].expires_at > datetime.now(UTC) + timedelta(minutes=59)


def test_jwt_claims_and_signature_are_checked(standin: GitHubStandIn) -> None:
    private, _ = _key_pair()
    iid = standin.repo(UPSTREAM).installation_id
    now = int(time.time())
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cases = {
        "iss": jwt.encode({"iat": now - 60, "exp": now + 300, "iss": "999"}, private, "RS256"),
        "expired": jwt.encode(
            {"iat": now - 900, "exp": now - 300, "iss": str(APP_ID)}, private, "RS256"
        ),
        "lifetime": jwt.encode(
            {"iat": now, "exp": now + 3600, "iss": str(APP_ID)}, private, "RS256"
        ),
        "signature": jwt.encode(
            {"iat": now, "exp": now + 300, "iss": str(APP_ID)}, other_key, "RS256"
        ),
    }
    with _session() as http:
        for credential in cases.values():
            answer = http.post(
                f"{standin.url}/app/installations/{iid}/access_tokens",
                headers={"Authorization": f"Bearer {credential}"},
            )
            assert answer.status_code == 401
    errors = _take_errors(standin)
    assert len(errors) == 4
    assert "iss '999' is not the App id" in errors[0]
    assert "expired" in errors[1]
    assert "at most 600s" in errors[2]
    assert "signature does not verify" in errors[3]
    assert standin.tokens_issued == 0


def test_repo_routes_need_an_installation_token(standin: GitHubStandIn) -> None:
    app_jwt = Auth.AppAuth(APP_ID, _key_pair()[0]).create_jwt()
    with _session() as http:
        assert http.get(f"{standin.url}/repos/{UPSTREAM}").status_code == 401
        bad = http.get(f"{standin.url}/repos/{UPSTREAM}", headers={"Authorization": "token nope"})
        assert bad.status_code == 401
        assert bad.json()["message"] == "Bad credentials"
        with_jwt = http.get(
            f"{standin.url}/repos/{UPSTREAM}", headers={"Authorization": f"Bearer {app_jwt}"}
        )
        assert with_jwt.status_code == 401
    errors = _take_errors(standin)
    assert "no installation token" in errors[0]
    assert "unknown token" in errors[1]
    assert "an App JWT cannot call" in errors[2]


def test_token_is_bound_to_its_installation_and_permissions(standin: GitHubStandIn) -> None:
    upstream_token = _mint(standin, UPSTREAM)
    with Github(auth=Auth.Token(upstream_token), base_url=standin.url, retry=None, **FAST) as gh:
        with pytest.raises(GithubException) as wrong_repo:
            gh.get_repo(RUNNER)
        assert wrong_repo.value.status == 404
    read_only = _mint(standin, UPSTREAM, permissions={"checks": "read"})
    with Github(auth=Auth.Token(read_only), base_url=standin.url, retry=None, **FAST) as gh:
        repo = gh.get_repo(UPSTREAM)
        with pytest.raises(GithubException) as forbidden:
            repo.create_check_run(name="rsi", head_sha=HEAD_SHA)
        assert forbidden.value.status == 403
    errors = _take_errors(standin)
    assert (
        f"token of installation {standin.repo(UPSTREAM).installation_id} used on {RUNNER}"
        in (errors[0])
    )
    assert "needs checks:write" in errors[1]


def test_expired_installation_token_is_refused(standin: GitHubStandIn) -> None:
    token = _mint(standin, UPSTREAM)
    standin.clock = lambda: datetime.now(UTC) + timedelta(hours=2)
    with _session(token) as http:
        assert http.get(f"{standin.url}/repos/{UPSTREAM}").status_code == 401
    assert "expired" in _take_errors(standin)[0]


# --- pull requests, issues, comments ------------------------------------------------------


def test_pull_request_lifecycle(standin: GitHubStandIn, client: Github) -> None:
    repo = client.get_repo(UPSTREAM)
    pr = repo.create_pull(
        base="main",
        head=f"openrsi-bot:{HEAD_REF}",
        title="CosyVoice3: idle encoder threads sleep",
        body="Evidence follows.",
        maintainer_can_modify=True,
        draft=False,
    )
    assert pr.number == 1
    assert pr.head.sha == HEAD_SHA
    assert pr.head.repo.full_name == FORK
    assert pr.base.sha == BASE_SHA
    assert pr.html_url == f"https://github.com/{UPSTREAM}/pull/1"
    assert pr.user.login == "rsi-bot[bot]"

    standin.add_branch(FORK, HEAD_REF, "a" * 40)  # a push in answer to review
    assert repo.get_pull(1).head.sha == "a" * 40
    pr.edit(title="Retitled", body="New body", state="closed")
    again = repo.get_pull(1)
    assert (again.title, again.body, again.state) == ("Retitled", "New body", "closed")
    assert again.closed_at is not None
    issue = repo.get_issue(1)
    assert issue.pull_request is not None

    with pytest.raises(GithubException) as missing:
        repo.get_pull(99)
    assert missing.value.status == 404
    assert standin.errors == []  # a missing PR is GitHub's answer, not the app's fault


def test_duplicate_pull_request_is_refused_like_github(
    standin: GitHubStandIn, client: Github
) -> None:
    repo = client.get_repo(UPSTREAM)
    repo.create_pull(base="main", head=f"openrsi-bot:{HEAD_REF}", title="t", body="b")
    with pytest.raises(GithubException) as duplicate:
        repo.create_pull(base="main", head=f"openrsi-bot:{HEAD_REF}", title="t", body="b")
    assert duplicate.value.status == 422
    assert "already exists" in json.dumps(duplicate.value.data)
    open_pulls = repo.get_pulls(state="open", head=f"openrsi-bot:{HEAD_REF}")
    assert [p.number for p in open_pulls] == [1]


def test_comments_paginate_past_page_one(standin: GitHubStandIn, client: Github) -> None:
    standin.add_pull(UPSTREAM, head=f"openrsi-bot:{HEAD_REF}", number=7)
    standin.add_comments(UPSTREAM, 7, 249, body="chatter {i}")
    issue = client.get_repo(UPSTREAM).get_issue(7)
    mine = issue.create_comment("<!-- rsi-bot:evidence -->\nEvidence")
    comments = list(issue.get_comments())
    assert len(comments) == 250
    assert comments[0].body == "chatter 0"
    assert comments[-1].id == mine.id
    assert comments[-1].user.login == "rsi-bot[bot]"
    pages = standin.matching("GET", r"/issues/7/comments$")
    assert len(pages) == 9  # 30 a page: every page was read
    assert issue.get_comments().totalCount == 250

    mine.edit("<!-- rsi-bot:evidence -->\nUpdated")
    assert client.get_repo(UPSTREAM).get_issue(7).get_comment(mine.id).body.endswith("Updated")


def test_link_header_is_rfc5988_with_the_servers_url(
    standin: GitHubStandIn, client: Github
) -> None:
    standin.add_comments(UPSTREAM, 3, 250)
    token = _mint(standin, UPSTREAM)
    with _session(token) as http:
        answer = http.get(
            f"{standin.url}/repos/{UPSTREAM}/issues/3/comments", params={"per_page": 100, "page": 2}
        )
    assert answer.status_code == 200
    assert len(answer.json()) == 100
    base = f"{standin.url}/repos/{UPSTREAM}/issues/3/comments"
    assert answer.links["next"]["url"] == f"{base}?per_page=100&page=3"
    assert answer.links["last"]["url"] == f"{base}?per_page=100&page=3"
    assert answer.links["prev"]["url"] == f"{base}?per_page=100&page=1"
    assert answer.links["first"]["url"] == f"{base}?per_page=100&page=1"


def test_reactions_permissions_contents_and_compare(standin: GitHubStandIn, client: Github) -> None:
    (comment_id,) = standin.add_comments(UPSTREAM, 5, 1, body="/rsi reverify h100")
    standin.set_permission(UPSTREAM, "maintainer", "maintain")
    standin.set_file(UPSTREAM, ".github/rsi.yml", "gpus: [H100]\n")
    standin.set_compare(UPSTREAM, BASE_SHA, HEAD_SHA, status="diverged", ahead_by=3, behind_by=2)
    repo = client.get_repo(UPSTREAM)

    comment = repo.get_issue(5).get_comment(comment_id)
    assert comment.create_reaction("+1").content == "+1"
    assert standin.reactions[comment_id][0]["content"] == "+1"
    assert repo.get_collaborator_permission("maintainer") == "write"  # legacy field
    assert repo.get_collaborator_role_name("maintainer") == "maintain"
    assert repo.get_collaborator_permission("stranger") == "read"  # the default

    config = repo.get_contents(".github/rsi.yml")
    assert not isinstance(config, list)
    assert config.decoded_content == b"gpus: [H100]\n"
    with _session(_mint(standin, UPSTREAM)) as http:
        url = f"{standin.url}/repos/{UPSTREAM}/contents/.github/rsi.yml"
        first = http.get(url)
        cached = http.get(url, headers={"If-None-Match": first.headers["ETag"]})
        assert cached.status_code == 304
        assert http.get(f"{standin.url}/repos/{UPSTREAM}/contents/nope.yml").status_code == 404

    comparison = repo.compare(BASE_SHA, HEAD_SHA)
    assert (comparison.status, comparison.ahead_by, comparison.behind_by) == ("diverged", 3, 2)


def test_compare_lists_its_commits_paged_like_github(
    standin: GitHubStandIn, client: Github
) -> None:
    shas = [f"{i:040x}" for i in range(1, 261)]
    standin.set_compare(UPSTREAM, BASE_SHA, HEAD_SHA, commits=shas)
    repo = client.get_repo(UPSTREAM)

    comparison = repo.compare(BASE_SHA, HEAD_SHA, comparison_commits_per_page=100)
    assert (comparison.ahead_by, comparison.total_commits) == (260, 260)
    listed = list(comparison.commits)
    assert [c.sha for c in listed] == shas  # oldest first, every page
    assert standin.count("GET", r"/compare/") == 3
    assert [p.sha for p in listed[1].parents] == [shas[0]]
    assert listed[0].parents[0].sha == BASE_SHA
    with _session(_mint(standin, UPSTREAM)) as http:
        unpaged = http.get(f"{standin.url}/repos/{UPSTREAM}/compare/{BASE_SHA}...{HEAD_SHA}")
    assert [c["sha"] for c in unpaged.json()["commits"]] == shas[-250:]  # the newest 250
    assert "Link" not in unpaged.headers


def test_merged_pulls_and_the_commit_to_pull_lookup(standin: GitHubStandIn, client: Github) -> None:
    a, b, merge = "a" * 40, "b" * 40, "c" * 40
    when = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    standin.add_merged_pull(
        UPSTREAM, 11, "Faster decode", [a, b], merged_at=when, merge_commit_sha=merge
    )
    opened = standin.add_pull(UPSTREAM, head="feature", head_sha="d" * 40, number=7)
    repo = client.get_repo(UPSTREAM)

    pull = repo.get_pull(11)
    assert (pull.merged, pull.merged_at, pull.merge_commit_sha) == (True, when, merge)
    assert pull.state == "closed"
    for sha in (a, b, merge):
        found = list(repo.get_commit(sha).get_pulls())
        assert [(p.number, p.merged_at) for p in found] == [(11, when)]
    commit = repo.get_commit(merge)
    assert (commit.commit.message, [p.sha for p in commit.parents]) == ("Faster decode", [b])
    assert [p.number for p in repo.get_commit(opened["head"]["sha"]).get_pulls()] == [7]
    assert repo.get_commit("main").sha == BASE_SHA  # a branch resolves to its head

    standin.add_merged_pull(UPSTREAM, 7, "Now merged", ["d" * 40], merged_at=when)
    assert repo.get_pull(7).merged
    with pytest.raises(GithubException) as refused:
        repo.get_commit("e" * 40)
    assert refused.value.status == 422
    assert standin.count("GET", r"/commits/[0-9a-f]{40}/pulls$") == 4


# --- check runs ---------------------------------------------------------------------------


def test_check_run_create_update_and_history(standin: GitHubStandIn, client: Github) -> None:
    repo = client.get_repo(UPSTREAM)
    run = repo.create_check_run(
        name="rsi / verify",
        head_sha=HEAD_SHA,
        status="in_progress",
        output={"title": "Verifying", "summary": "Queued on H100"},
    )
    assert run.status == "in_progress"
    assert run.html_url.endswith(f"/runs/{run.id}")
    run.edit(
        status="completed",
        conclusion="success",
        output={"title": "Claim holds", "summary": "+32.5% QPS"},
    )
    fetched = repo.get_check_run(run.id)
    assert (fetched.status, fetched.conclusion) == ("completed", "success")
    assert fetched.output.title == "Claim holds"
    assert fetched.completed_at is not None
    history = standin.check_run_updates(run.id)
    assert [h.get("status") for h in history] == ["in_progress", "completed"]


def test_check_run_completed_without_conclusion_is_an_error(
    standin: GitHubStandIn, client: Github
) -> None:
    with pytest.raises(GithubException) as refused:
        client.get_repo(UPSTREAM).create_check_run(
            name="rsi", head_sha=HEAD_SHA, status="completed"
        )
    assert refused.value.status == 422
    assert "needs a conclusion" in _take_errors(standin)[0]


# --- Actions: dispatch, runs, artifacts ----------------------------------------------------


def test_dispatch_returns_run_details(standin: GitHubStandIn, runner_client: Github) -> None:
    workflow = runner_client.get_repo(RUNNER).get_workflow(WORKFLOW)
    run = workflow.create_dispatch("main", INPUTS, throw=True, return_run_details=True)
    assert run.id in standin.runs
    fetched = runner_client.get_repo(RUNNER).get_workflow_run(run.id)
    assert fetched.display_title == "rsi verify v-2c1f0e H100"
    assert fetched.name == "rsi-verify"  # GitHub: the workflow's name; run-name is display_title
    assert (fetched.status, fetched.event, fetched.head_branch) == (
        "queued",
        "workflow_dispatch",
        "main",
    )
    assert standin.dispatches[0]["inputs"] == INPUTS
    (sent,) = standin.matching("POST", r"/dispatches$")
    assert sent.json == {"ref": "main", "inputs": INPUTS, "return_run_details": True}
    assert sent.status == 200


def test_dispatch_without_details_and_legacy_ghes_answer_204(
    standin: GitHubStandIn, runner_client: Github
) -> None:
    workflow = runner_client.get_repo(RUNNER).get_workflow(WORKFLOW)
    assert workflow.create_dispatch("main", INPUTS) is True
    assert standin.matching("POST", r"/dispatches$")[-1].status == 204

    with serve(app_id=APP_ID, legacy_dispatch=True, enterprise=True) as ghes:
        _populate(ghes)
        assert ghes.url.endswith("/api/v3")
        with _session(_mint(ghes, RUNNER)) as http:
            answer = http.post(
                f"{ghes.url}/repos/{RUNNER}/actions/workflows/{WORKFLOW}/dispatches",
                json={"ref": "main", "inputs": INPUTS, "return_run_details": True},
            )
        assert (answer.status_code, answer.content) == (204, b"")
        assert len(ghes.runs) == 1


def test_declared_workflow_inputs_are_enforced(standin: GitHubStandIn) -> None:
    standin.add_workflow(RUNNER, WORKFLOW, inputs=INPUTS, required=["verification_id"])
    with _session(_mint(standin, RUNNER)) as http:
        url = f"{standin.url}/repos/{RUNNER}/actions/workflows/{WORKFLOW}/dispatches"
        extra = http.post(url, json={"ref": "main", "inputs": {**INPUTS, "typo": "x"}})
        missing = http.post(url, json={"ref": "main", "inputs": {"gpu": "H100"}})
        no_ref = http.post(url, json={"ref": "nope", "inputs": INPUTS})
    assert extra.status_code == missing.status_code == no_ref.status_code == 422
    errors = _take_errors(standin)
    assert len(errors) == 2  # a missing ref is state, not a malformed request
    assert "['typo']" in errors[0]
    assert "'verification_id'" in errors[1]


def test_runs_list_filter_paginate_and_cancel(
    standin: GitHubStandIn, runner_client: Github
) -> None:
    standin.add_workflow(RUNNER, WORKFLOW, run_name_template="${{ inputs.gpu }} #${{ inputs.pr }}")
    repo = runner_client.get_repo(RUNNER)
    workflow = repo.get_workflow(WORKFLOW)
    for gpu in ("H100", "H200", "H100"):
        workflow.create_dispatch("main", {**INPUTS, "gpu": gpu})
    today = datetime.now(UTC).date().isoformat()
    runs = repo.get_workflow_runs(event="workflow_dispatch", status="queued", created=f">={today}")
    assert runs.totalCount == 3
    assert [r.display_title for r in runs] == ["H100 #7", "H200 #7", "H100 #7"]
    assert repo.get_workflow_runs(created="<2000-01-01").totalCount == 0

    newest = next(iter(runs))
    assert newest.cancel() is True
    assert repo.get_workflow_run(newest.id).conclusion == "cancelled"
    assert repo.get_workflow_runs(status="cancelled").totalCount == 1
    with _session(_mint(standin, RUNNER)) as http:
        again = http.post(f"{standin.url}/repos/{RUNNER}/actions/runs/{newest.id}/cancel")
        page = http.get(f"{standin.url}/repos/{RUNNER}/actions/runs", params={"per_page": 2})
    assert again.status_code == 409
    assert page.json()["total_count"] == 3
    assert len(page.json()["workflow_runs"]) == 2
    assert "next" in page.links


def test_artifact_zip_redirects_to_blob_storage(
    standin: GitHubStandIn, runner_client: Github
) -> None:
    workflow = runner_client.get_repo(RUNNER).get_workflow(WORKFLOW)
    run = workflow.create_dispatch("main", INPUTS, throw=True, return_run_details=True)
    standin.add_artifact(RUNNER, run.id, "rsi-bundle-v-2c1f0e-h100", b"PK\x03\x04bundle")
    standin.add_artifact(RUNNER, run.id, "logs", b"PK\x03\x04logs")
    artifacts = list(runner_client.get_repo(RUNNER).get_workflow_run(run.id).get_artifacts())
    assert [a.name for a in artifacts] == ["rsi-bundle-v-2c1f0e-h100", "logs"]

    token = _mint(standin, RUNNER)
    with _session(token) as api, requests.Session() as storage:
        listed = api.get(
            f"{standin.url}/repos/{RUNNER}/actions/runs/{run.id}/artifacts",
            params={"name": "logs"},
        ).json()
        assert [a["name"] for a in listed["artifacts"]] == ["logs"]
        url = artifacts[0].archive_download_url
        redirect = api.get(url, allow_redirects=False)
        assert redirect.status_code == 302
        location = redirect.headers["Location"]
        assert location.startswith(f"{standin.origin}/_blobs/")
        assert storage.get(location).content == b"PK\x03\x04bundle"  # no auth: served
        refused = storage.get(location, headers={"Authorization": f"token {token}"})
        assert refused.status_code == 403
        # requests keeps the header on a same-host redirect: the App must not follow it
        # with its API session, exactly what the stand-in is there to catch.
        assert api.get(url).status_code == 403
        standin.clock = lambda: datetime.now(UTC) + timedelta(minutes=2)
        expired = storage.get(location)
        assert expired.status_code == 403
        assert b"expiry" in expired.content
    errors = _take_errors(standin)
    assert len(errors) == 2
    assert all("Authorization header" in e for e in errors)


def test_workflow_run_completed_webhook_from_githubs_example(standin: GitHubStandIn) -> None:
    standin.add_workflow(RUNNER, WORKFLOW, name="rsi verify")
    with _session(_mint(standin, RUNNER)) as http:
        answer = http.post(
            f"{standin.url}/repos/{RUNNER}/actions/workflows/{WORKFLOW}/dispatches",
            json={"ref": "main", "inputs": INPUTS, "return_run_details": True},
        )
    run_id = answer.json()["workflow_run_id"]
    assert standin.start_run(RUNNER, run_id)["workflow_run"]["status"] == "in_progress"
    event = standin.complete_run(RUNNER, run_id, conclusion="failure")
    published = example("workflow_run", "completed")
    assert set(published) <= set(event)  # same shape as GitHub's published example
    assert set(published["workflow_run"]) <= set(event["workflow_run"])
    wr = event["workflow_run"]
    assert event["action"] == "completed"
    assert (wr["id"], wr["status"], wr["conclusion"]) == (run_id, "completed", "failure")
    assert wr["display_title"] == "rsi verify v-2c1f0e H100"
    assert wr["name"] == "rsi verify"
    assert wr["head_sha"] == standin.repo(RUNNER).branches["main"]
    assert wr["html_url"] == answer.json()["html_url"]
    assert event["repository"]["full_name"] == RUNNER
    assert event["installation"]["id"] == standin.repo(RUNNER).installation_id
    text = json.dumps(event)
    assert "Codertocat" not in text
    assert "octo-org" not in text


# --- the App's webhook deliveries ---------------------------------------------------------


def _app_session() -> requests.Session:
    session = _session()
    session.headers["Authorization"] = f"Bearer {Auth.AppAuth(APP_ID, _key_pair()[0]).create_jwt()}"
    return session


def test_hook_deliveries_newest_first_paged_by_cursor(standin: GitHubStandIn) -> None:
    for i in range(250):
        payload = {"action": "created", "installation": {"id": 7}, "n": i}
        standin.record_hook_delivery(f"guid-{i}", "installation", "created", 202, payload)
    standin.record_hook_delivery("guid-0", "installation", "created", 500, redelivery=True)
    assert requests.get(f"{standin.url}/app/hook/deliveries", timeout=10).status_code == 401
    with _app_session() as http:
        pages = [http.get(f"{standin.url}/app/hook/deliveries", params={"per_page": 100})]
        while "next" in pages[-1].links:
            pages.append(http.get(pages[-1].links["next"]["url"]))
        failures = http.get(f"{standin.url}/app/hook/deliveries", params={"status": "failure"})
        bad = http.get(f"{standin.url}/app/hook/deliveries", params={"cursor": "page-2"})
    assert [p.status_code for p in pages] == [200, 200, 200]
    assert [len(p.json()) for p in pages] == [100, 100, 51]
    assert set(pages[0].links) == {"next"}  # a cursor, no page numbers or "last"
    assert re.search(r"[?&]cursor=v1_\d+", pages[0].links["next"]["url"])
    assert "per_page=100" in pages[0].links["next"]["url"]
    listed = [d for p in pages for d in p.json()]
    ids = [d["id"] for d in listed]
    assert ids == sorted(ids, reverse=True)  # newest first
    assert len(set(ids)) == 251  # each attempt once
    newest, oldest = listed[0], listed[-1]
    assert (newest["guid"], newest["redelivery"], newest["status_code"]) == ("guid-0", True, 500)
    assert newest["status"] == "Invalid HTTP Response: 500"
    assert (oldest["guid"], oldest["status"], oldest["installation_id"]) == ("guid-0", "OK", 7)
    assert [d["guid"] for d in failures.json()] == ["guid-0"]
    assert bad.status_code == 400
    errors = _take_errors(standin)
    assert "needs 'Authorization: Bearer <App JWT>'" in errors[0]
    assert "cursor 'page-2'" in errors[1]


def test_redelivery_resends_the_payload_and_lists_a_new_attempt(standin: GitHubStandIn) -> None:
    sent: list[tuple[bytes, dict[str, str]]] = []

    def app_answers(body: bytes, headers: dict[str, str]) -> int:
        sent.append((body, headers))
        return 202

    body = b'{"action": "created", "installation": {"id": 7}}'
    headers = {
        "X-GitHub-Delivery": "g-1",
        "X-GitHub-Event": "installation",
        "X-Hub-Signature-256": sign(body, "s"),
    }
    failed = standin.record_hook_delivery("g-1", "installation", "created", 500, body, headers)
    standin.webhook_target = app_answers
    with _app_session() as http:
        asked = http.post(f"{standin.url}/app/hook/deliveries/{failed.id}/attempts")
        standin.wait_for_redeliveries()
        unknown = http.post(f"{standin.url}/app/hook/deliveries/12345/attempts")
        listed = http.get(f"{standin.url}/app/hook/deliveries").json()
    assert asked.status_code == 202
    assert sent == [(body, headers)]  # the same bytes and headers (the same signature)
    assert unknown.status_code == 404
    again, first = listed
    assert (again["guid"], again["redelivery"], again["status_code"]) == ("g-1", True, 202)
    assert (first["id"], first["redelivery"], first["status_code"]) == (failed.id, False, 500)
    assert again["id"] > first["id"]
    assert [r.operation for r in standin.matching("POST")] == [
        "apps/redeliver-webhook-delivery",
        "apps/redeliver-webhook-delivery",
    ]
    errors = _take_errors(standin)
    assert errors == ["POST /app/hook/deliveries/12345/attempts: no hook delivery 12345"]


# --- strictness -----------------------------------------------------------------------------


def test_unknown_route_invalid_body_and_unserved_route_are_errors(
    standin: GitHubStandIn,
) -> None:
    with _session(_mint(standin, UPSTREAM)) as http:
        unknown = http.get(f"{standin.url}/repos/{UPSTREAM}/nonsense")
        invalid = http.post(
            f"{standin.url}/repos/{UPSTREAM}/check-runs",
            json={"name": "rsi", "head_sha": HEAD_SHA, "status": "bogus"},
        )
        query = http.get(
            f"{standin.url}/repos/{UPSTREAM}/issues/1/comments", params={"per_page": "lots"}
        )
        unserved = http.get(f"{standin.url}/repos/{UPSTREAM}/branches")
        unset_repo = http.get(f"{standin.url}/repos/someone/else")
    assert unknown.status_code == 404
    assert invalid.status_code == 422
    assert "bogus" in invalid.json()["message"]
    assert query.status_code == 422
    assert unserved.status_code == 501
    assert unset_repo.status_code == 404
    errors = _take_errors(standin)
    assert "no such route" in errors[0]
    assert "body.status: 'bogus' is not one of" in errors[1]
    assert "per_page" in errors[2]
    assert "repos/list-branches is not served" in errors[3]
    assert "never set up" in errors[4]
    assert standin.check_runs == {}
    standin.errors.append("POST check-runs: 'bogus'")
    with pytest.raises(AssertionError, match="bogus"):
        standin.assert_clean()
    standin.errors.clear()


def test_fault_injection_then_success(standin: GitHubStandIn, client: Github) -> None:
    standin.add_pull(UPSTREAM, head=f"openrsi-bot:{HEAD_REF}", number=4)
    standin.fail_next("GET", r"/pulls/4$", status=502)
    assert client.get_repo(UPSTREAM).get_pull(4).number == 4  # GithubRetry retried the 502
    attempts = standin.matching("GET", r"/pulls/4$")
    assert [(r.status, r.injected) for r in attempts] == [(502, True), (200, False)]

    standin.fail_next(
        "POST",
        r"/check-runs$",
        status=403,
        headers={"retry-after": "1"},
        body={"message": "You have exceeded a secondary rate limit and have been blocked."},
    )
    started = time.monotonic()
    client.get_repo(UPSTREAM).create_check_run(name="rsi", head_sha=HEAD_SHA)
    assert time.monotonic() - started >= 0.9  # waited as retry-after said
    assert [r.status for r in standin.matching("POST", r"/check-runs$")] == [403, 201]
    assert standin.errors == []

    standin.fail_next("*", r"/never-called", status=429)
    with pytest.raises(AssertionError, match="unused fault"):
        standin.assert_clean()
    standin.clear_faults()


def test_enterprise_prefix() -> None:
    with GitHubStandIn(app_id=APP_ID, enterprise=True) as ghes:
        _populate(ghes)
        ghes.add_comments(UPSTREAM, 2, 35)
        with Github(auth=Auth.Token(_mint(ghes, UPSTREAM)), base_url=ghes.url, **FAST) as gh:
            repo = gh.get_repo(UPSTREAM)
            assert repo.url == f"{ghes.url}/repos/{UPSTREAM}"
            assert repo.html_url == f"{ghes.origin}/{UPSTREAM}"
            assert len(list(repo.get_issue(2).get_comments())) == 35
        with requests.get(f"{ghes.origin}/repos/{UPSTREAM}", timeout=5) as outside:
            assert outside.status_code == 404
        assert "outside the API prefix" in ghes.errors[0]
        assert ghes.response_errors == []
        assert all(r.path.startswith("/repos") or r.path.startswith("/app") for r in ghes.requests)


def test_count_and_matching(standin: GitHubStandIn, client: Github) -> None:
    client.get_repo(UPSTREAM)
    assert standin.count("GET", r"^/repos/sgl-project/sglang-omni$") == 1
    assert standin.count(path_regex=r"/access_tokens$") == 1
    assert standin.count() == len(standin.requests)


def test_stop_releases_the_server_with_a_keep_alive_client_open() -> None:
    gh = GitHubStandIn(app_id=APP_ID).start()
    http = requests.Session()
    try:
        assert http.get(f"{gh.url}/repos/x/y").status_code == 401  # pooled, kept alive
        started = time.monotonic()
        gh.stop()
        gh.stop()
        assert time.monotonic() - started < 2
    finally:
        http.close()


# --- the description and the examples ------------------------------------------------------


def test_openapi_matching_and_validation() -> None:
    api = OpenAPI.load()
    assert api is OpenAPI.load()  # parsed once per process
    assert api.match("GET", "/repos/o/r/issues/comments/5") is not None
    template, operation = api.match("GET", "/repos/o/r/issues/comments/5") or ("", {})
    assert template == "/repos/{owner}/{repo}/issues/comments/{comment_id}"
    assert operation["operationId"] == "issues/get-comment"
    assert api.match("GET", "/repos/o/r/contents/a/b/c.yml") is not None
    assert api.match("GET", "/nope") is None
    assert api.validate("GET", "/search/issues", {}, None, None) == [
        "GET /search/issues: required query parameter 'q' is missing"
    ]
    assert api.validate("POST", "/repos/o/r/actions/runs/1/cancel", {}, b"{}", None) == [
        "POST /repos/o/r/actions/runs/1/cancel: sends a body but the operation takes none"
    ]
    # OpenAPI 3.0 nullable: null is fine where GitHub allows it, and only there.
    pull = api.example("pull-request")
    pull["milestone"] = None
    pull["requested_teams"] = []
    assert api.validate_response("GET", "/repos/o/r/pulls/1", 200, pull) == []
    pull["title"] = None
    assert api.validate_response("GET", "/repos/o/r/pulls/1", 200, pull)
    served = list(iter_routes())
    assert ("POST", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches") in served


def test_webhook_examples_and_signature() -> None:
    events = {e["name"] for e in load_examples()}
    assert {"workflow_run", "issue_comment", "pull_request", "check_run"} <= events
    comment = example("issue_comment", "created")
    assert comment["action"] == "created"
    comment["comment"]["body"] = "changed"
    assert example("issue_comment", "created")["comment"]["body"] != "changed"  # a copy
    with pytest.raises(NoExampleError, match="no webhook examples for 'nope'"):
        example("nope")
    with pytest.raises(NoExampleError, match="with action 'exploded'"):
        example("workflow_run", "exploded")
    body = b'{"zen": "Keep it logically awesome."}'
    expected = hmac.new(b"secret", body, hashlib.sha256).hexdigest()
    assert sign(body, "secret") == f"sha256={expected}"
    assert DEFAULT_RUN_NAME.startswith("rsi verify ${{ inputs.verification_id }}")


# --- the fetcher ----------------------------------------------------------------------------


def _fake_npm(tmp_path: Path, script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    npm = bindir / "npm"
    npm.write_text("#!/bin/sh\n" + script)
    npm.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    cache_dir = tmp_path / "cache"
    monkeypatch.setattr(fetch_github_fixtures, "CACHE_DIR", cache_dir)
    monkeypatch.setattr(fetch_github_fixtures, "STAMP_PATH", cache_dir / "versions.json")
    fixtures = tuple(
        fetch_github_fixtures.Fixture(
            f.package, f.version, f.integrity, f.member, cache_dir / f.dest.name
        )
        for f in fetch_github_fixtures.FIXTURES
    )
    monkeypatch.setattr(fetch_github_fixtures, "FIXTURES", fixtures)


def test_fetcher_exits_non_zero_when_npm_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_npm(tmp_path, 'echo "npm error code E404" >&2\nexit 1\n', monkeypatch)
    assert fetch_github_fixtures.main() == 1
    err = capsys.readouterr().err
    assert "npm pack @octokit/openapi@23.0.2" in err
    assert "E404" in err


def test_fetcher_refuses_a_tarball_that_is_not_the_pinned_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball = tmp_path / "evil.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        data = b"{}"
        info = tarfile.TarInfo("package/generated/api.github.com.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    _fake_npm(tmp_path, f'/bin/cp "{tarball}" ./octokit-openapi-23.0.2.tgz\n', monkeypatch)
    assert fetch_github_fixtures.main() == 1
    assert re.search(r"integrity .* does not match the pin", capsys.readouterr().err)
    assert not (tmp_path / "cache" / "api.github.com.json").exists()


def test_fetcher_skips_work_when_cached() -> None:
    fetch_github_fixtures.ensure()
    assert fetch_github_fixtures.is_current()
    started = time.monotonic()
    fetch_github_fixtures.ensure()
    assert time.monotonic() - started < 0.5


def test_token_scoped_to_named_repositories(standin: GitHubStandIn) -> None:
    standin.add_repo("openrsi-bot/other")
    iid = standin.repo(RUNNER).installation_id
    app_jwt = Auth.AppAuth(APP_ID, _key_pair()[0]).create_jwt()
    with _session() as http:
        minted = http.post(
            f"{standin.url}/app/installations/{iid}/access_tokens",
            headers={"Authorization": f"Bearer {app_jwt}"},
            json={"repositories": ["rsi-runners"], "permissions": {"actions": "write"}},
        )
        assert minted.status_code == 201
        body = minted.json()
        assert body["permissions"] == {"metadata": "read", "actions": "write"}
        assert [r["full_name"] for r in body["repositories"]] == [RUNNER]
        auth = {"Authorization": f"Bearer {body['token']}"}
        assert http.get(f"{standin.url}/repos/{RUNNER}", headers=auth).status_code == 200
        assert http.get(f"{standin.url}/repos/openrsi-bot/other", headers=auth).status_code == 404
        checks = http.post(
            f"{standin.url}/repos/{RUNNER}/check-runs",
            headers=auth,
            json={"name": "rsi", "head_sha": HEAD_SHA},
        )
        assert checks.status_code == 403
    errors = _take_errors(standin)
    assert "scoped to other repositories" in errors[0]
    assert "needs checks:write" in errors[1]


def test_a_stand_in_bug_is_a_500_and_an_error(
    standin: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    standin.add_comments(UPSTREAM, 1, 1)

    def broken(*_: object) -> dict[str, Any]:
        raise RuntimeError("boom")

    monkeypatch.setattr(GitHubStandIn, "_repo_json", broken)
    with _session(_mint(standin, UPSTREAM)) as http:
        assert http.get(f"{standin.url}/repos/{UPSTREAM}").status_code == 500
        bad_since = http.get(
            f"{standin.url}/repos/{UPSTREAM}/issues/1/comments", params={"since": "yesterday"}
        )
        assert bad_since.status_code == 422
    errors = _take_errors(standin)
    assert "stand-in crashed" in errors[0]
    assert "RuntimeError: boom" in errors[0]
    assert "since='yesterday'" in errors[1]
