"""The less travelled paths of a verification's life, on the embedded default: bundles
from the artifact store, bundles that are missing or unreadable, a malformed
`.github/rsi.yml`, the repository's GPU budget, runs found by the reconciler, and
`/rsi status` once it has ended."""

from __future__ import annotations

import datetime as dt
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bot import messages
from bot.models import RunnerJob, Verification
from bot.repo_config import RepoConfig
from bot.verification import effects as E
from bot.verification import reasons as R
from bot.verification.reasons import Reason
from evidence.render import COMMENT_MARKER
from evidence.synth import BASE_SHA, HEAD_SHA
from tests import appkit
from tests.standin import GitHubStandIn, serve
from tests.test_reviews import command
from tests.worlds import World, world


@pytest.fixture
def w(tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world("embedded", tmp_path, github) as x:
        yield x


def _check(w: World, vid: str) -> dict[str, object]:
    v = w.verification(vid)
    update: dict[str, object] = w.github.check_run_updates(v.check_run_id or 0)[-1]
    return update


def test_a_bundle_put_in_the_artifact_store_is_taken_in(w: World) -> None:
    """Runners may upload to S3 (or the App's folder) instead of an Actions artifact."""
    vid = w.promote()
    w.svc.store.put_bytes(f"{vid}/h200.zip", appkit.bundle_zip(w.tmp / "b", vid))
    w.complete(vid, "H200")
    w.settle()
    assert w.verification(vid).state == "published", w.reason(vid)


def test_no_bundle_anywhere_ends_failed(w: World) -> None:
    vid = w.promote()
    w.complete(vid, "H200")
    w.settle()
    v = w.verification(vid)
    assert v.state == "failed"
    assert f"left no bundle (`rsi-bundle-{vid}-h200`)" in w.reason(vid)


def _manifest_only(vid: str) -> bytes:
    manifest = {
        "verification_id": vid,
        "repo": appkit.UPSTREAM,
        "base": {"sha": BASE_SHA},
        "head": {"sha": HEAD_SHA},
        "gpu": "NVIDIA H200",
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("manifest.json", orjson.dumps(manifest))
    return buf.getvalue()


def test_a_bundle_the_engine_refuses_ends_failed_with_its_words(w: World) -> None:
    vid = w.promote()
    w.github.add_artifact(
        appkit.RUNNER, w.run_id(vid, "H200"), f"rsi-bundle-{vid}-h200", _manifest_only(vid)
    )
    w.complete(vid, "H200")
    w.settle()
    v = w.verification(vid)
    assert v.state == "failed"
    assert "the bundles could not be read" in w.reason(vid)
    assert _check(w, vid)["conclusion"] == "failure"
    assert w.svc.store.exists(f"bundles/{vid}/h200.zip")  # kept for whoever looks


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"not a zip", "not a readable bundle: rsi-bundle-v-"),
        (b"not a zip", "corrupt zip archive"),
        (b"PK\x05\x06" + b"\0" * 18, "no manifest.json at the bundle's root"),
    ],
)
def test_an_unreadable_artifact_is_rejected(w: World, data: bytes, problem: str) -> None:
    vid = w.promote()
    w.github.add_artifact(appkit.RUNNER, w.run_id(vid, "H200"), f"rsi-bundle-{vid}-h200", data)
    w.complete(vid, "H200")
    w.settle()
    assert w.verification(vid).state == "failed"
    assert problem in w.reason(vid)


def test_a_bundle_in_a_folder_is_read_and_checked(w: World) -> None:
    """Zips made by `shutil.make_archive` of a folder have one top folder."""
    vid = w.promote()
    inner = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(appkit.bundle_zip(w.tmp / "b", vid, "H100"))) as src,
        zipfile.ZipFile(inner, "w") as dst,
    ):
        for name in src.namelist():
            dst.writestr(f"bundle/{name}", src.read(name))
    w.github.add_artifact(
        appkit.RUNNER, w.run_id(vid, "H200"), f"rsi-bundle-{vid}-h200", inner.getvalue()
    )
    w.complete(vid, "H200")
    w.settle()
    assert "it is for GPU `H100`, expected `H200`" in w.reason(vid)


