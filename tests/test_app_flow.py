"""The core loop end to end, against the GitHub stand-in (real HTTP, OpenAPI-checked):
intake → PR and check run → dispatch → `workflow_run` completed with a real bundle zip →
comment, PR-body section, check conclusion and report page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from flask import Flask
from flask.testing import FlaskClient

from bot import services
from bot.handlers import registry
from bot.models import Delivery, Verification
from evidence.render import COMMENT_MARKER, SECTION_END, SECTION_START
from evidence.synth import BASE_SHA, HEAD_SHA
from tests import appkit
from tests.standin import GitHubStandIn


def rt(app: Flask) -> services.Services:
    r: services.Services = app.extensions["rsi"]
    return r


def promote(client: FlaskClient, delivery: str = "d-1", **changes: Any) -> dict[str, Any]:
    body = appkit.dumps(appkit.candidate(**changes))
    resp = client.post(
        "/api/v1/candidates", data=body, headers=appkit.intake_headers(body, delivery)
    )
    assert resp.status_code == 202, resp.get_data(as_text=True)
    answer: dict[str, Any] = resp.get_json()
    return answer


def deliver(client: FlaskClient, event: str, payload: dict[str, Any], delivery: str) -> int:
    body = orjson.dumps(payload)
    resp = client.post(
        "/webhooks/github", data=body, headers=appkit.webhook_headers(body, event, delivery)
    )
    return resp.status_code


def verification(app: Flask, vid: str) -> Verification:
    with rt(app).db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        _ = list(v.jobs)
        return v


def ended_because(app: Flask, vid: str) -> str:
    """The end reason as the PR reads it."""
    from bot import messages

    with rt(app).db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        return messages.end_reason(v)


def finish_run(
    app: Flask,
    client: FlaskClient,
    github: GitHubStandIn,
    tmp_path: Path,
    vid: str,
    delivery: str,
    **spec: Any,
) -> None:
    v = verification(app, vid)
    run_id = v.jobs[0].workflow_run_id
    assert run_id is not None
    github.add_artifact(
        appkit.RUNNER, run_id, f"rsi-bundle-{vid}-h200", appkit.bundle_zip(tmp_path, vid, **spec)
    )
    assert (
        deliver(
            client, "workflow_run", github.start_run(appkit.RUNNER, run_id), delivery + "-start"
        )
        == 202
    )
    assert (
        deliver(client, "workflow_run", github.complete_run(appkit.RUNNER, run_id), delivery) == 202
    )


def test_candidate_to_published_evidence(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    answer = promote(client)
    vid = answer["verification_id"]
    v = verification(app, vid)
    assert v.state == "dispatched"
    assert v.pr_number is not None
    pull = github.pulls[appkit.UPSTREAM.lower()][v.pr_number]
    assert pull.title.startswith("CosyVoice3: idle encoder threads")
    assert SECTION_START in (pull.body or "")
    # One dispatch per GPU, with the contract's inputs, on the runner repo's default branch.
    assert len(github.dispatches) == 1
    dispatch = github.dispatches[0]
    assert dispatch["inputs"]["verification_id"] == vid
    assert dispatch["inputs"]["gpu"] == "h200"
    assert dispatch["inputs"]["head_sha"] == HEAD_SHA
    assert v.check_run_id is not None
    updates = github.check_run_updates(v.check_run_id)
    assert updates[0]["status"] == "queued"
    assert updates[-1]["status"] == "in_progress"

    finish_run(app, client, github, tmp_path, vid, "run-done-1")
    v = verification(app, vid)
    assert v.state == "published", v.reason
    assert v.verdict == "improved"
    final = github.check_run_updates(v.check_run_id)[-1]
    assert final["conclusion"] == "success"
    assert (
        final["output"]["summary"].rstrip().endswith("</details>")
        or "Reproduce" in final["output"]["summary"]
    )
    comments = github.comments_on(appkit.UPSTREAM, v.pr_number)
    assert len(comments) == 1
    assert comments[0].body.startswith(COMMENT_MARKER)
    assert "throughput" in comments[0].body
    body = github.pulls[appkit.UPSTREAM.lower()][v.pr_number].body or ""
    assert body.startswith("Idle encoder threads wait on a condition variable.")
    assert body.count(SECTION_START) == 1
    assert SECTION_END in body

    # The report and its plots are served behind the signed token only.
    url = rt(app).report_url(vid).removeprefix("https://rsi.example.com")
    page = client.get(url)
    assert page.status_code == 200
    assert b"<html" in page.data
    assert client.get(f"/reports/{vid}").status_code == 404
    assert client.get(f"/reports/{vid}?token=forged").status_code == 404
    plot = rt(app).signer.plot_url("https://rsi.example.com", vid, "rounds")
    got = client.get(plot.removeprefix("https://rsi.example.com"))
    assert got.status_code == 200
    assert got.data.startswith(b"\x89PNG")
    assert "rsi.example.com/reports/" + vid + "/plots/rounds.png?token=" in comments[0].body


def test_a_second_verification_edits_the_same_comment(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    first = promote(client, "d-1")["verification_id"]
    finish_run(app, client, github, tmp_path, first, "w-1")
    pr = verification(app, first).pr_number
    github.add_comments(appkit.UPSTREAM, pr, 120, body="a reviewer's remark")  # pages 2+
    second = promote(client, "d-2", pull_request=pr, candidate_id="r15")["verification_id"]
    finish_run(app, client, github, tmp_path / "2", second, "w-2", speedup=0.0, seed=9)
    assert verification(app, second).state == "published"
    ours = [c for c in github.comments_on(appkit.UPSTREAM, pr) if COMMENT_MARKER in c.body]
    assert len(ours) == 1
    assert "NO-CHANGE" in ours[0].body or "no-change" in ours[0].body
    assert len(github.pulls[appkit.UPSTREAM.lower()]) == 1


def test_bad_signatures_are_refused(client: FlaskClient, github: GitHubStandIn) -> None:
    body = appkit.dumps(appkit.candidate())
    headers = appkit.intake_headers(body, "d-x", secret="wrong")
    assert client.post("/api/v1/candidates", data=body, headers=headers).status_code == 401
    headers.pop("X-RSI-Signature-256")
    assert client.post("/api/v1/candidates", data=body, headers=headers).status_code == 401
    hook = appkit.webhook_headers(body, "ping", "g-1", secret="wrong")
    assert client.post("/webhooks/github", data=body, headers=hook).status_code == 401
    assert github.requests == []


def test_malformed_candidate_is_422_and_stores_nothing(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    doc = appkit.candidate()
    del doc["head"]["sha"]
    doc["base_sha"] = "not-a-sha"
    body = appkit.dumps(doc)
    resp = client.post(
        "/api/v1/candidates", data=body, headers=appkit.intake_headers(body, "d-bad")
    )
    assert resp.status_code == 422
    fields = {e["field"] for e in resp.get_json()["errors"]}
    assert fields == {"head.sha", "base_sha"}
    with rt(app).db.session() as s:
        assert s.query(Verification).count() == 0
        assert s.query(Delivery).count() == 0
    assert github.requests == []


def test_repeated_intake_delivery_is_accepted_once(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    a = promote(client, "same")
    b = promote(client, "same")
    assert a == b
    assert len(github.dispatches) == 1


def test_ping_and_redelivery(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    from tests.standin import example

    assert deliver(client, "ping", example("ping"), "p-1") == 200
    payload = example("installation", "created")
    assert deliver(client, "installation", payload, "i-1") == 202
    assert deliver(client, "installation", payload, "i-1") == 202
    with rt(app).db.session() as s:
        assert s.query(Delivery).count() == 1
        assert s.get(Delivery, "i-1").status == "done"  # type: ignore[union-attr]


def test_failed_runner_job_ends_with_a_reason(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    vid = promote(client)["verification_id"]
    v = verification(app, vid)
    run_id = v.jobs[0].workflow_run_id
    assert run_id is not None
    assert (
        deliver(
            client, "workflow_run", github.complete_run(appkit.RUNNER, run_id, "failure"), "f-1"
        )
        == 202
    )
    v = verification(app, vid)
    assert v.state == "failed"
    assert v.end_reason == {
        "code": "run-failed",
        # The stand-in's failed job failed at its verify step (an empty log: no lines).
        "params": {
            "gpu": "H200",
            "conclusion": "failure",
            "url": v.jobs[0].html_url,
            "step": "Verify base and head",
        },
    }
    assert "ended `failure`" in ended_because(app, vid)
    final = github.check_run_updates(v.check_run_id or 0)[-1]
    assert final["conclusion"] == "neutral"
    assert final["output"]["title"].startswith("Verification failed: the H200 runner job ended")
    assert "/rsi reverify" in final["output"]["summary"]
    assert v.pr_number is not None
    [comment] = github.comments_on(appkit.UPSTREAM, v.pr_number)
    assert f"**Latest: `{HEAD_SHA[:10]}` failed**" in comment.body
    assert "ended `failure`" in comment.body
    assert "No evidence has been published on this PR yet." in comment.body


def test_a_bundle_of_another_verification_is_rejected(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    vid = promote(client)["verification_id"]
    run_id = verification(app, vid).jobs[0].workflow_run_id
    assert run_id is not None
    github.add_artifact(
        appkit.RUNNER,
        run_id,
        f"rsi-bundle-{vid}-h200",
        appkit.bundle_zip(tmp_path, "v-someoneelse"),
    )
    deliver(client, "workflow_run", github.complete_run(appkit.RUNNER, run_id), "w-x")
    v = verification(app, vid)
    assert v.state == "failed"
    assert "v-someoneelse" in ended_because(app, vid)


def test_other_workflows_in_the_runner_repo_are_ignored(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    from tests.standin import example

    payload = example("workflow_run", "completed")
    payload["repository"]["full_name"] = appkit.RUNNER
    payload["workflow_run"]["display_title"] = "nightly docs build"
    payload["workflow_run"]["name"] = "docs"
    assert deliver(client, "workflow_run", payload, "o-1") == 202
    assert github.requests == []


def test_one_verification_costs_at_most_twelve_github_requests(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    """Intake to published, once tokens and default branches are cached (the first
    verification of a process also mints two installation tokens and looks up each
    repository once)."""
    first = promote(client, "warm-up")["verification_id"]
    finish_run(app, client, github, tmp_path, first, "warm-up")
    before = len(github.requests)
    github.add_branch(appkit.FORK, "rsi/other-change", HEAD_SHA)
    head = {"repo": appkit.FORK, "ref": "rsi/other-change", "sha": HEAD_SHA}
    second = promote(client, "counted", head=head, candidate_id="counted")["verification_id"]
    finish_run(app, client, github, tmp_path / "2", second, "counted")
    assert verification(app, second).state == "published"
    api = [r for r in github.requests[before:] if not r.path.startswith("/_blobs/")]
    assert len(api) <= 12, "\n".join(f"{r.method} {r.path}" for r in api)


def test_an_existing_pr_from_the_same_branch_is_attached(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    existing = github.add_pull(
        appkit.UPSTREAM,
        head=f"openrsi-bot:{appkit.HEAD_REF}",
        head_sha=HEAD_SHA,
        title="opened by hand",
        body="mine",
    )
    vid = promote(client)["verification_id"]
    v = verification(app, vid)
    assert v.pr_number == existing["number"]
    assert v.state == "dispatched"


def test_app_manifest_asks_for_what_the_flows_need() -> None:
    import yaml

    manifest = yaml.safe_load((Path(__file__).parent.parent / "app.yml").read_text())
    assert manifest["default_permissions"] == {
        "actions": "write",
        "checks": "write",
        "contents": "read",
        "issues": "write",
        "metadata": "read",
        "pull_requests": "write",
    }
    assert set(manifest["default_events"]) == {
        "issue_comment",
        "pull_request",
        "pull_request_review",
        "push",
        "workflow_run",
        "workflow_job",
        "check_run",
        "installation",
        "installation_repositories",
    }
    # Every event the App asks for has a handler in the one table, and no handler waits
    # for an event the App never receives.
    assert {event for event, _ in registry.TABLE} == set(manifest["default_events"])


@pytest.mark.parametrize(
    ("conclusion", "state"),
    [("cancelled", "cancelled"), ("timed_out", "timed-out"), ("startup_failure", "failed")],
)
def test_runner_conclusions_end_the_verification(
    app: Flask, client: FlaskClient, github: GitHubStandIn, conclusion: str, state: str
) -> None:
    vid = promote(client)["verification_id"]
    run_id = verification(app, vid).jobs[0].workflow_run_id
    assert run_id is not None
    payload = github.complete_run(appkit.RUNNER, run_id, conclusion)
    assert deliver(client, "workflow_run", payload, f"c-{conclusion}") == 202
    v = verification(app, vid)
    assert v.state == state
    words = {
        "cancelled": "runner job was cancelled",
        "timed_out": "hit the workflow's time limit",
        "startup_failure": "ended `startup_failure`",
    }
    assert words[conclusion] in ended_because(app, vid)


def test_main_measurements_become_baseline_history(
    app: Flask, client: FlaskClient, github: GitHubStandIn, tmp_path: Path
) -> None:
    from bot.models import BaselineMeasurement

    vid = promote(client)["verification_id"]
    finish_run(app, client, github, tmp_path, vid, "h-1")
    with rt(app).db.session() as s:
        rows = s.query(BaselineMeasurement).filter_by(verification_id=vid).all()
        assert {r.metric for r in rows} >= {"throughput_qps", "latency_p95_s"}
        assert all(r.sha == BASE_SHA and r.gpu == "H200" for r in rows)
        assert len([r for r in rows if r.metric == "throughput_qps"]) == 6  # 3 rounds × 2 modes


def test_the_repositorys_design_and_control_travel_in_the_dispatch(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    """`.github/rsi.yml`'s `design` and `control` become the dispatch's inputs of those
    names, which the runner workflow declares (and GitHub's OpenAPI description takes:
    at most 25 inputs)."""
    github.set_file(appkit.UPSTREAM, ".github/rsi.yml", "design: alternate\ncontrol: aa\n")
    vid = promote(client)["verification_id"]
    assert verification(app, vid).state == "dispatched"
    (dispatch,) = github.dispatches
    assert (dispatch["inputs"]["design"], dispatch["inputs"]["control"]) == ("alternate", "aa")
    assert len(dispatch["inputs"]) <= 25
    assert github.errors == []


def test_a_runner_workflow_older_than_design_and_control_takes_a_default_dispatch(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    """At the defaults (design auto, control none) neither input is sent: a runner
    repository whose workflow does not declare them yet (GitHub refuses undeclared inputs)
    still runs the verification."""
    import yaml

    declared = yaml.safe_load(appkit.RUNNER_WORKFLOW.read_text())[True]["workflow_dispatch"]
    old = [n for n in declared["inputs"] if n not in ("design", "control")]
    required = [n for n in old if declared["inputs"][n].get("required")]
    github.add_workflow(appkit.RUNNER, appkit.RUNNER_WORKFLOW.name, inputs=old, required=required)
    vid = promote(client)["verification_id"]
    assert verification(app, vid).state == "dispatched"
    (dispatch,) = github.dispatches
    assert not {"design", "control"} & set(dispatch["inputs"])
