"""What the App says on GitHub over a verification's life, in both shapes of the App
(embedded default; PostgreSQL + Redis with a real consumer): its evidence comment is its
own, every text fits GitHub's limits, `.github/rsi.yml` decides what runs, whoever asked
is told when it ends, other merged PRs of the range are named, and a verification costs
a bounded number of requests."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from bot.github.api import CHECK_TEXT_LIMIT, COMMENT_LIMIT, fit
from bot.models import Delivery, Verification
from evidence.render import COMMENT_MARKER
from evidence.synth import BASE_SHA, HEAD_SHA
from tests import appkit
from tests.standin import GitHubStandIn
from tests.standin.state import Comment
from tests.test_reviews import command, push, review
from tests.worlds import SHAPES, World, world

NEW_SHA = "5" * 40
LATER_SHA = "6" * 40
MERGED_SHA = "77" * 20  # the commit pull request 77 left on main
WRITER = "maintainer-mia"
CONFIG = "gpus: [H200]\nrounds: 4\nmodes: [streaming]\n"
T0 = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)


@pytest.fixture(params=SHAPES)
def w(request: pytest.FixtureRequest, tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world(request.param, tmp_path, github) as x:
        yield x


# ----------------------------------------------------------------------- helpers


def evidence_comments(w: World, number: int) -> list[Comment]:
    """Comments carrying the marker that the App wrote."""
    return [
        c
        for c in w.github.comments_on(appkit.UPSTREAM, number)
        if COMMENT_MARKER in c.body and c.via_app
    ]


def mentions(body: str, user: str | None = None) -> bool:
    """`body` @-mentions `user` (anyone when None) outside code spans and fenced blocks,
    where GitHub would ping them."""
    text = re.sub(r"```.*?```", "", body, flags=re.S)
    text = re.sub(r"(`+).*?\1", "", text)
    who = re.escape(user) if user else r"[A-Za-z0-9][A-Za-z0-9-]*"
    return re.search(rf"(?<![\w/`])@{who}(?![\w-])", text, flags=re.I) is not None


def comments_posted(w: World, since: int) -> list[str]:
    """Bodies of the comments the App created in requests `since` onwards."""
    return [
        str(r.json["body"])
        for r in w.github.requests[since:]
        if r.method == "POST" and re.search(r"/issues/\d+/comments$", r.path) and r.json
    ]


def texts_over_limit(github: GitHubStandIn) -> list[str]:
    """Every text the App sent that GitHub would refuse as too long."""
    over = []
    for r in github.requests:
        if r.method not in ("POST", "PATCH") or not isinstance(r.json, dict):
            continue
        texts: list[tuple[str, Any, int]] = []
        if re.search(r"/issues/(\d+/comments|comments/\d+)$", r.path) or re.search(
            r"/pulls(/\d+)?$", r.path
        ):
            texts.append(("body", r.json.get("body"), COMMENT_LIMIT))
        if re.search(r"/check-runs(/\d+)?$", r.path):
            output = r.json.get("output") or {}
            for key in ("summary", "text"):
                texts.append((f"output.{key}", output.get(key), CHECK_TEXT_LIMIT))
        for name, text, limit in texts:
            if isinstance(text, str) and len(text) > limit:
                over.append(f"{r.method} {r.path}: {name} has {len(text)} > {limit} characters")
    return over


def with_manifest(data: bytes, **changes: Any) -> bytes:
    """The bundle zip with its root manifest.json changed."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        assert "manifest.json" in src.namelist()
        for item in src.infolist():
            content = src.read(item.filename)
            if item.filename == "manifest.json":
                content = orjson.dumps({**orjson.loads(content), **changes})
            dst.writestr(item, content)
    return out.getvalue()


def say(w: World, number: int, body: str, delivery: str, user: str = WRITER) -> None:
    assert w.deliver("issue_comment", command(w.github, number, body, user), delivery) == 202
    w.settle()


def published(w: World, **changes: Any) -> Verification:
    vid = w.promote(**changes)
    w.finish(vid)
    v = w.verification(vid)
    assert v.state == "published", w.reason(vid)
    assert v.pr_number is not None
    return v


