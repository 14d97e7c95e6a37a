"""Fetch GitHub's published REST description and webhook examples for the tests.

The GitHub stand-in (``tests/standin``) checks every request the app sends against
GitHub's own OpenAPI description, and the webhook tests replay GitHub's own example
payloads. Both come from npm packages that the Octokit project publishes from GitHub's
sources; we pin exact versions *and* their tarball integrity, so a test run never
silently changes what "valid" means.

Only two files are kept (the OpenAPI tarball is ~28 MB with many variants we don't
need); they land in ``tests/.cache/``, which is ignored by git. Running this again is
cheap: nothing is fetched while the cached copies match the pins.

Usage: ``python tests/fetch_github_fixtures.py`` (``make test`` runs it, and the test
session calls :func:`ensure` itself when the cache is missing). Standard library only,
so it runs before anything else is installed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

# --- Pins -------------------------------------------------------------------------------
OPENAPI_PACKAGE = "@octokit/openapi"
OPENAPI_VERSION = "23.0.2"
OPENAPI_INTEGRITY = (
    "sha512-pV8M7L9GY23AybNvTmo2nyjmpmnt6+2sRE/tqr0ZLQcPS4l"
    "nw7u5eZGNmwRNkBC3D7gZXbFx5AHzLUVRBXGDhg=="
)
OPENAPI_MEMBER = "package/generated/api.github.com.json"

WEBHOOKS_PACKAGE = "@octokit/webhooks-examples"
WEBHOOKS_VERSION = "7.6.1"
WEBHOOKS_INTEGRITY = (
    "sha512-De6U3XB6O3DtCa7bKgCMzTHdeopqqZ6SNivMYJnK65ierK"
    "L1AnNIA0tkRYCRS7lwGT792d+Ps1WbfHlso6MynQ=="
)
WEBHOOKS_MEMBER = "package/api.github.com/index.json"

CACHE_DIR = Path(__file__).resolve().parent / ".cache"
OPENAPI_PATH = CACHE_DIR / "api.github.com.json"
WEBHOOKS_PATH = CACHE_DIR / "webhooks-examples.json"
STAMP_PATH = CACHE_DIR / "versions.json"

NPM_TIMEOUT_S = 300


class FetchError(RuntimeError):
    """A fixture could not be fetched; the message says what to do about it."""


@dataclass(frozen=True)
class Fixture:
    """One file taken out of one pinned npm package."""

    package: str
    version: str
    integrity: str
    member: str
    dest: Path

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"


FIXTURES = (
    Fixture(OPENAPI_PACKAGE, OPENAPI_VERSION, OPENAPI_INTEGRITY, OPENAPI_MEMBER, OPENAPI_PATH),
    Fixture(WEBHOOKS_PACKAGE, WEBHOOKS_VERSION, WEBHOOKS_INTEGRITY, WEBHOOKS_MEMBER, WEBHOOKS_PATH),
)


def _wanted_stamp() -> dict[str, str]:
    return {f.package: f"{f.version} {f.integrity}" for f in FIXTURES}


def is_current() -> bool:
    """True when every fixture is cached and was taken from the pinned packages."""
    if not all(f.dest.is_file() for f in FIXTURES):
        return False
    try:
        stamp = json.loads(STAMP_PATH.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(stamp == _wanted_stamp())


def _npm_pack(spec: str, workdir: Path) -> Path:
    """Download one package tarball with npm (its own cache, config and registry)."""
    npm = shutil.which("npm")
    if npm is None:
        raise FetchError(
            f"npm is not on PATH; install Node.js/npm to fetch the GitHub test fixtures ({spec})."
        )
    try:
        proc = subprocess.run(
            [npm, "pack", "--json", "--silent", spec],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise FetchError(f"`npm pack {spec}` timed out after {NPM_TIMEOUT_S}s") from exc
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise FetchError(f"`npm pack {spec}` failed (exit {proc.returncode}):\n{detail}")
    tarballs = sorted(workdir.glob("*.tgz"))
    if len(tarballs) != 1:
        raise FetchError(f"`npm pack {spec}` left {len(tarballs)} tarballs, expected 1")
    return tarballs[0]


def _integrity(path: Path) -> str:
    digest = hashlib.sha512()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return "sha512-" + base64.b64encode(digest.digest()).decode("ascii")


def _extract_member(tarball: Path, member: str, dest: Path) -> None:
    """Copy one member out of the tarball, atomically, without unpacking the rest."""
    with tarfile.open(tarball, "r:gz") as tar:
        try:
            info = tar.getmember(member)
        except KeyError as exc:
            raise FetchError(f"{tarball.name} has no {member}") from exc
        src = tar.extractfile(info)
        if src is None:
            raise FetchError(f"{member} in {tarball.name} is not a regular file")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        try:
            with src, tmp.open("wb") as out:
                shutil.copyfileobj(src, out)
            json.loads(tmp.read_bytes())  # a truncated download must not be cached
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)


def fetch(fixture: Fixture) -> None:
    """Fetch one fixture, checking the tarball against its pinned integrity."""
    with tempfile.TemporaryDirectory(prefix="gh-fixtures-") as tmp:
        tarball = _npm_pack(fixture.spec, Path(tmp))
        actual = _integrity(tarball)
        if actual != fixture.integrity:
            raise FetchError(
                f"{fixture.spec}: tarball integrity {actual} does not match the pin "
                f"{fixture.integrity}; refusing to use it."
            )
        _extract_member(tarball, fixture.member, fixture.dest)


def ensure() -> None:
    """Make sure both fixtures are cached; a no-op when they already are."""
    if is_current():
        return
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    # The cache ignores itself, so nothing here is ever committed by accident.
    (CACHE_DIR / ".gitignore").write_text("*\n", encoding="utf-8")
    for fixture in FIXTURES:
        fetch(fixture)
    tmp = STAMP_PATH.with_name(f".{STAMP_PATH.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_wanted_stamp(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, STAMP_PATH)


def main() -> int:
    try:
        ensure()
    except FetchError as exc:
        print(f"fetch_github_fixtures: {exc}", file=sys.stderr)
        return 1
    for fixture in FIXTURES:
        print(f"{fixture.spec}: {fixture.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
