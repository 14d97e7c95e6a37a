"""Bounded input in the App: a bundle beyond a bound ends its GPU's job `bundle-rejected`
with the bound named; artifacts are streamed to disk (from GitHub and from the artifact
store, S3 included), never held whole."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests

from bot.artifacts import S3Store
from tests import appkit
from tests.hostile import MiB, folder_members, padded, write_zip
from tests.s3server import s3_endpoint, unique_bucket  # noqa: F401
from tests.standin import GitHubStandIn
from tests.worlds import World, world


@pytest.fixture
def w(tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world("embedded", tmp_path, github) as x:
        yield x


def _folder(w: World, vid: str) -> Path:
    """A real bundle folder of this verification (appkit zips it; the folder stays)."""
    appkit.bundle_zip(w.tmp, vid)
    return w.tmp / f"bundle-{vid}-H200"


def _give(w: World, vid: str, data: bytes) -> None:
    w.github.add_artifact(appkit.RUNNER, w.run_id(vid, "H200"), f"rsi-bundle-{vid}-h200", data)
    w.complete(vid, "H200")
    w.settle()


def _rejected(w: World, vid: str) -> str:
    v = w.verification(vid)
    assert v.state == "failed", w.reason(vid)
    job = v.jobs[0]
    assert (job.end_reason or {}).get("code") == "bundle-rejected", job.end_reason
    assert not w.svc.store.exists(f"bundles/{vid}/h200.zip")  # nothing kept
    return w.reason(vid)


def test_a_zip_bomb_from_a_runner_ends_the_verification_with_the_bound(w: World) -> None:
    vid = w.promote()
    folder = _folder(w, vid)
    speed = next(p for p in sorted(folder.rglob("speed_results.json")))
    rel = speed.relative_to(folder).as_posix()
    members = [m for m in folder_members(folder) if m.name != rel]
    members.append(padded(rel, speed.read_bytes(), b" " * MiB, 1430))
    bomb = write_zip(w.tmp / "bomb.zip", members).read_bytes()
    assert len(bomb) < 2 * MiB
    _give(w, vid, bomb)
    reason = _rejected(w, vid)
    assert f"member '{rel}' unpacks to 1499" in reason, reason
    assert "more than 536870912" in reason


def test_a_second_manifest_ends_the_verification(w: World) -> None:
    """The nested one claims to be this verification's; the root one is another's."""
    vid = w.promote()
    folder = _folder(w, vid)
    doc = orjson.loads((folder / "manifest.json").read_bytes())
    (folder / "x").mkdir()
    (folder / "x" / "manifest.json").write_bytes(orjson.dumps(doc))
    doc["verification_id"] = "v-someone-else"
    (folder / "manifest.json").write_bytes(orjson.dumps(doc))
    _give(w, vid, write_zip(w.tmp / "two.zip", folder_members(folder)).read_bytes())
    assert "more than one manifest.json (also 'x/manifest.json')" in _rejected(w, vid)


def test_an_artifact_over_the_bound_is_not_downloaded(
    tmp_path: Path, github: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*_: object, **__: object) -> None:
        raise AssertionError("downloaded an artifact GitHub said was too large")

    with world("embedded", tmp_path, github, RSI_BUNDLE_MAX_BYTES=20_000) as x:
        vid = x.promote()
        data = appkit.bundle_zip(x.tmp, vid)
        assert len(data) > 20_000
        monkeypatch.setattr(requests, "get", never)
        _give(x, vid, data)
        reason = _rejected(x, vid)
    assert "the artifact is too large (more than 20000 bytes" in reason, reason


def test_a_bundle_over_the_bound_in_the_artifact_store(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    with world("embedded", tmp_path, github, RSI_BUNDLE_MAX_BYTES=20_000) as x:
        vid = x.promote()
        x.svc.store.put_bytes(f"{vid}/h200.zip", appkit.bundle_zip(x.tmp, vid))
        x.complete(vid, "H200")
        x.settle()
        assert "is more than 20000" not in _rejected(x, vid)  # the size, then the bound
        assert "the artifact is too large" in x.reason(vid)


def test_github_artifacts_are_streamed_to_disk(w: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The download is read in chunks; the whole body is never asked for."""
    real_get = requests.get
    asked: list[str] = []

    class Chunked(requests.Response):
        @property
        def content(self) -> bytes:
            raise AssertionError("the artifact was held in memory whole")

    def streamed_only(url: str, **kw: Any) -> requests.Response:
        asked.append(url)
        assert kw.get("stream") is True, "the artifact download is not streamed"
        resp = real_get(url, **kw)
        resp.__class__ = Chunked
        return resp

    monkeypatch.setattr(requests, "get", streamed_only)
    vid = w.promote()
    w.finish(vid)
    assert w.verification(vid).state == "published", w.reason(vid)
    assert len(asked) == 1


def test_bundles_in_s3_are_streamed(
    tmp_path: Path,
    github: GitHubStandIn,
    s3_endpoint: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A runner's bundle on S3 is taken in, kept and read with streams only."""
    import boto3

    bucket = unique_bucket()
    boto3.session.Session().client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    real = S3Store.get_bytes

    def small_only(self: S3Store, key: str) -> Any:
        assert not key.endswith(".zip"), f"{key} was read whole"
        return real(self, key)

    monkeypatch.setattr(S3Store, "get_bytes", small_only)
    with world(
        "embedded",
        tmp_path,
        github,
        ARTIFACT_STORE=f"s3://{bucket}/app",
        AWS_ENDPOINT_URL=s3_endpoint,
    ) as x:
        vid = x.promote()
        x.svc.store.put_bytes(f"{vid}/h200.zip", appkit.bundle_zip(x.tmp, vid))
        x.complete(vid, "H200")
        x.settle()
        assert x.verification(vid).state == "published", x.reason(vid)
        assert x.svc.store.exists(f"bundles/{vid}/h200.zip")


@pytest.mark.parametrize(
    ("setting", "needle"),
    [
        ("RSI_BUNDLE_MAX_LIST_VALUES", "values, more than 2"),
        ("RSI_BUNDLE_MAX_VALUES", "per-request values to"),
    ],
)
def test_the_value_bounds_are_settings(
    tmp_path: Path, github: GitHubStandIn, setting: str, needle: str
) -> None:
    """The engine reads the bundle under the App's own bounds, and says which it passed."""
    with world("embedded", tmp_path, github, **{setting: 2}) as x:
        vid = x.promote()
        _give(x, vid, appkit.bundle_zip(x.tmp, vid))
        assert x.verification(vid).state == "failed"
        reason = x.reason(vid)
    assert "speed_results.json: field 'inter_chunk_s'" in reason, reason
    assert needle in reason, reason
