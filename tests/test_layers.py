"""The import layer rules in tests/layers.py: each can fail, and the repository obeys them.

Each rule gets a tiny fake tree that breaks it once, so a rule that silently stopped
matching (a typo in a package name, a missed import form) shows up here as a failure.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.layers import KNOWN_EXCEPTIONS, main, violations

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


def test_type_checking_imports_make_cycles_too(tmp_path: Path) -> None:
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
    assert violations(root) == ["bot/a.py:1: import cycle bot.a -> bot.b -> bot.a"]


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
        "bot/flow.py:4: only bot/github/ may use an HTTP client (github.Repository.Repository)",
        "bot/setup.py:2: only bot/github/ may use an HTTP client (requests)",
    ]


@pytest.mark.parametrize(
    "source",
    [
        "import urllib.request\n",
        "from urllib import request\n",
        "from urllib.request import urlopen\n",
        "import httpx\n",
        "from http.client import HTTPSConnection\n",
        "import urllib3\n",
        "def f() -> None:\n    import aiohttp\n",
    ],
)
def test_no_http_client_outside_bot_github(tmp_path: Path, source: str) -> None:
    root = tree(
        tmp_path,
        {
            "bot/__init__.py": "",
            "bot/handlers/__init__.py": "",
            "bot/handlers/pushes.py": source,
            "bot/web.py": "from urllib.parse import quote\n",
        },
    )
    (found,) = violations(root)
    assert found.startswith("bot/handlers/pushes.py:")
    assert ": only bot/github/ may use an HTTP client (" in found


def test_the_machine_and_its_reasons_read_no_clock(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "bot/__init__.py": "",
            "bot/verification/__init__.py": "",
            "bot/verification/machine.py": """\
                import datetime as dt
                from datetime import datetime

                def step(now: dt.datetime) -> dt.datetime:
                    later = now + dt.timedelta(seconds=1)
                    return max(later, datetime.now(dt.UTC))
            """,
            "bot/verification/reasons.py": """\
                import time

                def when() -> float:
                    return time.monotonic()
            """,
        },
    )
    assert violations(root) == [
        "bot/verification/machine.py:6: the verification machine must not read a clock (now)",
        "bot/verification/reasons.py:4: the verification machine must not read a clock (monotonic)",
        "bot/verification/reasons.py:1: the verification machine must not do I/O (time)",
    ]


def test_only_the_registry_reaches_a_handler(tmp_path: Path) -> None:
    """A handler cannot reach another through a helper: nothing but the registry and
    the context may import a handler's module."""
    root = tree(
        tmp_path,
        {
            "bot/__init__.py": "",
            "bot/handlers/__init__.py": "",
            "bot/handlers/registry.py": "",
            "bot/handlers/commands.py": "",
            "bot/helper.py": "from bot.handlers import commands\n",
            "bot/deliveries.py": "from bot.handlers import registry\n",
        },
    )
    assert violations(root) == [
        "bot/helper.py:1: only the handlers' registry reaches a handler (bot.handlers.commands)"
    ]


@pytest.mark.parametrize(
    ("importer", "imported", "why"),
    [
        ("bot/handlers/runs.py", "bot.services", "hands plain values to bot.features"),
        ("bot/handlers/runs.py", "bot.verification.store", "hands plain values to bot.features"),
        ("bot/handlers/pushes.py", "bot.approvals", "hands plain values to bot.features"),
        ("bot/handlers/closing.py", "sqlalchemy.orm", "hands plain values to bot.features"),
        ("bot/features/runs.py", "bot.services", "acts through the ports it is given"),
        ("bot/triggers.py", "bot.messages", "a trigger is a stored value"),
        ("bot/github/api.py", "bot.verification.store", "knows nothing above it"),
        ("bot/messages.py", "bot.github.api", "does no I/O"),
        ("bot/verification/store.py", "bot.verification.effects", "SQLAlchemy and the models"),
        ("bot/verification/effects.py", "bot.services", "through ports"),
        ("bot/verification/steps.py", "bot.github.api", "the store and the effects"),
        ("bot/observability/metrics.py", "bot.db", "may depend on nothing of the App"),
        ("bot/pull_writes.py", "bot.github.api", "writes through its port"),
        ("bot/pull_lease.py", "bot.queue", "holds SQLAlchemy and the models only"),
        ("bot/batcher.py", "bot.web.app", "nothing below the web layer imports it"),
        ("bot/queue.py", "bot.verification.steps", "it knows huey, not the App"),
        ("bot/services.py", "bot.deliveries", "the jobs are wired in bot.runtime"),
        ("bot/verification/steps.py", "bot.runtime", "only the entry points build a runtime"),
    ],
)
def test_each_row_of_the_architecture_table_is_enforced(
    tmp_path: Path, importer: str, imported: str, why: str
) -> None:
    files = {
        "bot/__init__.py": "",
        importer: f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import {imported}\n",
    }
    for name in (imported, importer.removesuffix(".py").replace("/", ".")):
        parts = name.split(".")
        for end in range(2, len(parts)):
            files.setdefault("/".join(parts[:end]) + "/__init__.py", "")
        files.setdefault("/".join(parts) + ".py", "")
    root = tree(tmp_path, files)
    found = violations(root)
    assert len(found) == 1, found
    assert found[0].startswith(f"{importer}:3: ")
    assert f"must not import {imported}: " in found[0]
    assert why in found[0]


def test_a_handler_uses_no_port_itself(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "bot/__init__.py": "",
            "bot/handlers/__init__.py": "",
            "bot/handlers/context.py": "",
            "bot/handlers/closing.py": """\
                def closed(ctx):
                    with ctx.svc.db.session() as s:
                        s.flush()
                    ctx.svc.queue.write("o/r", 1)
                    ctx.svc.github.pull("o/r", 1)
                    ctx.svc.store.put("k", b"")
                    ctx.svc.repo_config(ctx.repo)
            """,
        },
    )
    said = "a handler hands its ports to bot.features and uses none itself"
    assert violations(root) == [
        f"bot/handlers/closing.py:2: {said} (.db)",
        f"bot/handlers/closing.py:2: {said} (.session)",
        f"bot/handlers/closing.py:4: {said} (.queue)",
        f"bot/handlers/closing.py:5: {said} (.github)",
        f"bot/handlers/closing.py:6: {said} (.store)",
        f"bot/handlers/closing.py:7: {said} (.repo_config)",
    ]


def test_a_known_exception_is_quiet_until_it_is_gone(tmp_path: Path) -> None:
    files = {
        "bot/__init__.py": "",
        "bot/services.py": "",
        "bot/handlers/__init__.py": "",
        "bot/handlers/context.py": "",
        "bot/handlers/runs.py": "from bot import services\n",
    }
    listed = {("bot.handlers.runs", "bot.services"): "to be given ports"}
    assert violations(tree(tmp_path / "now", files), listed) == []
    files["bot/handlers/runs.py"] = ""
    assert violations(tree(tmp_path / "later", files), listed) == [
        "tests/layers.py: KNOWN_EXCEPTIONS lists bot.handlers.runs importing bot.services,"
        " which it no longer does"
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
    found = violations(REPO, KNOWN_EXCEPTIONS)
    assert found == [], "import layer violations:\n" + "\n".join(found)
