"""Open a bundle — a folder, a `.zip` or a `.tar.gz` — and read its files by relative path.

Archives come from runners we do not trust. Before a byte is unpacked every member is
checked: its path (relative, no `..`, no backslash or control character), its kind
(regular files and folders only: no links, devices or FIFOs), how it is stored (zip:
stored or deflate, not encrypted), and the bounds of `evidence.limits` (members, size of
each and of all, compression ratio). Sizes are counted again while the bytes stream, so
an archive whose headers lie is refused as well. A bundle has exactly one
`manifest.json`, at its root (or in its one wrapping folder): a second one anywhere is
refused, so whatever reads the manifest reads the same one.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import stat
import struct
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import IO, Any

from evidence.errors import BoundError, InputError
from evidence.limits import DEFAULT, RATIO_FLOOR, Limits

MANIFEST = "manifest.json"
CHUNK = 1024 * 1024
# Tar's own bytes around each member: its header, a long-name or pax header, padding.
TAR_OVERHEAD = 2048
# A central directory entry is 46 bytes plus its name, extra field and comment.
ZIP_ENTRY_BYTES = 4096
_ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
# What reading a member of a damaged zip raises; NotImplementedError for flags zipfile
# does not read (patched data, strong encryption) that a mangled directory can set.
_ZIP_MEMBER_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError)


def _safe_rel(rel: str) -> str:
    p = PurePosixPath(rel)
    if (
        not rel
        or p.is_absolute()
        or ".." in p.parts
        or "\\" in rel
        or any(ord(c) < 32 or ord(c) == 127 for c in rel)
    ):
        raise ValueError(f"unsafe path in bundle: {rel!r}")
    return str(p)


def _member_path(name: str, where: str) -> str:
    """A member's name as a relative path, or InputError naming it."""
    stripped = name[2:] if name.startswith("./") else name
    stripped = stripped.rstrip("/")
    if stripped in ("", "."):
        return ""
    try:
        return _safe_rel(stripped)
    except ValueError as exc:
        raise InputError(where, f"member {name[:200]!r} escapes the bundle ({exc})") from None


