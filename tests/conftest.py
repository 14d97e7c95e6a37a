from __future__ import annotations

import inspect
import shutil
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from bot import runtime
from bot.db import upgrade
from bot.web.app import create_app
from tests import appkit
from tests.browser import browser  # noqa: F401  (one Chromium per session, in conftest)
from tests.bundles import clean_bundle
from tests.standin import GitHubStandIn, serve

REAL = Path(__file__).parent / "fixtures" / "real"

# What makes a test need `scripts/test-services`: these helpers (PostgreSQL, Redis,
# Chromium) anywhere in the code it runs, or the fixture that gives a folder the runner's
# candidate users can reach (a dry verification run as root, isolated as on a GPU runner;
# the sandbox attacks build a library with the C compiler there too).
SERVICE_HELPERS = frozenset({"postgres_database", "redis_db", "free_redis_db", "chromium"})
SERVICE_FIXTURES = frozenset({"reachable_tmp"})


def _needs_services(code: types.CodeType, namespace: dict[str, Any], shape: object) -> bool:
    """Whether `code` reaches a service helper, following the functions and classes of
    this test package it names. `tests.worlds.world` needs services only in the deployed
    shape, so a test parametrized with the embedded shape does not."""
    seen: set[types.CodeType] = set()
    todo: list[tuple[types.CodeType, dict[str, Any]]] = [(code, namespace)]
    while todo:
        co, ns = todo.pop()
        if co in seen:
            continue
        seen.add(co)
        if SERVICE_HELPERS & set(co.co_names):
            return True
        todo.extend((c, ns) for c in co.co_consts if isinstance(c, types.CodeType))
        for name in co.co_names:
            target = ns.get(name)
            module = getattr(target, "__module__", None)
            if not isinstance(module, str) or not module.startswith("tests"):
                continue
            if module == "tests.worlds" and getattr(target, "__qualname__", "") == "world":
                if shape != "embedded":
                    return True
                continue
            for fn in _functions(target):
                todo.append((fn.__code__, fn.__globals__))
    return False


def _functions(target: Any) -> list[types.FunctionType]:
    """The plain functions behind a function, a fixture or a class's methods."""
    members = list(vars(target).values()) if isinstance(target, type) else [target]
    out = []
    for member in members:
        fn = inspect.unwrap(member) if callable(member) else member
        if isinstance(fn, types.FunctionType):
            out.append(fn)
    return out


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `services` every test that needs PostgreSQL, Redis, Chromium or root with the
    candidate users: `make unit-fast` leaves them out (`-m 'not services'`)."""
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        if SERVICE_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.services)
            continue
        # A world's shape is a parameter of the test or of a fixture (`w`), by any name.
        params = item.callspec.params.values() if hasattr(item, "callspec") else ()
        shape = "embedded" if "embedded" in params else None
        funcs = [item.function]
        for defs in item._fixtureinfo.name2fixturedefs.values():
            funcs.extend(d.func for d in defs)
        for fn in funcs:
            if any(_needs_services(f.__code__, f.__globals__, shape) for f in _functions(fn)):
                item.add_marker(pytest.mark.services)
                break


@pytest.fixture(autouse=True)
def _services_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that reaches a service without the `services` marker fails, naming it, so
    the marker stays right as tests change (see tests.services.require_marked)."""
    from tests import services as test_services

    test_services.MARKED = request.node.get_closest_marker("services") is not None
    test_services.NODE = request.node.nodeid
    yield
    test_services.MARKED = True


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
    rt = runtime.build(settings, immediate=True)
    yield create_app(svc=rt)
    rt.db.dispose()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
