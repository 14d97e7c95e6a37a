"""The runner (root) reads a file of the candidate's worktree only as a bounded regular
file: before, a variant check on a FIFO held `verify` past every time limit, and one on a
symlink to /dev/zero would have filled its memory."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from runners import task
from runners.task import HeadFileError, head_file
from tests.test_runner_verify import ROOT, git, runner_cmd, runner_env


def test_a_regular_file_is_read_and_a_missing_one_is_none(tmp_path: Path) -> None:
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "a.py").write_text("EngineStageConfig\n")
    assert head_file(tmp_path, "cfg/a.py") == b"EngineStageConfig\n"
    assert head_file(tmp_path, "cfg/b.py") is None
    assert head_file(tmp_path, "cfg/a.py", read=False) == b""


@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero", "link-on-the-way", "folder", "big"])
def test_a_file_the_runner_will_not_read_is_refused_at_once_naming_it(
    tmp_path: Path, kind: str
) -> None:
    (tmp_path / "cfg").mkdir()
    target = tmp_path / "cfg" / "a.py"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "link-to-dev-zero":
        target.symlink_to("/dev/zero")
    elif kind == "link-on-the-way":
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "a.py").write_text("x")
        (tmp_path / "cfg").rmdir()
        (tmp_path / "cfg").symlink_to(tmp_path / "elsewhere")
    elif kind == "folder":
        target.mkdir()
    else:
        target.write_bytes(b"x" * (task.HEAD_FILE_CAP + 1))
    t0 = time.monotonic()
    with pytest.raises(HeadFileError, match=r"cfg/a\.py"):
        head_file(tmp_path, "cfg/a.py")
    assert time.monotonic() - t0 < 1.0


@pytest.mark.parametrize("rel", ["../x", "/etc/passwd", ""])
def test_a_path_outside_the_worktree_is_refused(tmp_path: Path, rel: str) -> None:
    with pytest.raises(HeadFileError):
        head_file(tmp_path, rel)


def test_a_head_whose_variant_file_is_a_link_to_dev_zero_fails_to_start_naming_it(
    tmp_path: Path,
) -> None:
    """The head commits `cfg` as a symbolic link to /dev/zero (git keeps links); the
    variant check fails its runs at once as start-failed, and the base is measured."""
    dry = task.resolve("dry").read_text()
    command = task.load("dry").server.command
    toml = tmp_path / "dry-variant.toml"
    toml.write_text(
        dry + "\n[[server.variants]]\n"
        f'when_contains = {{ file = "cfg", text = "fast" }}\ncommand = {json.dumps(command)}\n'
    )
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "cfg").write_text("fast\n")
    (repo / "rsi-dry.json").write_text("{}")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "cfg").unlink()
    (repo / "cfg").symlink_to("/dev/zero")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "head")
    head = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "bundle"
    cmd = runner_cmd(repo, base, head, out, "--task", str(toml), "--isolation", "none")
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, env=runner_env(), capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t0 < 60
    m = json.loads((out / "manifest.json").read_text())
    for run in m["runs"]:
        if run["side"] == "head":
            assert (run["status"], run["failure"]) == ("failed", "start-failed"), r.stderr
            assert "variant check refused a file of the head: cfg" in run["error"]
        else:
            assert run["status"] == "ok"