class Bundle:
    """Read-only access to a bundle's files; use as a context manager."""

    def __init__(self, path: Path, limits: Limits = DEFAULT) -> None:
        self.path = path
        self.name = path.name
        self.limits = limits
        self._zip: zipfile.ZipFile | None = None
        self._zip_prefix = ""
        self._zip_names: dict[str, zipfile.ZipInfo] = {}
        self._tmp: Path | None = None
        self._root: Path | None = None
        try:
            if path.is_dir():
                self._root = path
                self._one_manifest(self._folder_names(path))
            elif path.suffix == ".zip":
                self._open_zip(path)
            elif path.name.endswith((".tar.gz", ".tgz")):
                self._open_tar(path)
            else:
                raise InputError(str(path), "not a bundle: expected a folder, .zip or .tar.gz")
        except BaseException:
            self.close()
            raise
        if not self.exists(MANIFEST):
            self.close()
            raise InputError(str(path), f"no {MANIFEST} at the bundle's root")

    # ------------------------------------------------------------------ opening

    def _one_manifest(self, names: list[str]) -> str:
        """The prefix of the root (`""` or one wrapping folder's `name/`); InputError when
        any `manifest.json` other than the root one is in the bundle."""
        prefix = ""
        if MANIFEST not in names:
            # Tolerate one wrapping folder, as `zip -r bundle.zip bundle/` makes.
            tops = {n.split("/", 1)[0] for n in names if "/" in n}
            if len(tops) == 1 and f"{next(iter(tops))}/{MANIFEST}" in names:
                prefix = next(iter(tops)) + "/"
        root = prefix + MANIFEST
        others = [n for n in names if n.rsplit("/", 1)[-1] == MANIFEST and n != root]
        if others and root in names:
            raise InputError(
                str(self.path),
                f"more than one {MANIFEST} (also {others[0][:200]!r}): a bundle has "
                "exactly one, at its root",
            )
        return prefix

    def _folder_names(self, root: Path) -> list[str]:
        names = []
        for dirpath, _dirs, files in os.walk(root):
            for f in files:
                names.append((Path(dirpath) / f).relative_to(root).as_posix())
        return names

    def _open_zip(self, path: Path) -> None:
        lim, where = self.limits, str(path)
        _check_zip_directory(path, lim)
        try:
            self._zip = zipfile.ZipFile(path)
            infos = self._zip.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, struct.error, NotImplementedError) as exc:
            # NotImplementedError: a version or feature zipfile does not read
            raise InputError(where, f"corrupt zip archive ({exc})") from exc
        if len(infos) > lim.max_members:
            raise BoundError(where, f"{len(infos)} members, more than {lim.max_members}")
        total = 0
        for info in infos:
            rel = _member_path(info.filename, where)
            if info.is_dir() or not rel:
                continue
            label = repr(info.filename[:200])
            # Unix zips keep the file's type with its mode; zipfile's own writes and
            # other systems' zips leave the type bits 0.
            kind = stat.S_IFMT(info.external_attr >> 16)
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise InputError(where, f"member {label} is not a regular file (a link?)")
            if info.flag_bits & 0x1:
                raise InputError(where, f"member {label} is encrypted")
            if info.compress_type not in _ZIP_METHODS:
                raise InputError(
                    where,
                    f"member {label} is compressed with method {info.compress_type}; "
                    "only stored and deflate are read",
                )
            if rel in self._zip_names:
                raise InputError(where, f"member {label} appears twice")
            self._zip_names[rel] = info
            self._check_member(where, label, info.file_size, info.compress_size)
            total += info.file_size
            if total > lim.max_bytes:
                raise BoundError(where, f"unpacks to more than {lim.max_bytes} bytes")
        self._zip_prefix = self._one_manifest(list(self._zip_names))

    def _check_member(self, where: str, label: str, size: int, packed: int) -> None:
        lim = self.limits
        if size > lim.max_member_bytes:
            raise BoundError(
                where, f"member {label} unpacks to {size} bytes, more than {lim.max_member_bytes}"
            )
        if size > RATIO_FLOOR and size > lim.max_ratio * max(packed, 1):
            raise BoundError(
                where,
                f"member {label} is compressed {size / max(packed, 1):.0f}:1, "
                f"more than {lim.max_ratio:g}:1",
            )

    def _open_tar(self, path: Path) -> None:
        lim, where = self.limits, str(path)
        self._tmp = Path(tempfile.mkdtemp(prefix="rsi-bundle-"))
        count = total = 0
        names: set[str] = set()
        try:
            with (
                _GuardedGzip(path, lim) as stream,
                tarfile.open(fileobj=stream, mode="r|") as tar,
            ):
                for member in tar:
                    count += 1
                    if count > lim.max_members:
                        raise BoundError(where, f"more than {lim.max_members} members")
                    rel = _member_path(member.name, where)
                    label = repr(member.name[:200])
                    if member.isdir() or not rel:
                        continue
                    if not member.isfile():
                        raise InputError(
                            where, f"member {label} is not a regular file (a link or device)"
                        )
                    if member.issparse():  # its holes unpack past what the ratio bound sees
                        raise InputError(where, f"member {label} is a sparse file")
                    if rel in names:
                        raise InputError(where, f"member {label} appears twice")
                    self._check_member(where, label, member.size, member.size)
                    total += member.size
                    if total > lim.max_bytes:
                        raise BoundError(where, f"unpacks to more than {lim.max_bytes} bytes")
                    names.add(rel)
                    src = tar.extractfile(member)
                    assert src is not None
                    dest = self._tmp / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    with src, open(dest, "xb") as out:
                        _copy_capped(src, out, member.size, where, label)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise InputError(where, f"corrupt tar archive ({exc})") from exc
        prefix = self._one_manifest(sorted(names))
        self._root = self._tmp / prefix if prefix else self._tmp

    # ------------------------------------------------------------------ reading

    def exists(self, rel: str) -> bool:
        rel = _safe_rel(rel)
        if self._zip is not None:
            return self._zip_prefix + rel in self._zip_names
        assert self._root is not None
        return (self._root / rel).is_file()

    def read(self, rel: str) -> bytes:
        """The file's bytes, at most `limits.max_json_bytes` of them (BoundError beyond);
        FileNotFoundError when absent, ValueError when unsafe or corrupt."""
        rel = _safe_rel(rel)
        cap = self.limits.max_json_bytes
        if self._zip is not None:
            info = self._zip_names.get(self._zip_prefix + rel)
            if info is None:
                raise FileNotFoundError(rel)
            if info.file_size > cap:
                raise BoundError(
                    f"{self.path}/{rel}", f"{info.file_size} bytes, more than {cap} to read"
                )
            buf = io.BytesIO()
            try:
                with self._zip.open(info) as f:
                    _copy_capped(f, buf, cap, f"{self.path}/{rel}", repr(rel))
            except _ZIP_MEMBER_ERRORS as exc:
                raise ValueError(f"corrupt member {rel}: {exc}") from exc
            return buf.getvalue()
        with self._open_file(rel) as f:
            size = os.fstat(f.fileno()).st_size
            if size > cap:
                raise BoundError(f"{self.path}/{rel}", f"{size} bytes, more than {cap} to read")
            out = io.BytesIO()
            _copy_capped(f, out, cap, f"{self.path}/{rel}", repr(rel))
            return out.getvalue()

    def _open_file(self, rel: str) -> IO[bytes]:
        """A file of a folder (or unpacked tar) bundle, opened: never outside it, only a
        regular file, in a folder never a hard link. Opened without blocking, so a FIFO
        cannot hang the reader."""
        assert self._root is not None
        path = self._root / rel
        if self._tmp is None and not path.resolve().is_relative_to(self._root.resolve()):
            raise ValueError(f"{rel} leads outside the bundle")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{rel} is not a regular file")
            if self._tmp is None and st.st_nlink > 1:
                # a hard link is the same file as one elsewhere: it would read a file
                # from outside the bundle that the path check above cannot see
                raise ValueError(f"{rel} is a hard link ({st.st_nlink} names for one file)")
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def sha256(self, rel: str) -> str:
        """The file's SHA-256, streamed (for files of any size up to
        `limits.max_member_bytes`, which `read` would refuse past `max_json_bytes`)."""
        rel = _safe_rel(rel)
        sink = _Hashing()
        cap = self.limits.max_member_bytes
        if self._zip is not None:
            info = self._zip_names.get(self._zip_prefix + rel)
            if info is None:
                raise FileNotFoundError(rel)
            try:
                with self._zip.open(info) as f:
                    _copy_capped(f, sink, cap, f"{self.path}/{rel}", repr(rel))  # type: ignore[arg-type]
            except _ZIP_MEMBER_ERRORS as exc:
                raise ValueError(f"corrupt member {rel}: {exc}") from exc
            return sink.h.hexdigest()
        with self._open_file(rel) as f:
            _copy_capped(f, sink, cap, f"{self.path}/{rel}", repr(rel))  # type: ignore[arg-type]
        return sink.h.hexdigest()

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
            self._zip = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Bundle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Hashing:
    def __init__(self) -> None:
        self.h = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.h.update(data)
        return len(data)


