"""Where verification bundles and built evidence are kept.

`ARTIFACT_STORE` is a folder (the default) or `s3://bucket/prefix` (with `AWS_ENDPOINT_URL`
for an S3-compatible server; credentials come from the usual AWS environment).
`store_from_url` turns the setting into an `ArtifactStore`.

Keys are relative POSIX paths (`reports/v-1234/report.html`). Both stores accept the same
keys and reject the same bad ones (absolute, `..`, `.`, backslashes, empty segments,
control characters), so a key can never escape the folder or the S3 prefix, and code that
works against one store works against the other.
"""

from __future__ import annotations

import contextlib
import mimetypes
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from bot.files import private_dir

if TYPE_CHECKING:
    from botocore.exceptions import ClientError

__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "ArtifactStore",
    "LocalStore",
    "S3Store",
    "TooLarge",
    "check_key",
    "guess_content_type",
    "save_to_file",
    "store_from_url",
]

DEFAULT_CONTENT_TYPE = "application/octet-stream"
CHUNK_SIZE = 256 * 1024
# SigV4 presigned URLs are valid for at most seven days.
MAX_PRESIGN_S = 7 * 24 * 3600
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


class ArtifactStore(Protocol):
    """A flat key → bytes store; keys are relative POSIX paths."""

    def put_bytes(self, key: str, data: bytes, content_type: str | None = None) -> None: ...

    def put_file(self, key: str, path: Path, content_type: str | None = None) -> None: ...

    def put_tree(self, prefix: str, folder: Path) -> None:
        """Every regular file below `folder` as `prefix/<relative path>`."""
        ...

    def get_bytes(self, key: str) -> bytes:
        """The whole object; `KeyError(key)` when absent."""
        ...

    def exists(self, key: str) -> bool: ...

    def open_stream(self, key: str) -> tuple[Iterator[bytes], int, str]:
        """(chunks, size in bytes, content type) for streaming; `KeyError(key)` when absent.

        The iterator has a `close()` (Werkzeug calls it when the response ends); iterate
        it to the end or close it."""
        ...

    def local_path(self, key: str) -> Path | None:
        """A real file path for the folder store (it may not exist yet); None for S3."""
        ...

    def presigned_url(self, key: str, expires_s: int) -> str | None:
        """A time-limited direct GET URL (S3 only); None for the folder store."""
        ...


# ------------------------------------------------------------------------- keys


def check_key(key: str) -> str:
    """Return `key` if it is a safe relative POSIX path, else raise ValueError."""
    if not isinstance(key, str) or not key:
        raise ValueError("artifact key must be a non-empty string")
    if "\\" in key:
        raise ValueError(f"artifact key must not contain a backslash: {key!r}")
    if _CONTROL.search(key):
        raise ValueError(f"artifact key must not contain control characters: {key!r}")
    if key.startswith("/"):
        raise ValueError(f"artifact key must be relative, not absolute: {key!r}")
    for part in key.split("/"):
        if part == "":
            raise ValueError(f"artifact key has an empty path segment: {key!r}")
        if part in (".", ".."):
            raise ValueError(f"artifact key must not contain '{part}' segments: {key!r}")
    return key


def _join(prefix: str, rel: str) -> str:
    prefix = prefix.rstrip("/")
    return check_key(f"{prefix}/{rel}" if prefix else rel)


def _check_prefix(prefix: str) -> None:
    if prefix.rstrip("/"):
        check_key(prefix.rstrip("/"))


def guess_content_type(name: str) -> str:
    return mimetypes.guess_type(name, strict=False)[0] or DEFAULT_CONTENT_TYPE


def _tree_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """(relative POSIX path, path) of each regular file below folder, sorted.

    Symbolic links are skipped: a bundle comes from a runner that ran candidate code, and
    a link in it must not copy a file from this machine into the store."""
    if not folder.is_dir():
        raise NotADirectoryError(f"not a folder: {folder}")
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(filenames):
            path = base / name
            if path.is_symlink() or not path.is_file():
                continue
            yield path.relative_to(folder).as_posix(), path


