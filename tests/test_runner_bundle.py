"""The bundle writer: run files first, the manifest last and whole, `complete` honest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidence.model import Manifest
from runners.bundle import BundleError, BundleWriter
from runners.util import iso, tail, write_json_atomic

HEADER = {
    "verification_id": "v-test",
    "repo": "owner/repo",
    "task": "dry",
    "base": {"sha": "a" * 40, "ref": "main"},
    "head": {"sha": "b" * 40, "ref": "topic", "repo": "fork/repo"},
    "gpu": "CPU",
    "environment": {},
}


def run(rid: str, side: str, status: str = "ok") -> dict[str, object]:
    return {
        "id": rid,
        "side": side,
        "round": 1,
        "mode": "streaming",
        "concurrency": 4,
        "status": status,
        "files": {},
    }


def test_manifest_is_written_last_and_validates(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    w = BundleWriter(out, HEADER)
    d = w.run_dir("r1-base-stream-c4")
    (d / "speed_results.json").write_text("{}")
    w.add(run("r1-base-stream-c4", "base"))
    w.add(run("r1-head-stream-c4", "head"))
    assert not (out / "manifest.json").exists(), "no manifest until the schedule is done"
    path = w.finalize(complete=True)
    doc = json.loads(path.read_text())
    assert doc["schema"] == "rsi-bundle/1"
    assert doc["complete"] is True
    assert list(doc)[-1] == "complete"
    assert [r["id"] for r in doc["runs"]] == ["r1-base-stream-c4", "r1-head-stream-c4"]
    Manifest.model_validate(doc)
    assert not list(out.glob(".manifest.json.*")), "no temporary file is left behind"
    with pytest.raises(BundleError, match="already written"):
        w.add(run("r2-base-stream-c4", "base"))
    assert w.finalize(complete=False) == path  # once only
    assert json.loads(path.read_text())["complete"] is True


def test_skipped_runs_never_make_a_complete_bundle(tmp_path: Path) -> None:
    w = BundleWriter(tmp_path / "b", HEADER)
    w.add(run("r1-base-stream-c4", "base"))
    w.add(run("r1-head-stream-c4", "head", status="skipped"))
    doc = json.loads(w.finalize(complete=True).read_text())
    assert doc["complete"] is False


def test_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "manifest.json").write_text("{}")
    with pytest.raises(BundleError, match="not empty"):
        BundleWriter(tmp_path / "old", HEADER)


def test_atomic_write_replaces_whole_files(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    write_json_atomic(p, {"a": 1})
    write_json_atomic(p, {"b": [1, 2]})
    assert json.loads(p.read_text()) == {"b": [1, 2]}
    with pytest.raises(ValueError, match="Out of range float"):
        write_json_atomic(p, {"c": float("nan")})
    assert json.loads(p.read_text()) == {"b": [1, 2]}, "a failed write leaves the old file"


def test_tail_and_iso(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail(log, lines=3) == "line 97\nline 98\nline 99"
    assert tail(tmp_path / "missing.log") == ""
    assert iso(0) == "1970-01-01T00:00:00.000Z"