def _copy_capped(src: IO[bytes], dst: IO[bytes], cap: int, where: str, label: str) -> None:
    """Copy at most `cap` bytes; BoundError when the source holds more (its header lied)."""
    left = cap
    while chunk := src.read(min(CHUNK, left + 1)):
        if len(chunk) > left:
            raise BoundError(where, f"member {label} holds more than {cap} bytes")
        left -= len(chunk)
        dst.write(chunk)


class _GuardedGzip(io.RawIOBase):
    """A gzip stream that counts what it unpacks and stops at the bundle's bounds: the
    whole (tar's own bytes included) and the compression ratio. tarfile reads headers
    of any declared size into memory, so the bound is kept here, below it."""

    def __init__(self, path: Path, limits: Limits) -> None:
        self.where = str(path)
        self.limits = limits
        self.raw = open(path, "rb")  # noqa: SIM115 - closed with this stream
        self.gz = gzip.GzipFile(fileobj=self.raw, mode="rb")
        self.out = 0
        self.most = limits.max_bytes + (limits.max_members + 2) * TAR_OVERHEAD

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.gz.read(len(b))
        n = len(data)
        b[:n] = data
        self.out += n
        if self.out > self.most:
            raise BoundError(self.where, f"unpacks to more than {self.limits.max_bytes} bytes")
        packed = max(self.raw.tell(), 1)
        if self.out > RATIO_FLOOR and self.out > self.limits.max_ratio * packed:
            raise BoundError(
                self.where,
                f"is compressed more than {self.limits.max_ratio:g}:1 "
                f"({self.out} bytes from {packed})",
            )
        return n

    def close(self) -> None:
        if not self.closed:
            self.gz.close()
            self.raw.close()
        super().close()


def _check_zip_directory(path: Path, lim: Limits) -> None:
    """The member count and central directory size, from the end record, before zipfile
    reads the directory into memory."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            span = min(size, 22 + 65535)
            f.seek(size - span)
            tail = f.read(span)
            i = tail.rfind(b"PK\x05\x06")
            if i < 0 or len(tail) - i < 22:
                return  # zipfile says what is wrong
            entries, cd_size = struct.unpack_from("<HI", tail, i + 10)
            if entries == 0xFFFF or cd_size == 0xFFFFFFFF:
                j = i - 20
                if j < 0 or tail[j : j + 4] != b"PK\x06\x07":
                    return
                (offset,) = struct.unpack_from("<Q", tail, j + 8)
                f.seek(offset)
                rec = f.read(56)
                if len(rec) < 56 or rec[:4] != b"PK\x06\x06":
                    return
                entries, cd_size = struct.unpack_from("<QQ", rec, 32)
    except OSError as exc:
        raise InputError(str(path), f"unreadable ({exc})") from exc
    if entries > lim.max_members:
        raise BoundError(str(path), f"{entries} members, more than {lim.max_members}")
    if cd_size > (lim.max_members + 1) * ZIP_ENTRY_BYTES:
        raise BoundError(str(path), f"a zip directory of {cd_size} bytes")
