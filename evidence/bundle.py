"""Open a bundle — a folder, a `.zip` or a `.tar.gz` — and read its files by relative path.

Archives come from runners we do not trust, so member paths are checked (no absolute
paths, no `..`) and a tarball is unpacked with tarfile's `data` filter.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from types import TracebackType

from evidence.errors import InputError

MANIFEST = "manifest.json"


def _safe_rel(rel: str) -> str:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not rel:
        raise ValueError(f"unsafe path in bundle: {rel!r}")
    return str(p)


class Bundle:
    """Read-only access to a bundle's files; use as a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.name
        self._zip: zipfile.ZipFile | None = None
        self._zip_prefix = ""
        self._tmp: Path | None = None
        self._root: Path | None = None
        if path.is_dir():
            self._root = path
        elif path.suffix == ".zip":
            self._open_zip(path)
        elif path.name.endswith((".tar.gz", ".tgz")):
            self._open_tar(path)
        else:
            raise InputError(str(path), "not a bundle: expected a folder, .zip or .tar.gz")
        if not self.exists(MANIFEST):
            self.close()
            raise InputError(str(path), f"no {MANIFEST} at the bundle's root")

    def _open_zip(self, path: Path) -> None:
        try:
            self._zip = zipfile.ZipFile(path)
            names = self._zip.namelist()
        except (zipfile.BadZipFile, OSError) as exc:
            raise InputError(str(path), f"corrupt zip archive ({exc})") from exc
        if MANIFEST not in names:
            # Tolerate one wrapping folder, as `zip -r bundle.zip bundle/` makes.
            tops = {n.split("/", 1)[0] for n in names if "/" in n}
            if len(tops) == 1 and f"{next(iter(tops))}/{MANIFEST}" in names:
                self._zip_prefix = next(iter(tops)) + "/"

    def _open_tar(self, path: Path) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="rsi-bundle-"))
        try:
            with tarfile.open(path, "r:*") as tar:
                tar.extractall(self._tmp, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            self.close()
            raise InputError(str(path), f"corrupt tar archive ({exc})") from exc
        root = self._tmp
        if not (root / MANIFEST).exists():
            subdirs = [p for p in root.iterdir() if p.is_dir()]
            if len(subdirs) == 1:
                root = subdirs[0]
        self._root = root

    def exists(self, rel: str) -> bool:
        rel = _safe_rel(rel)
        if self._zip is not None:
            try:
                self._zip.getinfo(self._zip_prefix + rel)
            except KeyError:
                return False
            return True
        assert self._root is not None
        return (self._root / rel).is_file()

    def read(self, rel: str) -> bytes:
        """The file's bytes; FileNotFoundError when absent, ValueError when unsafe."""
        rel = _safe_rel(rel)
        if self._zip is not None:
            try:
                return self._zip.read(self._zip_prefix + rel)
            except KeyError as exc:
                raise FileNotFoundError(rel) from exc
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                raise ValueError(f"corrupt member {rel}: {exc}") from exc
        assert self._root is not None
        return (self._root / rel).read_bytes()

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
