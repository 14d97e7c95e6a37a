"""The import layer rules in tests/layers.py: each can fail, and the repository obeys them.

Each rule gets a tiny fake tree that breaks it once, so a rule that silently stopped
matching (a typo in a package name, a missed import form) shows up here as a failure.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.layers import main, violations

REPO = Path(__file__).resolve().parent.parent


def tree(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path -> source) under root and return root."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("from bot import models\n", "bot"),
        ("import flask\n", "flask"),
        ("def f() -> None:\n    from github import Github\n", "github"),
    ],
)
def test_evidence_must_not_import_the_app(tmp_path: Path, source: str, target: str) -> None:
    root = tree(tmp_path, {"evidence/__init__.py": "", "evidence/x.py": source})
    found = violations(root)
    assert len(found) == 1
    assert found[0].startswith("evidence/x.py:")
    assert "evidence must not import" in found[0]
    assert found[0].endswith(f"({target})")


def test_runners_import_only_stdlib_and_runners(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "runners/__init__.py": "",
            "runners/util.py": "",
            "runners/x.py": """\
                from __future__ import annotations
                import json
                from collections.abc import Mapping
                from . import util
                from runners.util import *

                def load() -> None:
                    import numpy
            """,
            "runners/reference/__init__.py": "",
            "runners/reference/model.py": "import torch\n",
        },
    )
    assert violations(root) == [
        "runners/x.py:8: runners may import only the stdlib and runners (numpy)"
    ]


def test_handlers_must_not_import_each_other(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "bot/__init__.py": "",
            "bot/handlers/__init__.py": "",
            "bot/handlers/context.py": "",
            "bot/handlers/registry.py": "",
            "bot/handlers/commands.py": "",
            "bot/handlers/pushes.py": """\
                from bot.handlers import context, registry
                from bot import handlers
                from . import commands

                def later() -> None:
                    from ..handlers.commands import run
            """,
        },
    )
    assert violations(root) == [
        "bot/handlers/pushes.py:3: handlers must not import each other (bot.handlers.commands)",
        "bot/handlers/pushes.py:6: handlers must not import each other (bot.handlers.commands)",
    ]


def test_handler_rule_passes_without_handlers(tmp_path: Path) -> None:
    root = tree(tmp_path, {"bot/__init__.py": "", "bot/features/x.py": "import json\n"})
    assert violations(root) == []


def test_verification_machine_does_no_io(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "bot/__init__.py": "",
            "bot/verification/__init__.py": "",
            "bot/verification/reasons.py": "",
            "bot/verification/machine.py": """\
                from __future__ import annotations
                import enum
                from collections.abc import Mapping
                from typing import TYPE_CHECKING
                from .reasons import Reason

                if TYPE_CHECKING:
                    from sqlalchemy.orm import Session

                def save() -> None:
                    import os
            """,
        },
    )
    assert violations(root) == [
        "bot/verification/machine.py:8: the verification machine must not do I/O (sqlalchemy.orm)",
        "bot/verification/machine.py:11: the verification machine must not do I/O (os)",
    ]


def test_function_level_import_closes_a_cycle(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "bot/__init__.py": "",
            "bot/a.py": "from bot import b\n",
            "bot/b.py": "from . import c\n",
            "bot/c.py": "def later() -> None:\n    import bot.a\n",
        },
    )
    assert violations(root) == ["bot/a.py:1: import cycle bot.a -> bot.b -> bot.c -> bot.a"]


def test_cycle_through_a_package_init_is_reported_once(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "bot/__init__.py": "",
            "bot/feat/__init__.py": "from bot.feat.one import router\n",
            "bot/feat/one.py": "from bot.tasks import queue\n",
            "bot/tasks.py": "queue = 1\n\ndef run() -> None:\n    import bot.feat\n",
        },
    )
    assert violations(root) == [
        "bot/feat/__init__.py:1: import cycle bot.feat -> bot.feat.one -> bot.tasks -> bot.feat"
    ]


def test_type_checking_imports_do_not_make_cycles(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "bot/__init__.py": "",
            "bot/a.py": "from bot import b\n",
            "bot/b.py": """\
                import typing
                if typing.TYPE_CHECKING:
                    from bot.a import Thing
                else:
                    import json
            """,
            "bot/migrations/env.py": "from bot import a\n",
            "bot/models.py": "from bot.migrations import env\n",
        },
    )
    assert violations(root) == []


def test_only_bot_github_talks_to_github(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "bot/__init__.py": "",
            "bot/github/__init__.py": "import requests\nfrom github import Github\n",
            "bot/flow.py": """\
                from typing import TYPE_CHECKING
                from bot import github
                if TYPE_CHECKING:
                    from github.Repository import Repository
            """,
            "bot/setup.py": "def fetch() -> None:\n    import requests\n",
        },
    )
    assert violations(root) == [
        "bot/flow.py:4: only bot/github/ may import github or requests (github.Repository)",
        "bot/setup.py:2: only bot/github/ may import github or requests (requests)",
    ]


def test_unparsable_file_is_reported(tmp_path: Path) -> None:
    root = tree(tmp_path, {"evidence/__init__.py": "", "evidence/x.py": "import (\n"})
    (found,) = violations(root)
    assert found.startswith("evidence/x.py:1: cannot parse:")


def test_relative_import_above_the_packages_is_reported(tmp_path: Path) -> None:
    root = tree(tmp_path, {"evidence/__init__.py": "", "evidence/x.py": "from .. import y\n"})
    assert violations(root) == ["evidence/x.py:1: relative import beyond the top-level package"]


def test_main_prints_one_line_per_violation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean = tree(tmp_path / "clean", {"evidence/__init__.py": "import json\n"})
    assert main([str(clean)]) == 0
    assert capsys.readouterr().out == "layers: ok\n"
    broken = tree(tmp_path / "broken", {"evidence/__init__.py": "import flask\n"})
    assert main([str(broken)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "evidence/__init__.py:1: evidence must not import bot, flask or github (flask)"
    ]


def test_repository_obeys_layers() -> None:
    found = violations(REPO)
    assert found == [], "import layer violations:\n" + "\n".join(found)
