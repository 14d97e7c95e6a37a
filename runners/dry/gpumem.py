"""GPU memory as the dry stand-ins take it, on a simulated GPU (standard library only).

The simulated GPU (`RSI_DRY_GPU`, a folder; `RSI_DRY_GPU_MIB`, its size) holds one file
per live server with the MiB it took, locked for the server's life: the runner's `dry`
backend (runners/gpu.py `DryGpu`) reads the sum of the locked files as the memory in use.

A server's stages take memory in the order given, each as a serving engine would:

    NAME=FRACTION:free:MIN   SGLang's --mem-fraction-static: FRACTION of the memory free
                             when the stage starts (weights and pool together)
    NAME=FRACTION:total:MIN  a budget of the whole GPU (SGLang-Omni's gpu_memory_fraction)
    NAME=0:fixed:MIB         what a stage holds whatever it is told (a vocoder's pool)

MIN is the stage's weights: a stage given less cannot load, and the server exits as one
out of memory does; so does one that would take more than the GPU has left.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

FOLDER_VAR = "RSI_DRY_GPU"
SIZE_VAR = "RSI_DRY_GPU_MIB"
H100_MIB = 81559  # what NVML reports for an 80 GB H100
BASES = ("free", "total", "fixed")


class OutOfMemory(Exception):
    pass


def held_mib(folder: Path) -> int:
    """The memory the live dry servers hold: the sum of the files still locked (a file
    no process holds a lock on is a dead server's, and is removed)."""
    total = 0
    for path in sorted(folder.glob("*.mib")):
        try:
            with path.open("rb") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    text = f.read(32).decode("ascii", "replace").strip()
                    total += int(text) if text.isdigit() else 0
                    continue
            with contextlib.suppress(OSError):
                path.unlink()  # we got the lock: its server is gone
        except OSError:
            continue
    return total


def parse_stage(spec: str) -> tuple[str, float, str, int]:
    """`NAME=FRACTION:BASIS:MIB` → (name, fraction, basis, mib)."""
    name, eq, rest = spec.partition("=")
    parts = rest.split(":")
    if not eq or not name or len(parts) != 3 or parts[1] not in BASES:
        raise ValueError(f"--gpu-stage {spec!r}: write NAME=FRACTION:{'|'.join(BASES)}:MIB")
    return name, float(parts[0]), parts[1], int(parts[2])


def take(stages: list[str], tag: str) -> tuple[IO[bytes], list[str]] | None:
    """Take each stage's memory on the simulated GPU; the locked file (keep it open for the
    server's life) and a line per stage. None when no simulated GPU is set."""
    folder = os.environ.get(FOLDER_VAR)
    if not stages or not folder:
        return None
    size = os.environ.get(SIZE_VAR, "")
    total = int(size) if size.isdigit() else H100_MIB
    path = Path(folder) / f"{tag}.mib"
    # locked before it is a `*.mib` the runner reads: an unlocked one is a dead server's
    tmp = Path(folder) / f".{tag}.tmp"
    f = tmp.open("wb")
    os.chmod(tmp, 0o644)
    fcntl.flock(f, fcntl.LOCK_EX)
    f.write(b"0")
    f.flush()
    tmp.rename(path)
    try:
        return f, _stages(f, stages, Path(folder), total)
    except BaseException:
        f.close()  # its memory with it: a server that cannot start holds nothing
        path.unlink(missing_ok=True)
        raise


def _stages(f: IO[bytes], stages: list[str], folder: Path, total: int) -> list[str]:
    mine = 0
    lines = []
    for spec in stages:
        name, fraction, basis, weights = parse_stage(spec)
        free = total - held_mib(folder)
        if basis == "free":
            want = int(fraction * free)
        elif basis == "total":
            want = int(fraction * total)
        else:
            want = weights
        if want < weights:
            raise OutOfMemory(
                f"stage {name}: {want} MiB ({basis} {fraction}) cannot hold its {weights} MiB "
                "of weights"
            )
        if want > free:
            raise OutOfMemory(f"stage {name}: {want} MiB wanted, {free} MiB free")
        mine += want
        f.seek(0)
        f.truncate()
        f.write(str(mine).encode())
        f.flush()
        lines.append(f"stage {name}: {want} MiB ({basis} {fraction}; {free} MiB were free)")
    return lines
