from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import os
import shutil
import tempfile
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from bot import runtime
from bot.web.app import create_app
from tests import appkit, schema
from tests.browser import browser  # noqa: F401  (one Chromium per session, in conftest)
from tests.bundles import clean_bundle
from tests.standin import GitHubStandIn, serve

REAL = Path(__file__).parent / "fixtures" / "real"

# What makes a test need `scripts/test-services`: these helpers (PostgreSQL, Redis,
# Chromium) anywhere in the code it runs, or the fixture that gives a folder the runner's
# candidate users can reach (a dry verification run as root, isolated as on a GPU runner;
# the sandbox attacks build a library with the C compiler there too).
SERVICE_HELPERS = frozenset({"postgres_database", "redis_db", "chromium"})
SERVICE_FIXTURES = frozenset({"reachable_tmp"})


def _names(
    code: types.CodeType, namespace: dict[str, Any], follow: Callable[[object], bool]
) -> Iterator[tuple[str, object, dict[str, Any]]]:
    """Every name `code` uses, with what it stands for and the namespace it is read in,
    following into the functions and classes of this test package that `follow` allows."""
    seen: set[types.CodeType] = set()
    todo: list[tuple[types.CodeType, dict[str, Any]]] = [(code, namespace)]
    while todo:
        co, ns = todo.pop()
        if co in seen:
            continue
        seen.add(co)
        todo.extend((c, ns) for c in co.co_consts if isinstance(c, types.CodeType))
        for name in co.co_names:
            target = ns.get(name)
            yield name, target, ns
            module = getattr(target, "__module__", None)
            if isinstance(module, str) and module.startswith("tests") and follow(target):
                todo.extend((fn.__code__, fn.__globals__) for fn in _functions(target))


def _is_world(target: object) -> bool:
    return (
        getattr(target, "__module__", None) == "tests.worlds"
        and getattr(target, "__qualname__", "") == "world"
    )


def _needs_services(code: types.CodeType, namespace: dict[str, Any], shape: object) -> bool:
    """Whether `code` reaches a service helper. `tests.worlds.world` needs services only
    in the deployed shape, so a test parametrized with the embedded shape does not."""
    for name, target, _ in _names(code, namespace, lambda t: not _is_world(t)):
        if name in SERVICE_HELPERS or (_is_world(target) and shape != "embedded"):
            return True
    return False


def _is_app(target: object) -> bool:
    """An object of the App (`bot`), or a test helper module that holds one."""
    if isinstance(target, types.ModuleType):
        name = target.__name__
        if name == "bot" or name.startswith("bot."):
            return True
        return name.startswith("tests") and any(
            (isinstance(v, types.ModuleType) and v.__name__.split(".")[0] == "bot")
            or str(getattr(v, "__module__", "")).split(".")[0] == "bot"
            for v in vars(target).values()
        )
    return str(getattr(target, "__module__", "")).split(".")[0] == "bot"