# ----------------------------------------------------------------------- (f)


@pytest.mark.parametrize("attach", ["pull_request", "same-branch"])
def test_a_strangers_comment_with_the_marker_is_never_edited(w: World, attach: str) -> None:
    number = _persons_pull(w)
    copied = f"{COMMENT_MARKER}\nI copied the bot's marker into my own comment."
    [theirs] = w.github.add_comments(appkit.UPSTREAM, number, 1, body=copied, user="mallory")
    before = w.github.comments[theirs].updated_at

    vid = w.promote(pull_request=number if attach == "pull_request" else None)
    assert w.verification(vid).pr_number == number
    w.finish(vid)
    assert w.verification(vid).state == "published", w.reason(vid)

    stranger = w.github.comments[theirs]
    assert (stranger.body, stranger.updated_at) == (copied, before)
    assert w.github.count("PATCH", rf"/issues/comments/{theirs}$") == 0
    [ours] = evidence_comments(w, number)
    assert ours.id != theirs
    assert "throughput" in ours.body
    # The App looked for a comment of its own before writing one.
    assert w.github.count("GET", rf"/issues/{number}/comments$") >= 1
    w.github.assert_clean()


def _persons_pull(w: World) -> int:
    pull = w.github.add_pull(
        appkit.UPSTREAM,
        head=f"openrsi-bot:{appkit.HEAD_REF}",
        head_sha=HEAD_SHA,
        title="opened by hand",
        body="Opened by a person.",
        user="alice",
    )
    return int(pull["number"])


def test_the_apps_earlier_comment_on_an_attached_pr_is_found_and_edited(w: World) -> None:
    """The App's own comment from before (its database lost, or another process) is
    the one edited; the stranger's copy of the marker before it is left alone."""
    number = _persons_pull(w)
    copied = f"{COMMENT_MARKER}\nquoting the bot"
    [theirs] = w.github.add_comments(appkit.UPSTREAM, number, 1, body=copied, user="mallory")
    earlier = w.github.add_app_comment(appkit.UPSTREAM, number, f"{COMMENT_MARKER}\nold words")
    w.github.add_comments(appkit.UPSTREAM, number, 40, body="remark {i}")  # a second page

    vid = w.promote(pull_request=number)
    w.finish(vid)
    assert w.verification(vid).state == "published", w.reason(vid)

    [ours] = evidence_comments(w, number)
    assert ours.id == earlier
    assert "throughput" in ours.body
    assert "old words" not in ours.body
    assert w.github.comments[theirs].body == copied
    assert w.github.count("POST", rf"/issues/{number}/comments$") == 0
    w.github.assert_clean()


@pytest.mark.parametrize("opened_by", ["app", "person"])
def test_a_deleted_evidence_comment_is_written_again(w: World, opened_by: str) -> None:
    first = published(w, pull_request=_persons_pull(w) if opened_by == "person" else None)
    number = first.pr_number or 0
    [gone] = evidence_comments(w, number)
    w.github.delete_comment(gone.id)

    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    say(w, number, "/rsi reverify", "c-reverify")
    second = w.latest(number)
    assert second.id != first.id
    w.finish(second.id)

    v = w.verification(second.id)
    assert v.state == "published", w.reason(second.id)
    [again] = evidence_comments(w, number)
    assert again.id != gone.id
    assert "throughput" in again.body
    assert f"**[`{HEAD_SHA[:10]}`](" in again.body  # the ledger names the current commit
    assert w.github.count("PATCH", rf"/issues/comments/{gone.id}$") == 0  # 404 on its GET
    w.github.assert_clean()


# ----------------------------------------------------------------------- (g)


def test_fit_cuts_to_the_limit_with_a_notice_and_a_link() -> None:
    assert fit("short", 10) == "short"
    exact = "x" * 100
    assert fit(exact, 100) is exact
    link = "https://rsi.example.com/reports/v-1?token=t"
    for limit in (100, 1_000, COMMENT_LIMIT, CHECK_TEXT_LIMIT):
        text = "y" * (limit + 1)
        cut = fit(text, limit, link)
        assert len(cut) == limit
        kept, notice, _ = cut.partition("\n\n… cut to fit GitHub's limit")
        assert notice  # the start kept, the notice last
        assert kept == text[: len(kept)]
        assert cut.rstrip().endswith(f"[the full text]({link}).")
        plain = fit(text, limit)
        assert len(plain) == limit
        assert "cut to fit GitHub's limit" in plain
        assert "](" not in plain
    # Room for no notice at all: the text is cut bare, never longer than the limit.
    assert fit("z" * 50, 10, link) == "z" * 10
    assert fit("z" * 50, 0) == ""


