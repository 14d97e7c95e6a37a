"""The bundle on disk (shared/design/bundle.md): run folders, logs, and the manifest.

`manifest.json` is written once, last, atomically (a temporary file renamed over it),
after every run's files and logs are closed. A verification that is cut short still
gets one, with `complete: false` and the runs so far; one killed outright (SIGKILL)
leaves none, which the evidence engine reports as an unreadable bundle. Neither can be
mistaken for a whole one.
"""

from __future__ import annotations

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

    def update(self, **fields: Any) -> None:
        self.header.update(fields)

    def manifest(self, complete: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": SCHEMA}
        doc.update(self.header)
        doc["started_at"] = self.started_at
        doc["ended_at"] = iso()
        doc["runs"] = self.runs
        doc["complete"] = complete  # last key, as bundle.md asks
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
        return self.out / MANIFEST