@functools.cache
def _imported_from_bot(path: str) -> frozenset[str]:
    """The names a module's source binds from the App (`import bot…`, `from bot… import
    x as y`): an object such as a click command does not name its module itself."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "bot":
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(
                (a.asname or a.name).split(".")[0]
                for a in node.names
                if a.name.split(".")[0] == "bot"
            )
    return frozenset(names)


def _runs_the_app(code: types.CodeType, namespace: dict[str, Any]) -> bool:
    """Whether `code` may run the App's code in this process (a helper module that holds
    App code counts whole)."""
    for name, target, ns in _names(code, namespace, lambda t: True):
        source = ns.get("__file__")
        if _is_app(target) or (isinstance(source, str) and name in _imported_from_bot(source)):
            return True
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


COLLECTED = pytest.StashKey[set[str]]()


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test this session collected, before `-m`/`-k` take any away: the check of
    tests/coverage_tests.txt reads it instead of collecting the suite again."""
    item.config.stash.setdefault(COLLECTED, set()).add(item.nodeid)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `services` every test that needs PostgreSQL, Redis, Chromium or root with the
    candidate users: `make unit-fast` leaves them out (`-m 'not services'`).

    And `no_cover` every test that cannot run the App's code in this process (the
    runner, the evidence engine, the statistics): `make unit` measures coverage of
    bot/verification, which such a test never reaches, and coverage's tracer would make
    its CPU-bound work two to three times slower. A test that reaches the App is traced
    whole, as before."""
    from tests import select_coverage

    # Only the listed tests are traced (tests/select_coverage.py says why), unless the
    # list is being chosen again (`make coverage-select`).
    traced = None if os.environ.get("RSI_COVER_ALL") else select_coverage.listed() or None
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        if traced is not None and item.nodeid not in traced:
            item.add_marker(pytest.mark.no_cover)
        funcs = [item.function]
        for defs in item._fixtureinfo.name2fixturedefs.values():
            funcs.extend(d.func for d in defs)
        codes = [(f.__code__, f.__globals__) for fn in funcs for f in _functions(fn)]
        if not any(_runs_the_app(co, ns) for co, ns in codes):
            item.add_marker(pytest.mark.no_cover)
        if SERVICE_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.services)
            continue
        # A world's shape is a parameter of the test or of a fixture (`w`), by any name.
        params = item.callspec.params.values() if hasattr(item, "callspec") else ()
        shape = "embedded" if "embedded" in params else None
        if any(_needs_services(co, ns, shape) for co, ns in codes):
            item.add_marker(pytest.mark.services)
    # The longest first: a long test handed out last would finish the run on its own.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(autouse=True)
def _services_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that reaches a service without the `services` marker fails, naming it, so
    the marker stays right as tests change (see tests.services.require_marked)."""
    from tests import services as test_services

    test_services.MARKED = request.node.get_closest_marker("services") is not None
    test_services.NODE = request.node.nodeid
    yield
    test_services.MARKED = True


@contextlib.contextmanager
def _paused(config: pytest.Config, when: bool = True) -> Iterator[None]:
    """pytest-cov's coverage paused meanwhile (when it runs and `when` holds)."""
    plugin = config.pluginmanager.getplugin("_cov")
    ctl = getattr(plugin, "cov_controller", None)
    if ctl is None or not ctl.started or not when:
        yield
        return
    ctl.pause()
    try:
        yield
    finally:
        ctl.resume()


def _untraced(item: pytest.Item) -> contextlib.AbstractContextManager[None]:
    """Coverage paused around a `no_cover` test's fixtures too (pytest-cov pauses only
    its call): a world built untraced costs a third of one built traced."""
    return _paused(item.config, item.get_closest_marker("no_cover") is not None)


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """Collection imports every test module and what it imports, untraced: only the
    measured package's own import (its definitions) is recorded first."""
    import importlib
    import pkgutil

    import bot.verification

    for mod in pkgutil.iter_modules(bot.verification.__path__, "bot.verification."):
        importlib.import_module(mod.name)
    with _paused(session.config):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _untraced(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with _untraced(item):
        yield


@pytest.fixture(autouse=True)
def _real_time() -> Iterator[None]:
    """Each test starts on real time (a test may move the App's clock forward: bot/clock.py)."""
    from bot import clock

    clock.reset()
    yield
    clock.reset()


@pytest.fixture(scope="session")
def candidate_users() -> dict[str, str]:
    """This test process's candidate users (tests/candidates.py), created if missing."""
    from tests import candidates

    candidates.create()
    return candidates.USERS


@pytest.fixture
def reachable_tmp(candidate_users: dict[str, str]) -> Iterator[Path]:
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
    schema.migrated(settings.DATABASE_URL)
    rt = runtime.build(settings, immediate=True)
    yield create_app(svc=rt)
    rt.db.dispose()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


# ----------------------------------------------------------------- where the time goes

_DURATIONS: list[tuple[str, str, float]] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-json",
        metavar="PATH",
        help="write every test's setup, call and teardown seconds to PATH (JSON), for "
        "`python -m tests.durations PATH` to turn into tests/README.md's tables",
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Every phase of every test; under pytest-xdist the controller sees the workers'."""
    _DURATIONS.append((report.nodeid, report.when, report.duration))


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--durations-json")
    if not path or hasattr(session.config, "workerinput"):  # the controller writes it
        return
    import json

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"test": t, "when": w, "s": round(d, 3)} for t, w, d in _DURATIONS]
    out.write_text(json.dumps(rows, indent=0) + "\n", encoding="utf-8")