def test_a_malformed_config_is_said_once_and_the_defaults_apply(w: World) -> None:
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", "rounds: [oops\n")
    vid = w.promote()
    v = w.verification(vid)
    assert v.state == "dispatched"
    # the defaults: rounds until decided, at most the default cap a side
    assert (v.rounds, v.adaptive) == (RepoConfig().budget.max_rounds, True)
    notes = [
        c.body
        for c in w.github.comments_on(appkit.UPSTREAM, v.pr_number or 0)
        if "is not valid" in c.body
    ]
    assert len(notes) == 1


def test_the_gpu_budget_holds_a_verification_until_another_ends(w: World) -> None:
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", "budget: {max_running: 1}\n")
    w.queue_may_wait = True
    first = w.promote("one")
    w.github.add_branch(appkit.FORK, "rsi/other", HEAD_SHA)
    other = {"repo": appkit.FORK, "ref": "rsi/other", "sha": HEAD_SHA}
    second = w.promote("two", head=other, candidate_id="other-candidate")
    assert w.verification(first).state == "dispatched"
    assert w.verification(second).state == "queued"
    assert len(w.github.dispatches) == 1
    w.finish(first)
    w.reconcile()
    assert w.verification(second).state == "dispatched"
    assert len(w.github.dispatches) == 2


def test_status_after_the_end(w: World) -> None:
    vid = w.promote()
    w.finish(vid)
    number = w.verification(vid).pr_number or 0
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    w.deliver("issue_comment", command(w.github, number, "/rsi status", "mia"), "s-1")
    w.settle()
    [reply] = [
        c.body for c in w.github.comments_on(appkit.UPSTREAM, number) if c.body.startswith("@mia")
    ]
    assert "**published** — improved:" in reply
    # its bundle recorded no GPU minutes (an older runner's): nothing to estimate from
    assert "GPU time not estimated yet: no earlier run of `cosyvoice3`" in reply


def test_nothing_to_cancel_and_nothing_to_repeat(w: World) -> None:
    vid = w.promote()
    w.finish(vid)
    number = w.verification(vid).pr_number or 0
    w.github.set_permission(appkit.UPSTREAM, "mia", "write")
    w.deliver("issue_comment", command(w.github, number, "/rsi cancel", "mia"), "c-1")
    w.settle()
    bodies = [c.body for c in w.github.comments_on(appkit.UPSTREAM, number)]
    assert "@mia nothing is running on this PR." in bodies
    assert not any(COMMENT_MARKER in b and "cancelled" in b for b in bodies)


def test_the_reconciler_finds_a_run_whose_events_were_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older GitHub Enterprise returns no run id and its `requested` event was lost: the
    reconciler finds the run by its name."""
    with serve(app_id=appkit.APP_ID, legacy_dispatch=True, enterprise=True) as gh:
        appkit.populate(gh)
        with world("embedded", tmp_path, gh) as x:
            monkeypatch.setattr(E, "find_run", lambda *a, **k: None)  # not listed yet
            vid = x.promote()
            assert x.verification(vid).jobs[0].workflow_run_id is None
            monkeypatch.undo()
            with x.svc.db.session() as s:
                job = s.query(RunnerJob).filter_by(verification_id=vid).one()
                job.dispatched_at = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=2)
            x.reconcile()
            assert x.verification(vid).jobs[0].workflow_run_id is not None
            x.finish(vid)
            assert x.verification(vid).state == "published"


def test_a_cosmetic_step_that_keeps_failing_does_not_end_the_verification(w: World) -> None:
    """The check run's "in progress" update fails every time: it is given up on its own,
    and the measurement goes on to publish."""
    w.github.fail_next("PATCH", r"/check-runs/\d+$", status=422, times=3)
    vid = w.promote()
    assert w.verification(vid).state == "dispatched"
    w.finish(vid)
    assert w.verification(vid).state == "published"


IDENT = {"id": "v-0123456789", "repo": appkit.UPSTREAM, "base": BASE_SHA, "head": HEAD_SHA}


def _zip(tmp: Path, manifest: object, *names: str) -> Path:
    path = tmp / "rsi-bundle-v-0123456789-h200.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name in names or ("manifest.json",):
            z.writestr(name, orjson.dumps(manifest))
    return path


def rejected(problem: dict[str, str]) -> str:
    """The reason a rejected bundle is given, as the App words it."""
    return messages.reason(Reason(R.BUNDLE_REJECTED, {"gpu": "H200", **problem}))


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        ([1, 2], "rsi-bundle-v-0123456789-h200.zip/manifest.json: not a JSON object"),
        ({"verification_id": "v-x"}, "verification_id `v-x`, expected `v-0123456789`"),
        (
            {"verification_id": IDENT["id"], "repo": appkit.UPSTREAM, "base": "main"},
            "its base is not recorded",
        ),
        (
            {
                "verification_id": IDENT["id"],
                "repo": appkit.UPSTREAM,
                "base": {"sha": BASE_SHA},
                "head": {"sha": "f" * 40},
            },
            "its head is",
        ),
    ],
)
def test_a_bundle_of_something_else_is_named(
    tmp_path: Path, manifest: object, problem: str
) -> None:
    found = E.wrong_bundle(IDENT, "H200", _zip(tmp_path, manifest))
    assert found is not None
    assert problem in rejected(found)


def test_a_nested_manifest_is_not_the_one_read(tmp_path: Path) -> None:
    """Only the root manifest (or the one folder's) counts, and a bundle has only that
    one: a second could be what another reader takes for it."""
    good = {
        "verification_id": IDENT["id"],
        "repo": appkit.UPSTREAM,
        "base": {"sha": BASE_SHA},
        "head": {"sha": HEAD_SHA},
        "gpu": "H200",
    }
    assert E.wrong_bundle(IDENT, "H200", _zip(tmp_path, good)) is None
    nested = E.wrong_bundle(IDENT, "H200", _zip(tmp_path, good, "a/b/manifest.json"))
    assert "no manifest.json at the bundle's root" in rejected(nested or {})
    two = E.wrong_bundle(IDENT, "H200", _zip(tmp_path, good, "manifest.json", "x/manifest.json"))
    assert "more than one manifest.json (also 'x/manifest.json')" in rejected(two or {})


def test_leases_belong_to_their_holder(w: World) -> None:
    from bot.verification import store

    vid = w.promote()
    mine = store.claim(w.svc.db, vid, 60)
    assert mine is not None
    assert store.claim(w.svc.db, vid, 60) is None  # held
    assert store.renew(w.svc.db, vid, mine, 60)
    with w.svc.db.session() as s:  # it expired and another worker took it
        v = s.get(Verification, vid)
        assert v is not None
        v.lease_until = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    theirs = store.claim(w.svc.db, vid, 60)
    assert theirs is not None
    assert not store.renew(w.svc.db, vid, mine, 60)
    store.release(w.svc.db, vid, mine)  # not ours any more: nothing happens
    assert store.claim(w.svc.db, vid, 60) is None
    store.release(w.svc.db, vid, theirs)
    assert store.claim(w.svc.db, vid, 60) is not None
