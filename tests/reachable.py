"""Files of this checkout that candidate code runs by path, copied where the candidate
users can read them: the checkout itself may be in a private folder (a clone in
`mktemp -d` or under root's 0700 home), which the runner copes with for `{rsi_root}` but a
test's hostile head, naming a path of its own, would not."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def dry_scripts() -> Path:
    """A readable copy of `runners/dry` (the dry server and clients), one per process."""
    top = Path(tempfile.mkdtemp(prefix="rsi-dry-"))
    top.chmod(0o755)
    atexit.register(shutil.rmtree, top, True)
    dry = top / "dry"
    shutil.copytree(ROOT / "runners" / "dry", dry, ignore=shutil.ignore_patterns("__pycache__"))
    return dry