def test_a_bundle_with_a_70kb_field_ends_failed_within_githubs_limits(w: World) -> None:
    vid = w.promote()
    huge = "v-" + "9" * 70_000
    data = with_manifest(appkit.bundle_zip(w.tmp / "bundle", vid), verification_id=huge)
    w.github.add_artifact(appkit.RUNNER, w.run_id(vid, "H200"), f"rsi-bundle-{vid}-h200", data)
    w.complete(vid, "H200")
    w.settle()

    v = w.verification(vid)
    assert v.state == "failed", v.state
    assert (v.end_reason or {}).get("code") == "bundle-rejected", v.end_reason
    assert "verification_id" in w.reason(vid)
    run = w.github.check_runs[v.check_run_id or 0]
    assert (run.status, run.conclusion) == ("completed", "neutral")
    assert texts_over_limit(w.github) == []
    assert all(r.status != 422 for r in w.github.requests)
    w.github.assert_clean()


def test_long_candidate_texts_fit_githubs_limits(w: World) -> None:
    v = published(w, summary="s" * 70_000, caveats=["c" * 70_000])
    number = v.pr_number or 0
    assert len(w.github.pulls[appkit.UPSTREAM.lower()][number].body or "") <= COMMENT_LIMIT
    [ours] = evidence_comments(w, number)
    assert len(ours.body) <= COMMENT_LIMIT
    run = w.github.check_runs[v.check_run_id or 0]
    assert run.status == "completed"
    assert texts_over_limit(w.github) == []
    w.github.assert_clean()


# ----------------------------------------------------------------------- (h)


def test_repo_config_decides_what_intake_runs(w: World) -> None:
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG)
    vid = w.promote(gpus=[])
    [d] = w.github.dispatches
    assert d["inputs"]["verification_id"] == vid
    assert (d["inputs"]["gpu"], d["inputs"]["rounds"], d["inputs"]["modes"]) == (
        "h200",
        "4",
        "streaming",
    )
    v = w.verification(vid)
    assert (v.gpus, v.rounds, v.modes) == (["H200"], 4, ["streaming"])

    with w.svc.db.session() as s:
        counts = (s.query(Verification).count(), s.query(Delivery).count())
    on_h100 = {"metric": "throughput_qps", "mode": "streaming", "gpu": "H100", "delta_pct": 12.0}
    body = appkit.dumps(appkit.candidate(candidate_id="on-h100", gpus=["H100"], claim=on_h100))
    resp = w.client.post(
        "/api/v1/candidates", data=body, headers=appkit.intake_headers(body, "d-h100")
    )
    assert resp.status_code == 422, resp.get_data(as_text=True)
    errors = resp.get_json()["errors"]
    assert [e["field"] for e in errors] == ["gpus"]
    assert "H100" in errors[0]["message"]
    assert "claim" not in errors[0]["message"]  # refused by the configuration, not the claim
    with w.svc.db.session() as s:
        assert (s.query(Verification).count(), s.query(Delivery).count()) == counts
    w.settle()
    assert len(w.github.dispatches) == 1
    w.github.assert_clean()


