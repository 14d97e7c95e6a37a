"""What the candidate users can reach: they run as unprivileged users, so the interpreter,
the runner's own scripts and the work folder must be searchable (and the files readable)
by others. A clone under root's 0700 home or in `mktemp -d` is not; the runner then uses a
copy of its scripts in the work folder, and `rsi-runner sandbox` names what to fix."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path


def blocked(path: Path) -> Path | None:
    """The first folder on the way to `path` (itself included when it is one) that
    others cannot pass through, or None; a folder not made yet is judged by the folders
    it will be made in."""
    path = path.resolve()
    folders = [*reversed(path.parents), *([path] if path.is_dir() else [])]
    for folder in folders:
        if folder.exists() and not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return None


def unreadable(root: Path) -> Path | None:
    """The first file under `root` others cannot read, or folder they cannot list."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        here = Path(folder)
        if here.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH:
            return here
        for name in files:
            if not (here / name).stat().st_mode & stat.S_IROTH:
                return here / name
    return None


def why_unreachable(root: Path) -> str | None:
    """Why the candidate users could not run scripts under `root`, or None."""
    stop = blocked(root)
    if stop is not None:
        return f"{stop} is not searchable by others"
    bad = unreadable(root)
    if bad is not None:
        return f"{bad} is not readable by others"
    return None


def copy_package(src: Path, dest: Path) -> None:
    """A copy of the package folder `src` at `dest` that others can read (root's own:
    the candidates can read it, not change it)."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for folder, _, files in os.walk(dest):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
