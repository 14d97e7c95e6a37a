"""Write or update the runner repository from this version of rsi-bot.

The App dispatches `rsi-verify` in a repository of its own, which holds a copy of
`runners/` and of its workflow. `rsi-bot runner-repo DIR` writes that copy, so the two
never drift:

- `.github/workflows/rsi-verify.yml` — `runners/workflows/rsi-verify.yml`;
- `runners/` — the runner's Python files, its task files, its shell scripts, its
  documents and its container recipe (not `workflows/`, which lives above);
- `.github/actionlint.yaml` — the self-hosted runners' labels, for linting there;
- `RSI-VERSION` — the rsi-bot version and commit the copy came from, and every file it
  wrote with its SHA-256.

Running it twice changes nothing. A file an older version shipped and this one does not
is removed (the previous `RSI-VERSION` says which); a file someone added to `runners/`
by hand is left alone and reported.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path

VERSION_FILE = "RSI-VERSION"
WORKFLOW = ".github/workflows/rsi-verify.yml"
ACTIONLINT = ".github/actionlint.yaml"
GPU_LABELS = ("h100", "h200")
"""One label per GPU kind, besides `self-hosted, linux` (the workflow's `runs-on`)."""

SHIPPED_SUFFIXES = (".py", ".toml", ".sh", ".md")
CONTAINER = "container"
SKIPPED_DIRS = frozenset({"__pycache__", "workflows", "tests"})

ACTIONLINT_TEXT = (
    "# Written by `rsi-bot runner-repo`: the self-hosted GPU runners carry one label per GPU\n"
    "# kind besides `self-hosted, linux` (the workflow's runs-on: [self-hosted, linux, <gpu>]).\n"
    "self-hosted-runner:\n"
    "  labels:\n" + "".join(f"    - {label}\n" for label in GPU_LABELS)
)


@dataclass
class Result:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    """Files under runners/ that no version of rsi-bot wrote: left as they are."""


def _runners_root() -> Path:
    return Path(str(resources.files("runners")))


def shipped_files(root: Path | None = None) -> dict[str, bytes]:
    """Path in the runner repository → content, for everything this version ships."""
    src = root or _runners_root()
    out: dict[str, bytes] = {}
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if not path.is_file() or SKIPPED_DIRS & set(rel.parts[:-1]):
            continue
        if path.suffix in SHIPPED_SUFFIXES or rel.parts[0] == CONTAINER:
            out[f"runners/{rel.as_posix()}"] = path.read_bytes()
    out[WORKFLOW] = (src / "workflows" / "rsi-verify.yml").read_bytes()
    out[ACTIONLINT] = ACTIONLINT_TEXT.encode()
    return out


def source_version() -> tuple[str, str]:
    """(rsi-bot's version, the commit of the checkout it runs from or "unknown")."""
    version = metadata.version("rsi-bot")
    here = _runners_root().parent
    try:
        done = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return version, "unknown"
    commit = done.stdout.strip()
    if done.returncode != 0 or len(commit) != 40:
        return version, "unknown"
    status = subprocess.run(
        ["git", "-C", str(here), "status", "--porcelain", "--", "runners"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if status.stdout.strip():
        commit += " (runners/ changed since)"
    return version, commit


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def version_text(version: str, commit: str, files: dict[str, bytes]) -> str:
    lines = [
        "# Written by `rsi-bot runner-repo`; do not edit. Update with a newer rsi-bot.",
        f"rsi-bot {version}",
        f"commit {commit}",
        "",
        "# sha256  path",
    ]
    lines += [f"{_sha(files[p])}  {p}" for p in sorted(files)]
    return "\n".join(lines) + "\n"


def previous_files(text: str) -> set[str]:
    """The paths an earlier RSI-VERSION lists."""
    out = set()
    for line in text.splitlines():
        parts = line.split("  ", 1)
        if len(parts) == 2 and len(parts[0]) == 64 and not line.startswith("#"):
            out.add(parts[1])
    return out


def write(
    dest: Path, *, source: Path | None = None, version: tuple[str, str] | None = None
) -> Result:
    """Write the runner repository's rsi-bot files into `dest` (created if missing)."""
    files = shipped_files(source)
    ver, commit = version or source_version()
    files_with_version = dict(files)
    result = Result()
    dest.mkdir(parents=True, exist_ok=True)
    old_version = dest / VERSION_FILE
    before = previous_files(old_version.read_text()) if old_version.is_file() else set()
    for rel in sorted(before - set(files)):
        target = dest / rel
        ours = rel.startswith(("runners/", ".github/")) and ".." not in Path(rel).parts
        if ours and (target.is_file() or target.is_symlink()):
            target.unlink()
            result.removed.append(rel)
    files_with_version[VERSION_FILE] = version_text(ver, commit, files).encode()
    for rel, content in sorted(files_with_version.items()):
        target = dest / rel
        if target.is_file() and not target.is_symlink() and target.read_bytes() == content:
            result.unchanged.append(rel)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_bytes(content)
        if rel.endswith(".sh"):
            target.chmod(0o755)
        result.written.append(rel)
    _prune_empty_dirs(dest / "runners")
    if (dest / "runners").is_dir():
        for path in sorted((dest / "runners").rglob("*")):
            rel = path.relative_to(dest).as_posix()
            if path.is_file() and rel not in files and "__pycache__" not in path.parts:
                result.foreign.append(rel)
    return result


def _prune_empty_dirs(root: Path) -> None:
    if not root.is_dir():
        return
    for d in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