def test_repo_config_applies_to_pushes_and_commands(w: World) -> None:
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG)
    first = w.promote()
    number = w.verification(first).pr_number or 0
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")

    def last_dispatch(head: str) -> tuple[str, str, str]:
        inputs = w.github.dispatches[-1]["inputs"]
        assert inputs["head_sha"] == head
        return inputs["gpu"], inputs["rounds"], inputs["modes"]

    # A push by a trusted pusher.
    assert w.deliver("pull_request", push(w.github, number, NEW_SHA, "openrsi-bot"), "p-1") == 202
    w.settle()
    assert len(w.github.dispatches) == 2
    assert last_dispatch(NEW_SHA) == ("h200", "4", "streaming")
    say(w, number, "/rsi cancel", "c-cancel-1")

    # `/rsi reverify` as it is.
    say(w, number, "/rsi reverify", "c-reverify")
    assert len(w.github.dispatches) == 3
    assert last_dispatch(NEW_SHA) == ("h200", "4", "streaming")
    say(w, number, "/rsi cancel", "c-cancel-2")

    # Fewer rounds than an interval needs: refused, nothing dispatched.
    since = len(w.github.requests)
    say(w, number, "/rsi reverify rounds=2", "c-rounds-2")
    assert len(w.github.dispatches) == 3
    replies = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert len(replies) == 1, replies
    assert "at least 3 rounds" in replies[0]

    say(w, number, "/rsi reverify rounds=4", "c-rounds-4")
    assert len(w.github.dispatches) == 4
    assert last_dispatch(NEW_SHA) == ("h200", "4", "streaming")
    assert w.latest(number).rounds == 4
    w.github.assert_clean()


def test_rounds_auto_dispatches_the_cap_and_budget_and_says_so(w: World) -> None:
    """`rounds: auto` (the default): the dispatch carries the cap, the GPU minutes and the
    practical threshold in the one `rounds` input, and every message says rounds until
    decided, not a count."""
    w.github.set_file(
        appkit.UPSTREAM,
        ".github/rsi.yml",
        "gpus: [H200]\nmodes: [streaming]\nbudget: {max_rounds: 8, gpu_minutes: 90}\n"
        "thresholds: {practical_pct: 5}\n",
    )
    first = w.promote()
    assert w.github.dispatches[-1]["inputs"]["rounds"] == "auto:8:90:5"
    v = w.verification(first)
    assert (v.rounds, v.adaptive, v.gpu_budget_minutes) == (8, True, 90.0)
    number = v.pr_number or 0
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    say(w, number, "/rsi cancel", "c-cancel-auto")

    since = len(w.github.requests)
    say(w, number, "/rsi reverify rounds=4", "c-rounds-fixed")
    assert w.github.dispatches[-1]["inputs"]["rounds"] == "4"
    assert (w.latest(number).rounds, w.latest(number).adaptive) == (4, False)
    [reply] = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert "4 rounds a side" in reply

    since = len(w.github.requests)
    say(w, number, "/rsi reverify rounds=auto", "c-rounds-auto")
    assert w.github.dispatches[-1]["inputs"]["rounds"] == "auto:8:90:5"
    assert (w.latest(number).rounds, w.latest(number).adaptive) == (8, True)
    [reply] = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert "rounds until decided (at most 8 a side, 90 GPU minutes per GPU kind)" in reply
    assert "8 rounds a side" not in reply
    w.github.assert_clean()


# ----------------------------------------------------------------------- (i)


@pytest.mark.parametrize("outcome", ["published", "failed"])
def test_whoever_asked_is_told_once_when_it_ends(w: World, outcome: str) -> None:
    first = published(w)
    number = first.pr_number or 0
    # Nobody asked for the intake verification: nobody is told.
    [only] = w.github.comments_on(appkit.UPSTREAM, number)
    assert COMMENT_MARKER in only.body
    assert not any(mentions(b) for b in comments_posted(w, 0))

    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    say(w, number, "/rsi reverify", "c-reverify")
    second = w.latest(number)
    assert second.id != first.id
    assert second.requested_by == WRITER
    since = len(w.github.requests)
    if outcome == "published":
        w.finish(second.id)
    else:
        w.complete(second.id, "H200", "failure")
        w.settle()
    v = w.verification(second.id)
    assert v.state == outcome, w.reason(second.id)

    told = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert len(told) == 1, told
    verdict = "improved" if outcome == "published" else "failed"
    assert f"**{verdict}**" in told[0]
    assert w.svc.report_url(second.id) in told[0]
    w.github.assert_clean()


