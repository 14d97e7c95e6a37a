"""Small helpers shared by the runner's modules (standard library only)."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

UTC = dt.timezone.utc  # noqa: UP017 - `datetime.UTC` is Python 3.11+; the runner supports 3.10


def iso(t: float | None = None) -> str:
    """`2026-11-30T10:00:12.4Z`: UTC, milliseconds, a trailing Z."""
    when = dt.datetime.fromtimestamp(time.time() if t is None else t, tz=UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_json_atomic(path: Path, doc: Any, indent: int | None = 2) -> None:
    """Write `doc` so that a reader sees the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = json.dumps(doc, indent=indent, allow_nan=False, ensure_ascii=False) + "\n"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def tail(path: Path, lines: int = 40, max_chars: int = 4000) -> str:
    """The last `lines` lines of a (log) file, at most `max_chars` characters; "" if none."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_chars * 4))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    out = "\n".join(text.splitlines()[-lines:])
    return out[-max_chars:]


def round_or_none(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)
