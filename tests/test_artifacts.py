from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

import bot.artifacts as artifacts
from bot.artifacts import CHUNK_SIZE, ArtifactStore, LocalStore, S3Store, store_from_url
from tests.s3server import s3_client, s3_endpoint, unique_bucket  # noqa: F401

BIG = bytes(range(256)) * (CHUNK_SIZE // 256 * 2 + 3)  # a little over two chunks

BAD_KEYS = [
    "",
    "/etc/passwd",
    "..",
    "../x",
    "a/../../x",
    "a/..",
    "./a",
    "a/./b",
    "a\\b",
    "..\\x",
    "a//b",
    "a/",
    "a\x00b",
    "a\nb",
]


def _tree(root: Path) -> Path:
    """A built-evidence-like folder; returns it."""
    (root / "plots").mkdir(parents=True)
    (root / "report.html").write_text("<h1>report</h1>")
    (root / "evidence.md").write_text("# evidence\n")
    (root / "plots" / "latency.png").write_bytes(b"\x89PNG\r\n\x1a\n" + BIG)
    (root / "data.json").write_text("{}")
    return root


TREE_FILES = {"report.html", "evidence.md", "plots/latency.png", "data.json"}


def _drain(store: ArtifactStore, key: str) -> tuple[bytes, int, str, int]:
    chunks, size, ctype = store.open_stream(key)
    parts = list(chunks)
    return b"".join(parts), size, ctype, len(parts)


# ------------------------------------------------------------------- LocalStore


@pytest.fixture
def local(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store" / "nested")


def test_local_creates_root_and_round_trips(local: LocalStore, tmp_path: Path) -> None:
    assert local.root == (tmp_path / "store" / "nested").resolve()
    assert local.root.is_dir()
    assert not local.exists("bundles/v-1/h100.zip")
    local.put_bytes("bundles/v-1/h100.zip", b"zip-bytes", "application/zip")
    assert local.exists("bundles/v-1/h100.zip")
    assert local.get_bytes("bundles/v-1/h100.zip") == b"zip-bytes"
    local.put_bytes("bundles/v-1/h100.zip", b"replaced")
    assert local.get_bytes("bundles/v-1/h100.zip") == b"replaced"
    path = local.local_path("bundles/v-1/h100.zip")
    assert path == local.root / "bundles" / "v-1" / "h100.zip"
    assert path.read_bytes() == b"replaced"
    assert local.presigned_url("bundles/v-1/h100.zip", 60) is None

    src = tmp_path / "src.bin"
    src.write_bytes(BIG)
    local.put_file("big/file.bin", src)
    assert local.get_bytes("big/file.bin") == BIG


def test_local_missing_keys(local: LocalStore) -> None:
    with pytest.raises(KeyError) as err:
        local.get_bytes("nope/x.txt")
    assert err.value.args == ("nope/x.txt",)
    with pytest.raises(KeyError):
        local.open_stream("nope/x.txt")
    local.put_bytes("dir/file.txt", b"x")
    # A folder is not an artifact; nor is a path through a file.
    assert not local.exists("dir")
    with pytest.raises(KeyError):
        local.get_bytes("dir")
    with pytest.raises(KeyError):
        local.open_stream("dir")
    with pytest.raises(KeyError):
        local.get_bytes("dir/file.txt/below")


def _leftovers(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*") if p.name.endswith(".tmp")]


def test_local_writes_are_atomic(local: LocalStore, monkeypatch: pytest.MonkeyPatch) -> None:
    local.put_bytes("a/report.html", b"old")
    seen: list[tuple[str, str, bytes]] = []
    real_replace = os.replace

    def spy(src: Any, dst: Any) -> None:
        # At the moment of the swap the full new content is on disk and readers still
        # see the old file.
        seen.append((str(src), str(dst), Path(dst).read_bytes()))
        assert Path(src).read_bytes() == b"new content"
        assert Path(src).parent == Path(dst).parent
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    local.put_bytes("a/report.html", b"new content")
    assert len(seen) == 1
    assert seen[0][1] == str(local.root / "a" / "report.html")
    assert seen[0][2] == b"old"
    assert local.get_bytes("a/report.html") == b"new content"
    assert _leftovers(local.root) == []


def test_local_failed_write_keeps_old_content(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    local.put_bytes("a/b.txt", b"old")

    def boom(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        local.put_bytes("a/b.txt", b"new")
    src = tmp_path / "src.txt"
    src.write_bytes(b"new")
    with pytest.raises(OSError, match="disk full"):
        local.put_file("a/b.txt", src)
    assert local.get_bytes("a/b.txt") == b"old"
    assert _leftovers(local.root) == []


@pytest.mark.parametrize("key", BAD_KEYS)
def test_local_rejects_escaping_keys(local: LocalStore, key: str, tmp_path: Path) -> None:
    for call in (
        lambda: local.put_bytes(key, b"x"),
        lambda: local.put_file(key, tmp_path),
        lambda: local.get_bytes(key),
        lambda: local.exists(key),
        lambda: local.open_stream(key),
        lambda: local.local_path(key),
        lambda: local.presigned_url(key, 60),
    ):
        with pytest.raises(ValueError, match="artifact key"):
            call()
    assert not (tmp_path / "x").exists()
    assert list(local.root.rglob("*")) == []


def test_local_rejects_escaping_tree_prefix(local: LocalStore, tmp_path: Path) -> None:
    folder = _tree(tmp_path / "out")
    for prefix in ("../up", "/abs", "a/../..", "a//b"):
        with pytest.raises(ValueError, match="artifact key"):
            local.put_tree(prefix, folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="artifact key"):
        local.put_tree("../up", empty)
    assert list(local.root.rglob("*")) == []


def test_local_symlink_inside_root_cannot_escape(local: LocalStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (local.root / "link").symlink_to(outside)
    with pytest.raises(ValueError, match="outside the store"):
        local.get_bytes("link/secret.txt")
    with pytest.raises(ValueError, match="outside the store"):
        local.put_bytes("link/new.txt", b"x")
    assert not (outside / "new.txt").exists()


def test_local_put_tree_and_open_stream(local: LocalStore, tmp_path: Path) -> None:
    folder = _tree(tmp_path / "out")
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the store")
    (folder / "leak.txt").symlink_to(secret)  # links are skipped, not followed
    local.put_tree("reports/v-1/", folder)
    stored = {p.relative_to(local.root).as_posix() for p in local.root.rglob("*") if p.is_file()}
    assert stored == {f"reports/v-1/{f}" for f in TREE_FILES}

    data, size, ctype, n = _drain(local, "reports/v-1/plots/latency.png")
    assert data == (folder / "plots" / "latency.png").read_bytes()
    assert size == len(data)
    assert ctype == "image/png"
    assert n >= 3  # streamed in chunks, not in one read
    data, size, ctype, _ = _drain(local, "reports/v-1/report.html")
    assert (data, size, ctype) == (b"<h1>report</h1>", 15, "text/html")
    assert _drain(local, "reports/v-1/data.json")[2] == "application/json"

    local.put_tree("", folder / "plots")
    assert local.get_bytes("latency.png").startswith(b"\x89PNG")


def test_local_stream_closes_its_file(local: LocalStore) -> None:
    local.put_bytes("big.bin", BIG)
    chunks, size, _ = local.open_stream("big.bin")
    assert size == len(BIG)
    assert len(next(chunks)) == CHUNK_SIZE
    chunks.close()  # type: ignore[attr-defined]  # what Werkzeug does at the end
    assert list(chunks) == []
    # Dropped unread: closed on collection without a ResourceWarning (warnings are errors).
    chunks, _, _ = local.open_stream("big.bin")
    del chunks
    gc.collect()


def test_put_tree_needs_a_folder(local: LocalStore, tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        local.put_tree("x", tmp_path / "missing")


# ---------------------------------------------------------------------- S3Store


@pytest.fixture
def bucket(s3_endpoint: str) -> Iterator[str]:  # noqa: F811
    name = unique_bucket()
    client = s3_client(s3_endpoint)
    try:
        client.create_bucket(Bucket=name)
        yield name
    finally:
        client.close()


@pytest.fixture
def admin(s3_endpoint: str) -> Iterator[Any]:  # noqa: F811
    client = s3_client(s3_endpoint)
    yield client
    client.close()


@pytest.fixture
def s3(bucket: str, s3_endpoint: str) -> Iterator[S3Store]:  # noqa: F811
    with S3Store(bucket, "pre/fix", s3_endpoint) as store:
        yield store


def _keys(admin: Any, bucket: str) -> set[str]:
    pages = admin.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


def test_s3_client_is_lazy_and_retries(s3: S3Store) -> None:
    assert s3._client is None
    client = s3.client
    assert client is s3.client
    # botocore's max_attempts counts retries: 1 call + 5 retries.
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 6}
    assert client.meta.endpoint_url == s3.endpoint_url


def test_s3_round_trip(s3: S3Store, admin: Any, bucket: str) -> None:
    assert not s3.exists("bundles/v-1/h100.zip")
    s3.put_bytes("bundles/v-1/h100.zip", b"zip-bytes", "application/zip")
    assert s3.exists("bundles/v-1/h100.zip")
    assert s3.get_bytes("bundles/v-1/h100.zip") == b"zip-bytes"
    head = admin.head_object(Bucket=bucket, Key="pre/fix/bundles/v-1/h100.zip")
    assert head["ContentType"] == "application/zip"
    s3.put_bytes("reports/v-1/report.html", b"<p>")  # content type guessed from the key
    assert _drain(s3, "reports/v-1/report.html")[2] == "text/html"
    assert s3.local_path("bundles/v-1/h100.zip") is None
    assert _keys(admin, bucket) == {
        "pre/fix/bundles/v-1/h100.zip",
        "pre/fix/reports/v-1/report.html",
    }


def test_s3_missing_key(s3: S3Store) -> None:
    with pytest.raises(KeyError) as err:
        s3.get_bytes("nope/x.txt")
    assert err.value.args == ("nope/x.txt",)
    with pytest.raises(KeyError):
        s3.open_stream("nope/x.txt")
    assert not s3.exists("nope/x.txt")


def test_s3_put_file_multipart(s3: S3Store, admin: Any, bucket: str, tmp_path: Path) -> None:
    big = tmp_path / "bundle.zip"
    payload = os.urandom(9 * 1024 * 1024)  # over boto3's 8 MiB multipart threshold
    big.write_bytes(payload)
    s3.put_file("bundles/v-2/h200.zip", big)
    head = admin.head_object(Bucket=bucket, Key="pre/fix/bundles/v-2/h200.zip")
    assert head["ContentLength"] == len(payload)
    assert head["ContentType"] == "application/zip"
    assert head["ETag"].strip('"').endswith("-2")  # uploaded in parts
    data, size, _, n = _drain(s3, "bundles/v-2/h200.zip")
    assert data == payload
    assert size == len(payload)
    assert n > 1


def test_s3_put_tree_and_open_stream(s3: S3Store, admin: Any, bucket: str, tmp_path: Path) -> None:
    folder = _tree(tmp_path / "out")
    s3.put_tree("reports/v-1", folder)
    assert _keys(admin, bucket) == {f"pre/fix/reports/v-1/{f}" for f in TREE_FILES}
    data, size, ctype, n = _drain(s3, "reports/v-1/plots/latency.png")
    assert data == (folder / "plots" / "latency.png").read_bytes()
    assert size == len(data)
    assert ctype == "image/png"
    assert n >= 2
    chunks, _, _ = s3.open_stream("reports/v-1/report.html")
    chunks.close()  # type: ignore[attr-defined]
    assert list(chunks) == []


def test_s3_presigned_url(s3: S3Store, tmp_path: Path) -> None:
    s3.put_bytes("reports/v-1/plots/a.png", BIG, "image/png")
    url = s3.presigned_url("reports/v-1/plots/a.png", 300)
    assert url is not None
    assert url.startswith(s3.endpoint_url or "")
    assert "/pre/fix/reports/v-1/plots/a.png" in url
    with requests.get(url, timeout=10) as resp:
        assert resp.status_code == 200
        assert resp.content == BIG
        assert resp.headers["Content-Type"] == "image/png"
    assert "X-Amz-Signature=" in url
    assert "X-Amz-Expires=300" in url
    for bad in (0, -1, 8 * 24 * 3600):
        with pytest.raises(ValueError, match="expires_s"):
            s3.presigned_url("reports/v-1/plots/a.png", bad)


def test_s3_prefixes_are_separate(bucket: str, s3_endpoint: str, admin: Any) -> None:  # noqa: F811
    with (
        S3Store(bucket, "one", s3_endpoint) as one,
        S3Store(bucket, "/two/", s3_endpoint) as two,
        S3Store(bucket, "", s3_endpoint) as top,
    ):
        one.put_bytes("k.txt", b"1")
        two.put_bytes("k.txt", b"2")
        top.put_bytes("k.txt", b"0")
        assert (one.get_bytes("k.txt"), two.get_bytes("k.txt")) == (b"1", b"2")
        assert top.get_bytes("one/k.txt") == b"1"
        assert not one.exists("two/k.txt")
    assert _keys(admin, bucket) == {"one/k.txt", "two/k.txt", "k.txt"}


@pytest.mark.parametrize("key", BAD_KEYS)
def test_s3_rejects_bad_keys(key: str, tmp_path: Path) -> None:
    store = S3Store("bucket", "pre", "http://127.0.0.1:1", client=object())
    for call in (
        lambda: store.put_bytes(key, b"x"),
        lambda: store.put_file(key, tmp_path),
        lambda: store.get_bytes(key),
        lambda: store.exists(key),
        lambda: store.open_stream(key),
        lambda: store.local_path(key),
        lambda: store.presigned_url(key, 60),
    ):
        with pytest.raises(ValueError, match="artifact key"):
            call()


def test_s3_store_from_environment(s3_endpoint: str, bucket: str) -> None:  # noqa: F811
    # Credentials come from the environment (set by the fixture), as in production.
    store = store_from_url(f"s3://{bucket}/artifacts", s3_endpoint)
    assert isinstance(store, S3Store)
    try:
        store.put_bytes("a/b.txt", b"hello")
        assert store.get_bytes("a/b.txt") == b"hello"
    finally:
        store.close()


# ---------------------------------------------------------------- store_from_url


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://my-bucket", "my-bucket", ""),
        ("s3://my-bucket/", "my-bucket", ""),
        ("s3://my-bucket/rsi", "my-bucket", "rsi"),
        ("s3://my-bucket/rsi/artifacts/", "my-bucket", "rsi/artifacts"),
        ("S3://my.bucket/x", "my.bucket", "x"),
    ],
)
def test_store_from_url_s3(url: str, bucket: str, prefix: str) -> None:
    store = store_from_url(url, "http://minio:9000")
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.endpoint_url) == (bucket, prefix, "http://minio:9000")
    assert store._client is None  # nothing connects until first use
    assert store_from_url(url, None).endpoint_url is None  # type: ignore[attr-defined]
    assert store_from_url(url, "").endpoint_url is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "url", ["s3://", "s3:///prefix", "s3:my-bucket", "s3:/my-bucket", "s3://bad bucket/x"]
)
def test_store_from_url_malformed_s3(url: str) -> None:
    with pytest.raises(ValueError, match="ARTIFACT_STORE") as err:
        store_from_url(url, None)
    assert "s3://" in str(err.value) or "bucket" in str(err.value)


def test_store_from_url_bad_prefix() -> None:
    with pytest.raises(ValueError, match="bad prefix"):
        store_from_url("s3://bucket/a/../b", None)
    with pytest.raises(ValueError, match="empty"):
        store_from_url("  ", None)


def test_store_from_url_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_from_url(str(tmp_path / "arts"), "http://ignored")
    assert isinstance(store, LocalStore)
    assert store.root == (tmp_path / "arts").resolve()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home = store_from_url("~/rsi/artifacts", None)
    assert isinstance(home, LocalStore)
    assert home.root == (tmp_path / "home" / "rsi" / "artifacts").resolve()
    monkeypatch.chdir(tmp_path)
    rel = store_from_url("data/artifacts", None)
    assert isinstance(rel, LocalStore)
    assert rel.root == (tmp_path / "data" / "artifacts").resolve()


def test_protocol_is_satisfied(tmp_path: Path) -> None:
    stores: list[ArtifactStore] = [LocalStore(tmp_path), S3Store("bucket", "p", None)]
    assert all(callable(getattr(s, "open_stream", None)) for s in stores)
    assert artifacts.DEFAULT_CONTENT_TYPE == "application/octet-stream"
    assert artifacts.guess_content_type("x.unknownext") == "application/octet-stream"
