from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.bundles import clean_bundle

REAL = Path(__file__).parent / "fixtures" / "real"


@pytest.fixture(scope="session")
def _clean_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clean_bundle(tmp_path_factory.mktemp("clean") / "bundle")


@pytest.fixture
def bundle(tmp_path: Path, _clean_template: Path) -> Path:
    """A fresh copy of a clean bundle (4 rounds a side, 2 modes, 120 requests a round)."""
    dest = tmp_path / "bundle"
    shutil.copytree(_clean_template, dest)
    return dest
