"""`rsi-bot runner-repo DIR`: the runner repository written from this version."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import yaml
from click.testing import CliRunner

from bot import runner_repo as rr
from bot.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _run(dest: Path) -> str:
    result = CliRunner().invoke(main, ["runner-repo", str(dest)])
    assert result.exit_code == 0, result.output
    return result.output


def test_it_writes_the_workflow_the_runner_and_the_lint_config(tmp_path: Path) -> None:
    dest = tmp_path / "runner-repo"
    out = _run(dest)
    workflow = dest / ".github" / "workflows" / "rsi-verify.yml"
    assert workflow.read_bytes() == (ROOT / "runners" / "workflows" / "rsi-verify.yml").read_bytes()
    for rel in ("runners/__main__.py", "runners/verify.py", "runners/dry/server.py"):
        assert (dest / rel).read_bytes() == (ROOT / rel).read_bytes()
    tasks = sorted(p.name for p in (ROOT / "runners" / "tasks").glob("*.toml"))
    assert sorted(p.name for p in (dest / "runners" / "tasks").glob("*.toml")) == tasks
    assert (dest / "runners" / "container" / "Dockerfile").is_file()
    assert (dest / "runners" / "container" / "entrypoint.sh").stat().st_mode & 0o111
    assert not (dest / "runners" / "workflows").exists()
    assert not list(dest.rglob("__pycache__"))
    assert not list(dest.rglob("test_*.py"))
    lint = yaml.safe_load((dest / ".github" / "actionlint.yaml").read_text())
    assert lint == {"self-hosted-runner": {"labels": ["h100", "h200"]}}
    # The same labels this repository lints its copy with.
    ours = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())
    assert ours == lint
    assert "runners/verify.py" in out


def test_rsi_version_names_the_version_commit_and_every_file(tmp_path: Path) -> None:
    dest = tmp_path / "r"
    _run(dest)
    lines = (dest / "RSI-VERSION").read_text().splitlines()
    assert lines[1] == "rsi-bot 0.1.0"
    assert lines[2].startswith("commit ")
    commit = lines[2].split()[1]
    assert commit == "unknown" or len(commit) == 40
    listed = {}
    for line in lines:
        digest, sep, rel = line.partition("  ")
        if sep and len(digest) == 64:
            listed[rel] = digest
    written = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()} - {
        "RSI-VERSION"
    }
    assert set(listed) == written
    for rel, digest in listed.items():
        assert hashlib.sha256((dest / rel).read_bytes()).hexdigest() == digest


def test_running_it_twice_changes_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "r"
    _run(dest)
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    mtimes = {p: p.stat().st_mtime_ns for p in before}
    out = _run(dest)
    assert " 0 written, 0 removed," in out
    after = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert after == before
    assert {p: p.stat().st_mtime_ns for p in after} == mtimes


def _fake_runners(root: Path, files: dict[str, str]) -> Path:
    src = root / "runners"
    (src / "workflows").mkdir(parents=True)
    (src / "workflows" / "rsi-verify.yml").write_text("name: rsi-verify\n")
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return src


def test_files_no_longer_shipped_are_removed_and_foreign_ones_kept(tmp_path: Path) -> None:
    dest = tmp_path / "r"
    old = _fake_runners(tmp_path / "v1", {"a.py": "a", "gone.py": "g", "tasks/old.toml": "o"})
    first = rr.write(dest, source=old, version=("0.1.0", "1" * 40))
    assert "runners/gone.py" in first.written
    (dest / "runners" / "mine.py").write_text("an operator's own file")
    new = _fake_runners(tmp_path / "v2", {"a.py": "a2", "b.py": "b"})
    second = rr.write(dest, source=new, version=("0.2.0", "2" * 40))
    assert sorted(second.removed) == ["runners/gone.py", "runners/tasks/old.toml"]
    assert not (dest / "runners" / "gone.py").exists()
    assert not (dest / "runners" / "tasks").exists()  # emptied, so gone
    assert (dest / "runners" / "a.py").read_text() == "a2"
    assert (dest / "runners" / "b.py").read_text() == "b"
    assert (dest / "runners" / "mine.py").read_text() == "an operator's own file"
    assert second.foreign == ["runners/mine.py"]
    assert "rsi-bot 0.2.0" in (dest / "RSI-VERSION").read_text()
    third = rr.write(dest, source=new, version=("0.2.0", "2" * 40))
    assert third.written == []
    assert third.removed == []


def test_a_local_edit_to_a_shipped_file_is_overwritten(tmp_path: Path) -> None:
    dest = tmp_path / "r"
    _run(dest)
    (dest / "runners" / "verify.py").write_text("# drifted")
    out = _run(dest)
    assert "wrote    runners/verify.py" in out
    assert (dest / "runners" / "verify.py").read_bytes() == (
        ROOT / "runners" / "verify.py"
    ).read_bytes()


def test_the_copy_runs_its_tasks_check(tmp_path: Path) -> None:
    import subprocess
    import sys

    dest = tmp_path / "r"
    _run(dest)
    shutil.rmtree(dest / "runners" / "container")
    done = subprocess.run(
        [sys.executable, "-m", "runners", "tasks"], cwd=dest, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cosyvoice3:" in done.stdout


def test_a_dir_whose_parent_is_missing_is_refused_not_made(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["runner-repo", str(tmp_path / "typo" / "runner-repo")])
    assert result.exit_code == 2
    assert f"{tmp_path / 'typo'} is not a folder" in result.stderr
    assert not (tmp_path / "typo").exists()


def test_it_ends_with_the_next_steps(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    out = _run(plain)
    tail = out[out.index("next:") :]
    assert f"1. {plain} is not a git clone: `git init` there" in tail
    assert f"2. commit and push: git -C {plain} add -A" in tail
    assert "register a self-hosted runner per GPU kind" in tail
    assert "set RSI_RUNNER_REPO=OWNER/NAME" in tail
    clone = tmp_path / "clone"
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    first = _run(clone)
    assert "1. commit and push" in first[first.index("next:") :]
    again = _run(clone)  # nothing changed: nothing to commit
    steps = again[again.index("next:") :]
    assert "commit and push" not in steps
    assert "1. register a self-hosted runner" in steps
