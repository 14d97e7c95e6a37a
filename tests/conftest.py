from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from bot import services
from bot.db import upgrade
from bot.web.app import create_app
from tests import appkit
from tests.bundles import clean_bundle
from tests.standin import GitHubStandIn, serve

REAL = Path(__file__).parent / "fixtures" / "real"


@pytest.fixture
def reachable_tmp() -> Iterator[Path]:
    """A temporary folder the runner's candidate users can pass through (not list).

    A verification with isolation runs each side as its own user, who must reach its
    worktree; pytest's own folders are 0700, and every pytest session resets them.
    """
    d = Path(tempfile.mkdtemp(prefix="rsi-test-"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def _clean_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clean_bundle(tmp_path_factory.mktemp("clean") / "bundle")


@pytest.fixture
def bundle(tmp_path: Path, _clean_template: Path) -> Path:
    """A fresh copy of a clean bundle (4 rounds a side, 2 modes, 120 requests a round)."""
    dest = tmp_path / "bundle"
    shutil.copytree(_clean_template, dest)
    return dest


@pytest.fixture
def github() -> Iterator[GitHubStandIn]:
    """GitHub at the HTTP boundary: upstream, the candidate's fork, the runner repo."""
    with serve(app_id=appkit.APP_ID) as gh:
        appkit.populate(gh)
        yield gh


@pytest.fixture
def app(tmp_path: Path, github: GitHubStandIn) -> Iterator[Flask]:
    settings = appkit.settings(tmp_path, github.url)
    upgrade(settings.DATABASE_URL)
    rt = services.build(settings, immediate=True)
    yield create_app(svc=rt)
    rt.db.dispose()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
