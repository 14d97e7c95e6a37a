"""The benchmark files a run keeps beyond its `output`: the per-request records and the
accuracy file when the benchmark writes them elsewhere (the ASR scripts), and whatever
the task's `keep` globs match. Each is copied byte for byte to the same path under the
run's bundle folder as under its scratch `{out}` (`raw/conc8_rep1.jsonl` →
`runs/<id>/raw/conc8_rep1.jsonl`), so the manifest names them as the client wrote them.

Only regular files under `{out}` are copied: a symlink (which candidate code could point
anywhere on the machine) is never followed into the bundle.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from runners.task import Benchmark, render


def _inside(out: Path, p: Path) -> Path | None:
    """`p` relative to `out`, if it lies under it (lexically, after `..` are folded)."""
    norm = Path(os.path.normpath(p))
    try:
        rel = norm.relative_to(out)
    except ValueError:
        return None
    return rel if rel.parts else None


def _regular(out: Path, p: Path) -> bool:
    """A regular file, reached without a symlink on the way from `out`."""
    return p.is_file() and not p.is_symlink() and p.resolve().is_relative_to(out.resolve())


def _copy(src: Path, out: Path, rdir: Path) -> Path:
    dest = rdir / src.relative_to(out)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return dest


def keep(
    bench: Benchmark, vals: Mapping[str, object], rdir: Path, rel: Callable[[Path], str]
) -> tuple[dict[str, object], list[str]]:
    """Copy the run's extra outputs; return the manifest's `files` entries for them
    (`records`, `wer`, `kept`) and the rendered paths of named files that are missing."""
    out = Path(os.path.normpath(str(vals["out"])))
    files: dict[str, object] = {}
    missing: list[str] = []
    for key, template in (("records", bench.records), ("wer", bench.accuracy_output)):
        if template is None:
            continue
        path = Path(render(template, vals))
        inner = _inside(out, path)
        if inner is None or not _regular(out, out / inner):
            missing.append(str(path))
            continue
        files[key] = rel(_copy(out / inner, out, rdir))
    kept: set[str] = set()
    for pattern in bench.keep:
        inner = _inside(out, Path(render(pattern, vals)))
        if inner is None:
            continue
        for src in out.glob(inner.as_posix()):
            if _regular(out, src) and _inside(out, src) is not None:
                kept.add(rel(_copy(src, out, rdir)))
    if bench.keep:
        files["kept"] = sorted(kept)
    return files, missing
