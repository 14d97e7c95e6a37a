"""The App's own files on local disk — the SQLite database, the SQLite queue, the artifact
folder — are its owner's alone: folders it creates are 0700 and files 0600, whatever the
process's umask. Folders and files that already exist are left as they are."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` and any missing parent, each 0700 (like `mkdir -p -m 700`, which
    gives the parents it makes the umask's mode instead)."""
    path = Path(path).expanduser()
    missing: list[Path] = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made by another process meanwhile
            d.mkdir(mode=DIR_MODE)
            os.chmod(d, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Create `path` empty with mode 0600 (and its folder, 0700) unless it exists, so
    that whatever opens it next (SQLite) finds it owner-only."""
    path = Path(path).expanduser()
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return path
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return path
