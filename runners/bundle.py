"""The bundle on disk (docs/bundle.md): run folders, logs, and the manifest.

`manifest.json` is written once, last, atomically (a temporary file renamed over it),
after every run's files and logs are closed. A verification that is cut short still
gets one, with `complete: false` and the runs so far; one killed outright (SIGKILL)
leaves none, which the evidence engine reports as an unreadable bundle. Neither can be
mistaken for a whole one. The manifest lists the SHA-256 of every other file
(`digests`); `check` verifies them before the bundle leaves the machine, and the
evidence engine verifies them again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runners.util import iso, write_json_atomic

SCHEMA = "rsi-bundle/1"
MANIFEST = "manifest.json"


class BundleError(RuntimeError):
    pass


class BundleWriter:
    def __init__(self, out: Path, header: dict[str, Any]) -> None:
        if out.exists() and any(out.iterdir()):
            raise BundleError(f"{out} is not empty; give a new folder for the bundle")
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.header = dict(header)
        self.runs: list[dict[str, Any]] = []
        self.on_add: Callable[[dict[str, Any]], None] | None = None  # progress, as runs end
        self.finalized = False
        self.started_at = iso()

    def rel(self, path: Path) -> str:
        return path.relative_to(self.out).as_posix()

    def run_dir(self, run_id: str) -> Path:
        d = self.out / "runs" / run_id
        d.mkdir(parents=True, exist_ok=True)
        return d

    def log_dir(self, run_id: str) -> Path:
        d = self.out / "logs" / run_id
        d.mkdir(parents=True, exist_ok=True)
        return d

    def add(self, run: dict[str, Any]) -> None:
        if self.finalized:
            raise BundleError("the manifest is already written")
        self.runs.append(run)
        if self.on_add is not None:
            self.on_add(run)

    def update(self, **fields: Any) -> None:
        self.header.update(fields)

    def manifest(self, complete: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": SCHEMA}
        doc.update(self.header)
        doc["started_at"] = self.started_at
        doc["ended_at"] = iso()
        doc["runs"] = self.runs
        doc["digests"] = digests(self.out)
        doc["complete"] = complete  # last key, as docs/bundle.md says
        return doc

    def finalize(self, complete: bool) -> Path:
        """Write `manifest.json` (once). `complete` only when every planned run ran."""
        if self.finalized:
            return self.out / MANIFEST
        statuses = {r.get("status") for r in self.runs}
        if complete and "skipped" in statuses:
            complete = False
        write_json_atomic(self.out / MANIFEST, self.manifest(complete))
        self.finalized = True
        _give_back(self.out)
        return self.out / MANIFEST


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def digests(out: Path) -> dict[str, str]:
    """SHA-256 of every file in the bundle but the manifest, by relative path."""
    found: dict[str, str] = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if rel != MANIFEST and p.is_file() and not p.is_symlink():
            found[rel] = _sha256(p)
    return found


def check(out: Path) -> list[str]:
    """What is wrong with a bundle on disk: files changed, missing or not listed."""
    import json

    try:
        listed = json.loads((out / MANIFEST).read_text(encoding="utf-8")).get("digests")
    except (OSError, ValueError, AttributeError) as exc:
        return [f"{MANIFEST} cannot be read: {exc}"]
    if not isinstance(listed, dict):
        return [f"{MANIFEST} lists no digests"]
    now = digests(out)
    problems = [
        f"{r}: changed after the manifest was written"
        for r in listed
        if r in now and now[r] != listed[r]
    ]
    problems += [f"{r}: listed in the manifest but missing" for r in listed if r not in now]
    problems += [f"{r}: not listed in the manifest" for r in now if r not in listed]
    return problems


def _give_back(out: Path) -> None:
    """Run through sudo: the bundle goes back to the user who asked for it (the upload)."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or not uid or not gid or not uid.isdigit() or not gid.isdigit():
        return
    for p in [out, *out.rglob("*")]:
        os.chown(p, int(uid), int(gid), follow_symlinks=False)