class _Chunks(Iterator[bytes]):
    """Chunks from a readable, closed at the end, on `close()`, or when collected."""

    def __init__(
        self, read: Callable[[int], bytes], close: Callable[[], None], chunk_size: int
    ) -> None:
        self._read = read
        self._close = close
        self._chunk_size = chunk_size
        self._closed = False

    def __next__(self) -> bytes:
        if self._closed:
            raise StopIteration
        data = self._read(self._chunk_size)
        if not data:
            self.close()
            raise StopIteration
        return data

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


# ------------------------------------------------------------------ folder store


class LocalStore:
    """Artifacts as files below `root`; each write is atomic (temp file + os.replace).

    The content type is not stored: it is guessed from the key's extension on read."""

    def __init__(self, root: Path) -> None:
        root = private_dir(Path(root))  # folders it creates are 0700, its files 0600
        self.root = root.resolve()

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        path = self.root / check_key(key)
        # Defence in depth: a symbolic link inside root must not lead out of it.
        if not path.resolve().is_relative_to(self.root):
            raise ValueError(f"artifact key leads outside the store: {key!r}")
        return path

    def _write(self, key: str, fill: Callable[[IO[bytes]], None]) -> None:
        dest = self._path(key)
        private_dir(dest.parent)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                fill(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def put_bytes(self, key: str, data: bytes, content_type: str | None = None) -> None:
        def fill(f: IO[bytes]) -> None:
            f.write(data)

        self._write(key, fill)

    def put_file(self, key: str, path: Path, content_type: str | None = None) -> None:
        self._path(key)  # a bad key fails before the source is opened
        with open(path, "rb") as src:
            self._write(key, lambda f: _copy(src, f))

    def put_tree(self, prefix: str, folder: Path) -> None:
        _check_prefix(prefix)
        for rel, path in _tree_files(Path(folder)):
            self.put_file(_join(prefix, rel), path)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise KeyError(key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def open_stream(self, key: str) -> tuple[Iterator[bytes], int, str]:
        path = self._path(key)
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed by the iterator
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise KeyError(key) from None
        try:
            size = os.fstat(f.fileno()).st_size
        except BaseException:
            f.close()
            raise
        return _Chunks(f.read, f.close, CHUNK_SIZE), size, guess_content_type(key)

    def local_path(self, key: str) -> Path | None:
        return self._path(key)

    def presigned_url(self, key: str, expires_s: int) -> str | None:
        check_key(key)
        return None


def _copy(src: IO[bytes], dst: IO[bytes]) -> None:
    while chunk := src.read(1024 * 1024):
        dst.write(chunk)


# ---------------------------------------------------------------------- S3 store


class S3Store:
    """Artifacts as objects under `s3://bucket/prefix/`.

    The boto3 client is created on first use (thread-safe) from the usual AWS credential
    chain, with botocore's standard retry mode. Pass `client` to use your own (it is then
    yours to close)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        client: Any = None,
    ) -> None:
        if not bucket or not _BUCKET.match(bucket):
            raise ValueError(f"invalid S3 bucket name: {bucket!r}")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix)
        self.endpoint_url = endpoint_url or None
        self._client: Any = client
        self._owns_client = client is None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        return f"S3Store({where!r}, endpoint_url={self.endpoint_url!r})"

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    import boto3
                    from botocore.config import Config

                    # A session of its own: boto3's default session is not thread-safe.
                    self._client = boto3.session.Session().client(
                        "s3",
                        endpoint_url=self.endpoint_url,
                        config=Config(
                            retries={"mode": "standard", "max_attempts": 5},
                            # SigV4 for presigned URLs too (botocore may pick SigV2).
                            signature_version="s3v4",
                        ),
                    )
        return self._client

    def close(self) -> None:
        """Close the client this store created (its connection pool)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._owns_client:
            client.close()

    def __enter__(self) -> S3Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def object_key(self, key: str) -> str:
        """The S3 object key of an artifact key (under the prefix)."""
        return _join(self.prefix, check_key(key))

    def put_bytes(self, key: str, data: bytes, content_type: str | None = None) -> None:
        obj = self.object_key(key)
        self.client.put_object(
            Bucket=self.bucket,
            Key=obj,
            Body=data,
            ContentType=content_type or guess_content_type(key),
        )

    def put_file(self, key: str, path: Path, content_type: str | None = None) -> None:
        obj = self.object_key(key)
        # upload_file switches to a multipart upload for big files.
        self.client.upload_file(
            str(path),
            self.bucket,
            obj,
            ExtraArgs={"ContentType": content_type or guess_content_type(key)},
        )

    def put_tree(self, prefix: str, folder: Path) -> None:
        _check_prefix(prefix)
        for rel, path in _tree_files(Path(folder)):
            self.put_file(_join(prefix, rel), path)

    def _get(self, key: str) -> Any:
        from botocore.exceptions import ClientError

        obj = self.object_key(key)
        try:
            return self.client.get_object(Bucket=self.bucket, Key=obj)
        except ClientError as exc:
            if _missing(exc):
                raise KeyError(key) from None
            raise

    def get_bytes(self, key: str) -> bytes:
        body = self._get(key)["Body"]
        try:
            data: bytes = body.read()
        finally:
            body.close()
        return data

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        obj = self.object_key(key)
        try:
            self.client.head_object(Bucket=self.bucket, Key=obj)
        except ClientError as exc:
            if _missing(exc):
                return False
            raise
        return True

    def open_stream(self, key: str) -> tuple[Iterator[bytes], int, str]:
        resp = self._get(key)
        body = resp["Body"]
        size = int(resp["ContentLength"])
        ctype = resp.get("ContentType") or guess_content_type(key)
        return _Chunks(body.read, body.close, CHUNK_SIZE), size, str(ctype)

    def local_path(self, key: str) -> Path | None:
        check_key(key)
        return None

    def presigned_url(self, key: str, expires_s: int) -> str | None:
        if not 1 <= expires_s <= MAX_PRESIGN_S:
            raise ValueError(f"expires_s must be between 1 and {MAX_PRESIGN_S}: {expires_s}")
        obj = self.object_key(key)
        url: str = self.client.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": obj},
            ExpiresIn=expires_s,
        )
        return url


def _missing(exc: ClientError) -> bool:
    err = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return str(err.get("Code", "")) in _MISSING_CODES or status == 404


# ---------------------------------------------------------------------- copying


class TooLarge(ValueError):
    """An artifact bigger than the caller's bound."""


def report_text(store: ArtifactStore, vid: str, name: str) -> str | None:
    """A file of verification `vid`'s published report (`reports/<vid>/<name>`), or None
    when it has none."""
    key = f"reports/{vid}/{name}"
    if not store.exists(key):
        return None
    return store.get_bytes(key).decode("utf-8")


def save_to_file(store: ArtifactStore, key: str, dest: Path, max_bytes: int) -> None:
    """Stream the artifact `key` into the file `dest`, never holding it whole;
    `KeyError(key)` when absent, `TooLarge` past `max_bytes` (whatever its size said)."""
    chunks, size, _ = store.open_stream(key)
    try:
        if size > max_bytes:
            raise TooLarge(f"{key} is {size} bytes, more than {max_bytes}")
        written = 0
        with open(dest, "wb") as out:
            for chunk in chunks:
                written += len(chunk)
                if written > max_bytes:
                    raise TooLarge(f"{key} holds more than {max_bytes} bytes")
                out.write(chunk)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


# ----------------------------------------------------------------------- setting


def store_from_url(artifact_store: str, endpoint_url: str | None = None) -> ArtifactStore:
    """`s3://bucket[/prefix]` → S3Store; anything else → LocalStore of that folder."""
    setting = artifact_store.strip()
    if not setting:
        raise ValueError("ARTIFACT_STORE is empty: give a folder or s3://bucket/prefix")
    if setting.lower().startswith("s3:"):
        if not setting.lower().startswith("s3://"):
            raise ValueError(
                f"ARTIFACT_STORE {artifact_store!r} is not a valid S3 URL: "
                "expected s3://bucket or s3://bucket/prefix"
            )
        rest = setting[len("s3://") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise ValueError(
                f"ARTIFACT_STORE {artifact_store!r} names no bucket: "
                "expected s3://bucket or s3://bucket/prefix"
            )
        if not _BUCKET.match(bucket):
            raise ValueError(f"ARTIFACT_STORE {artifact_store!r}: invalid bucket name {bucket!r}")
        prefix = prefix.strip("/")
        if prefix:
            try:
                check_key(prefix)
            except ValueError as exc:
                raise ValueError(f"ARTIFACT_STORE {artifact_store!r}: bad prefix ({exc})") from None
        return S3Store(bucket, prefix, endpoint_url or None)
    return LocalStore(Path(setting).expanduser())