def test_asking_for_what_already_runs_is_still_told_when_it_ends(w: World) -> None:
    """A writer's `/rsi reverify` while the PR's head is already being verified (the
    intake's own run) gets that verification: the writer asked, so the writer is told."""
    vid = w.promote()
    number = w.verification(vid).pr_number or 0
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    say(w, number, "/rsi reverify", "c-reverify")
    assert len(w.github.dispatches) == 1  # the running one is the answer
    since = len(w.github.requests)
    w.finish(w.latest(number).id)
    assert w.latest(number).state == "published"
    told = [b for b in comments_posted(w, since) if mentions(b, WRITER)]
    assert len(told) == 1, told


def test_a_review_round_ends_with_the_first_push_after_it(w: World) -> None:
    vid = w.promote()
    number = w.verification(vid).pr_number or 0
    assert w.deliver("pull_request_review", review(number, "changes_requested"), "r-1") == 202
    w.settle()
    assert w.deliver("pull_request", push(w.github, number, NEW_SHA, "openrsi-bot"), "p-a") == 202
    w.settle()
    a = w.latest(number)
    assert a.head_sha == NEW_SHA
    assert a.trigger == "push-after-review:openrsi-bot"
    assert a.review_round
    assert w.deliver("pull_request", push(w.github, number, LATER_SHA, "openrsi-bot"), "p-b") == 202
    w.settle()
    b = w.latest(number)
    assert b.head_sha == LATER_SHA
    assert b.trigger == "push:openrsi-bot"
    assert not b.review_round
    assert w.verification(a.id).state == "superseded"
    # Nobody asked for either: no reply at all.
    assert not any(b.lstrip().startswith("@") for b in comments_posted(w, 0))
    w.github.assert_clean()


# ----------------------------------------------------------------------- (j)


def _merged_pr_in_range(github: GitHubStandIn) -> None:
    github.add_merged_pull(appkit.UPSTREAM, 77, "Speed up the vocoder", [MERGED_SHA], merged_at=T0)
    github.set_compare(appkit.UPSTREAM, BASE_SHA, HEAD_SHA, commits=[MERGED_SHA, HEAD_SHA])


def test_other_prs_merged_in_the_range_are_named(w: World) -> None:
    _merged_pr_in_range(w.github)
    v = published(w)
    [ours] = evidence_comments(w, v.pr_number or 0)
    assert "#77" in ours.body
    assert "Speed up the vocoder" in ours.body
    assert v.attribution == [
        {
            "number": 77,
            "title": "Speed up the vocoder",
            "url": f"https://github.com/{appkit.UPSTREAM}/pull/77",
            "merged_at": "2026-01-05T09:30:00Z",
        }
    ]
    assert w.github.count("GET", rf"/compare/{BASE_SHA}\.\.\.{HEAD_SHA}$") == 1
    w.github.assert_clean()


def test_one_verification_with_attribution_costs_at_most_twelve_requests(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    """Intake to published once tokens and default branches are cached, with the
    attribution's compare (one commit) and its commit-to-pull lookup counted in."""
    github.add_merged_pull(appkit.UPSTREAM, 77, "Speed up the vocoder", [MERGED_SHA], merged_at=T0)
    github.set_compare(appkit.UPSTREAM, BASE_SHA, HEAD_SHA, commits=[MERGED_SHA])
    with world("embedded", tmp_path, github) as x:
        x.finish(x.promote("warm-up"))
        before = len(github.requests)
        github.add_branch(appkit.FORK, "rsi/other-change", HEAD_SHA)
        head = {"repo": appkit.FORK, "ref": "rsi/other-change", "sha": HEAD_SHA}
        vid = x.promote("counted", head=head, candidate_id="counted")
        x.finish(vid)
        v = x.verification(vid)
        assert v.state == "published", x.reason(vid)
        assert [a["number"] for a in v.attribution or []] == [77]
    api = [r for r in github.requests[before:] if not r.path.startswith("/_blobs/")]
    listing = "\n".join(f"{r.method} {r.path}" for r in api)
    assert sum(1 for r in api if "/compare/" in r.path) == 1, listing
    assert sum(1 for r in api if r.path.endswith(f"/commits/{MERGED_SHA}/pulls")) == 1, listing
    assert len(api) <= 12, listing
    github.assert_clean()
