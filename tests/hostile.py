"""Hostile bundles, made the way an attacker would make them, cheaply: huge members are
deflate streams of one repeated, fully flushed block, so a 1.5 GB member costs a 1.5 MB
file and a second to write, and no test ever holds the unpacked bytes."""

from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

MiB = 1024 * 1024
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Member:
    name: str
    data: bytes  # what is written in the archive (compressed unless method is 0)
    crc: int
    size: int  # unpacked size
    method: int = 8  # deflate
    flags: int = 0
    mode: int = 0o100644


def deflated(content: bytes, name: str) -> Member:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    data = c.compress(content) + c.flush()
    return Member(name, data, zlib.crc32(content), len(content))


def _flushed(data: bytes) -> bytes:
    """`data` as deflate blocks that end fully flushed: they refer to nothing before
    them, so such pieces can be laid one after another, and repeated."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(zlib.Z_FULL_FLUSH)


def stream(name: str, parts: list[bytes | tuple[bytes, int]]) -> Member:
    """One deflate stream of the parts: bytes as they are, `(block, n)` as `block`
    repeated n times (compressed once)."""
    out: list[bytes] = []
    crc = size = 0
    for part in parts:
        block, times = (part, 1) if isinstance(part, bytes) else part
        out.append(_flushed(block) * times)
        for _ in range(times):
            crc = zlib.crc32(block, crc)
        size += len(block) * times
    last = zlib.compressobj(9, zlib.DEFLATED, -15)
    out.append(last.flush())
    return Member(name, b"".join(out), crc, size)


def padded(name: str, head: bytes, pad: bytes, times: int, tail: bytes = b"") -> Member:
    """`head`, then `pad` repeated `times` times, then `tail`."""
    return stream(name, [head, (pad, times), tail])


def write_zip(path: Path, members: list[Member]) -> Path:
    """A zip written by hand (no zip64: every member below 4 GiB)."""
    central = b""
    with open(path, "wb") as f:
        for m in members:
            offset = f.tell()
            name = m.name.encode()
            f.write(
                struct.pack(
                    "<IHHHHHIIIHH",
                    0x04034B50,
                    20,
                    m.flags,
                    m.method,
                    0,
                    0x21,
                    m.crc,
                    len(m.data),
                    m.size,
                    len(name),
                    0,
                )
                + name
            )
            f.write(m.data)
            central += (
                struct.pack(
                    "<IHHHHHHIIIHHHHHII",
                    0x02014B50,
                    (3 << 8) | 20,
                    20,
                    m.flags,
                    m.method,
                    0,
                    0x21,
                    m.crc,
                    len(m.data),
                    m.size,
                    len(name),
                    0,
                    0,
                    0,
                    0,
                    m.mode << 16,
                    offset,
                )
                + name
            )
        start = f.tell()
        f.write(central)
        f.write(
            struct.pack(
                "<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), start, 0
            )
        )
    return path


def folder_members(folder: Path, prefix: str = "") -> list[Member]:
    out = []
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            out.append(deflated(p.read_bytes(), prefix + p.relative_to(folder).as_posix()))
    return out


def tar_header(name: str, size: int, kind: bytes = tarfile.REGTYPE, link: str = "") -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info.tobuf(format=tarfile.GNU_FORMAT)


def tar_entry(name: str, data: bytes) -> bytes:
    return tar_header(name, len(data)) + data + b"\0" * (-len(data) % 512)


def write_targz(path: Path, head: bytes, zeros: int = 0, tail: bytes = b"", more: int = 0) -> Path:
    """A gzip stream of `head`, `zeros` MiB of zero bytes, `tail`, then `more` members
    of `zeros` MiB each (zero bytes too), and the end of the tar."""
    zero = (b"\0" * MiB, zeros)
    parts: list[bytes | tuple[bytes, int]] = [head, zero, tail]
    for i in range(more):
        parts += [tar_header(f"more/{i}.bin", zeros * MiB), zero]
    parts.append(b"\0" * 1024)
    m = stream("", parts)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")
        f.write(m.data)
        f.write(struct.pack("<II", m.crc, m.size & 0xFFFFFFFF))
    return path


def folder_tar(folder: Path) -> bytes:
    return b"".join(
        tar_entry(p.relative_to(folder).as_posix(), p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    )


# ------------------------------------------------------------ the CLI, measured

_MEASURED = """
import resource, sys
from bot.cli import main
try:
    main(sys.argv[1:], prog_name="rsi-bot")
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"PEAK-KIB {peak}", file=sys.stderr)
sys.exit(code)
"""


@dataclass
class Measured:
    code: int
    stdout: str
    stderr: str
    peak_mib: float
    seconds: float


def run_cli(*args: str, timeout: float = 120) -> Measured:
    """`rsi-bot evidence ARGS` in a process of its own: exit code, output, peak RSS."""
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURED, "evidence", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
        preexec_fn=_cap_memory,
    )
    peak = 0.0
    for line in proc.stderr.splitlines():
        if line.startswith("PEAK-KIB "):
            peak = int(line.split()[1]) / 1024
    return Measured(proc.returncode, proc.stdout, proc.stderr, peak, time.monotonic() - t0)


def _cap_memory() -> None:
    """A runaway reader dies at 4 GiB instead of taking the machine with it."""
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
