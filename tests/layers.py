"""Import layer rules for bot/, evidence/ and runners/, checked by reading the source.

The layers only stay apart if something fails when they leak into each other, so this
module parses every file with `ast` (nothing is imported or executed) and reports each
import that crosses a line. Imports inside functions count: they are the usual way a
forbidden dependency or a cycle gets hidden. Imports under `if TYPE_CHECKING:` count
for the layer rules (a type is still a dependency on that layer) but not for the cycle
rule, since they never run.

Run `python -m tests.layers [ROOT]`: one line per violation and exit 1, or "layers: ok".
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("bot", "evidence", "runners")
"""The project's own top-level packages; everything else is stdlib or third party."""

EVIDENCE_FORBIDDEN = frozenset({"bot", "flask", "github"})
"""evidence/ is the pure analysis layer: the app, the web framework and GitHub stay out."""

RUNNERS_EXEMPT = "runners.reference"
"""The reference model server runs on GPU hosts with its own dependencies."""

HANDLER_SHARED = {"bot.handlers.context", "bot.handlers.registry", "bot.handlers"}
"""Modules every handler may import; any other bot.handlers.* module is one feature."""

MACHINE = "bot.verification.machine"
MACHINE_ALLOWED = frozenset(
    {
        "__future__",
        "dataclasses",
        "enum",
        "typing",
        "collections",
        "collections.abc",
        "datetime",
        "functools",
        "itertools",
        "math",
    }
)
"""The verification state machine stays pure so every transition is unit-testable."""
MACHINE_LOCAL = "bot.verification.reasons"
"""The one project module the state machine may use, when it exists."""

MACHINE_CLOCK = frozenset(
    {"now", "utcnow", "today", "time", "time_ns", "monotonic", "perf_counter"}
)
"""Calls that read a clock: the machine is given the time in its events, never reads it."""

HTTP_CLIENTS = (
    "github",
    "requests",
    "urllib.request",
    "urllib3",
    "httpx",
    "http.client",
    "aiohttp",
)
"""Modules that reach the network; within bot/ only bot/github/ may use them."""
GITHUB_HOME = "bot.github"


@dataclass(frozen=True)
class Row:
    """One row of docs/architecture.md's table: what `package` may not import, and why."""

    package: str
    forbidden: tuple[str, ...]
    why: str
    exempt: tuple[str, ...] = ()


ROWS = (
    Row(
        "bot.handlers",
        (
            "bot.services",
            "bot.queue",
            "bot.db",
            "bot.web",
            "bot.cli",
            "bot.deliveries",
            "bot.models",
            "bot.verification",
            "bot.approvals",
            "bot.pull_writes",
            "bot.pull_lease",
            "bot.leases",
            "bot.watch",
            "bot.inquiries",
            "bot.messages",
            "sqlalchemy",
        ),
        "a handler reads a payload and hands plain values to bot.features",
        exempt=("bot.handlers.context",),
    ),
    Row(
        "bot.triggers",
        ("bot", "sqlalchemy", "jinja2", "evidence"),
        "a trigger is a stored value: its words are the template's",
    ),
    Row(
        "bot.features",
        ("bot.services", "bot.queue", "bot.db", "bot.web", "bot.cli", "bot.deliveries"),
        "a feature acts through the ports it is given",
    ),
    Row(
        "bot.github",
        (
            "bot.verification",
            "bot.handlers",
            "bot.web",
            "bot.services",
            "bot.queue",
            "bot.deliveries",
            "bot.messages",
            "bot.cli",
        ),
        "bot/github/ is GitHub's port and knows nothing above it",
    ),
    Row(
        "bot.messages",
        (
            "bot.services",
            "bot.github",
            "bot.handlers",
            "bot.web",
            "bot.db",
            "bot.queue",
            "bot.verification.store",
            "bot.verification.effects",
            "bot.verification.steps",
        ),
        "bot/messages.py puts things into words and does no I/O",
    ),
    Row(
        "bot.verification.store",
        (
            "bot.services",
            "bot.github",
            "bot.handlers",
            "bot.web",
            "bot.messages",
            "bot.queue",
            "bot.verification.effects",
            "bot.verification.steps",
        ),
        "the store holds SQLAlchemy and the models only",
    ),
    Row(
        "bot.verification.effects",
        ("bot.services", "bot.handlers", "bot.web", "bot.queue", "bot.verification.steps"),
        "effects are carried out through ports, not the whole of bot.services",
    ),
    Row(
        "bot.verification.steps",
        ("bot.services", "bot.handlers", "bot.web", "bot.github"),
        "the queued jobs use the store and the effects",
    ),
    Row(
        "bot.pull_writes",
        (
            "bot.services",
            "bot.github",
            "bot.handlers",
            "bot.web",
            "bot.queue",
            "bot.messages",
            "bot.verification",
        ),
        "the PR's outbox writes through its port, never the App's clients",
    ),
    Row(
        "bot.pull_lease",
        ("bot.services", "bot.github", "bot.handlers", "bot.web", "bot.queue"),
        "the PR's lease holds SQLAlchemy and the models only",
    ),
    Row(
        "bot.observability",
        (
            "bot.services",
            "bot.github",
            "bot.handlers",
            "bot.web",
            "bot.verification",
            "bot.db",
            "bot.queue",
        ),
        "everything logs and counts: observability may depend on nothing of the App",
    ),
    Row(
        "bot.queue",
        ("bot.deliveries", "bot.verification", "bot.services", "bot.handlers", "bot.web"),
        "the queue runs the jobs it is given: it knows huey, not the App",
    ),
    Row(
        "bot.services",
        ("bot.deliveries", "bot.verification", "bot.handlers", "bot.web", "bot.runtime"),
        "the services hold the clients; the jobs are wired in bot.runtime",
    ),
    Row(
        "bot",
        ("bot.web",),
        "nothing below the web layer imports it",
        exempt=("bot.web", "bot.cli"),
    ),
    Row(
        "bot",
        ("bot.runtime",),
        "only the entry points build a runtime",
        exempt=("bot.runtime", "bot.cli", "bot.web.app"),
    ),
)
"""docs/architecture.md's "may import" column as rules: every row is enforced."""

KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}
"""(module, import) pairs that break a rule today, each with what removes it: the debt
the next change pays. A pair listed here that no longer occurs is reported too, so the
list only ever shrinks to what is true."""

CYCLE_IGNORED = "bot.migrations"
"""Alembic loads migrations by path; they are not part of the import graph."""


@dataclass(frozen=True)
class Import:
    """One imported name, resolved to an absolute dotted module name."""

    module: str
    """The importing module, e.g. `bot.handlers.pushes`."""
    path: str
    """The importing file relative to the root, with forward slashes."""
    line: int
    target: str
    """A project module when one matches, else the name as written (`os.path`, `typing`)."""
    type_checking: bool
    """True when the import sits under `if TYPE_CHECKING:` and so never runs."""
    full: str = ""
    """The name as written, with the imported name for `from m import n` (`m.n`)."""

    @property
    def top(self) -> str:
        return self.target.split(".", 1)[0]

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def module_name(rel: Path) -> str:
    """`bot/x/__init__.py` is `bot.x`; `bot/x/y.py` is `bot.x.y`."""
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(root: Path) -> dict[str, Path]:
    """Map each project module name to its file, for the packages present under root."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        base = root / package
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(root)
            if "__pycache__" not in rel.parts:
                found[module_name(rel)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _nodes(node: ast.AST, type_checking: bool) -> Iterator[tuple[ast.AST, bool]]:
    """Every node below `node`, with whether it lies in an `if TYPE_CHECKING:` body."""
    for child in ast.iter_child_nodes(node):
        yield child, type_checking
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            yield child.test, type_checking
            for stmt in child.body:
                yield stmt, True
                yield from _nodes(stmt, True)
            for stmt in child.orelse:
                yield stmt, type_checking
                yield from _nodes(stmt, type_checking)
        else:
            yield from _nodes(child, type_checking)


def _longest_known(name: str, known: set[str]) -> str:
    """The longest prefix of `name` that is a project module, else `name` itself."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return name


class LayerError(Exception):
    """A file that cannot be read as Python or has an impossible relative import."""


def imports_of(module: str, path: Path, rel: str, known: set[str]) -> list[Import]:
    """All imports in one file, relative ones resolved against `module`'s package."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    except (SyntaxError, UnicodeDecodeError) as exc:
        line = getattr(exc, "lineno", None) or 1
        raise LayerError(f"{rel}:{line}: cannot parse: {exc}") from exc
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    for node, type_checking in _nodes(tree, False):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _longest_known(alias.name, known)
                found.append(Import(module, rel, node.lineno, target, type_checking, alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                if node.level > len(anchor):
                    raise LayerError(
                        f"{rel}:{node.lineno}: relative import beyond the top-level package"
                    )
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                target = full if full in known else _longest_known(base, known)
                found.append(Import(module, rel, node.lineno, target, type_checking, full))
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _feature(name: str) -> str:
    """`bot.handlers.pushes.util` belongs to feature `bot.handlers.pushes`."""
    return ".".join(name.split(".")[:3])


Found = tuple[str, tuple[str, str]]
"""A violation's message, and its (module, import) key for KNOWN_EXCEPTIONS."""


def _http(imp: Import) -> str | None:
    for name in (imp.full, imp.target):
        for client in HTTP_CLIENTS:
            if _within(name, client):
                return client
    return None


def _row_breaks(imp: Import) -> Iterator[str]:
    for row in ROWS:
        if not _within(imp.module, row.package) or any(_within(imp.module, e) for e in row.exempt):
            continue
        if any(_within(imp.target, f) for f in row.forbidden):
            yield f"{row.package} must not import {imp.target}: {row.why}"


def layer_violations(imports: Iterable[Import], known: set[str]) -> list[Found]:
    """Every rule but the cycle rule, one message per import line."""
    out: list[Found] = []
    for imp in imports:
        mod, target = imp.module, imp.target
        key = (mod, target)
        if _within(mod, "evidence") and imp.top in EVIDENCE_FORBIDDEN:
            out.append(
                (f"{imp.where()}: evidence must not import bot, flask or github ({target})", key)
            )
        if (
            _within(mod, "runners")
            and not _within(mod, RUNNERS_EXEMPT)
            and imp.top != "runners"
            and imp.top not in sys.stdlib_module_names
        ):
            out.append(
                (f"{imp.where()}: runners may import only the stdlib and runners ({target})", key)
            )
        if (
            _within(mod, "bot.handlers")
            and mod not in HANDLER_SHARED
            and _within(target, "bot.handlers")
            and target not in HANDLER_SHARED
            and _feature(target) != _feature(mod)
        ):
            out.append((f"{imp.where()}: handlers must not import each other ({target})", key))
        if (
            _within(mod, "bot")
            and not _within(mod, "bot.handlers")
            and _within(target, "bot.handlers")
            and target not in HANDLER_SHARED
        ):
            out.append(
                (f"{imp.where()}: only the handlers' registry reaches a handler ({target})", key)
            )
        if (
            mod in (MACHINE, MACHINE_LOCAL)
            and target not in MACHINE_ALLOWED
            and not (target in (MACHINE, MACHINE_LOCAL) and target in known)
        ):
            out.append((f"{imp.where()}: the verification machine must not do I/O ({target})", key))
        client = _http(imp)
        if _within(mod, "bot") and client and not _within(mod, GITHUB_HOME):
            out.append(
                (
                    f"{imp.where()}: only bot/github/ may use an HTTP client"
                    f" ({imp.full or target})",
                    key,
                )
            )
        out += [(f"{imp.where()}: {why}", key) for why in _row_breaks(imp)]
    return list(dict.fromkeys(out))  # `from m import a, b` is one import, one message


def clock_violations(module: str, rel: str, tree: ast.AST) -> list[Found]:
    """The machine and its reasons never read a clock: `now()`, `time.monotonic()`…"""
    if module not in (MACHINE, MACHINE_LOCAL):
        return []
    out: list[Found] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name in MACHINE_CLOCK:
            message = (
                f"{rel}:{node.lineno}: the verification machine must not read a clock ({name})"
            )
            out.append((message, (module, f"{name}()")))
    return out


HANDLER_PORT_USES = frozenset({"db", "queue", "session", "github", "store", "repo_config"})
"""What a handler never touches: the database, the queue, GitHub, the artifact store or
a repository's `.github/rsi.yml` (read from GitHub); it hands `ctx.svc` on to
`bot.features` whole."""


def handler_port_violations(module: str, rel: str, tree: ast.AST) -> list[Found]:
    """A handler reads its payload only: no `.db`, `.session()`, `.queue`, `.github`,
    `.store` or `.repo_config` of anything (the features' to use through the ports)."""
    if not _within(module, "bot.handlers") or module in HANDLER_SHARED:
        return []
    out: list[Found] = []
    uses = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    for node in sorted(uses, key=lambda n: (n.lineno, n.end_col_offset or 0)):
        if node.attr in HANDLER_PORT_USES:
            message = (
                f"{rel}:{node.lineno}: a handler hands its ports to bot.features"
                f" and uses none itself (.{node.attr})"
            )
            out.append((message, (module, f".{node.attr}")))
    return out


def cycle_violations(imports: Iterable[Import], known: set[str]) -> list[Found]:
    """Every import cycle among bot/ modules, each once. Imports under `if
    TYPE_CHECKING:` count: a type-only cycle is still two modules that cannot be
    understood, changed or tested apart.

    For each edge on a cycle the shortest cycle through it is reported, so every import
    that would have to go to break the cycles appears in at least one message while the
    output stays bounded. A cycle is written from its alphabetically first module.
    """

    def in_graph(name: str) -> bool:
        return (
            any(_within(name, p) for p in PACKAGES)
            and not _within(name, CYCLE_IGNORED)
            and name in known
        )

    edges: dict[str, dict[str, Import]] = {}
    for imp in imports:
        if not (in_graph(imp.module) and in_graph(imp.target)):
            continue
        edges.setdefault(imp.module, {}).setdefault(imp.target, imp)

    def path_between(start: str, goal: str) -> list[str] | None:
        came: dict[str, str | None] = {start: None}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            if node == goal:
                path: list[str] = []
                step: str | None = node
                while step is not None:
                    path.append(step)
                    step = came[step]
                return path[::-1]
            for nxt in sorted(edges.get(node, {})):
                if nxt not in came:
                    came[nxt] = node
                    queue.append(nxt)
        return None

    cycles: set[tuple[str, ...]] = set()
    for src in sorted(edges):
        for dst in sorted(edges[src]):
            back = path_between(dst, src)
            if back is None:
                continue
            ring = [src, *back[:-1]]
            first = ring.index(min(ring))
            cycles.add(tuple(ring[first:] + ring[:first]))
    out = []
    for cycle in sorted(cycles):
        imp = edges[cycle[0]][cycle[1 % len(cycle)]]
        chain = " -> ".join([*cycle, cycle[0]])
        out.append((f"{imp.where()}: import cycle {chain}", (imp.module, imp.target)))
    return out


def violations(root: Path, listed: Mapping[tuple[str, str], str] | None = None) -> list[str]:
    """Every violation under `root`, as `path:line: message (target)`, less those `listed`
    (this repository's: KNOWN_EXCEPTIONS), plus each listed one that no longer occurs."""
    listed = listed or {}
    files = source_files(root)
    known = set(files)
    imports: list[Import] = []
    problems: list[str] = []
    found: list[Found] = []
    for module, path in files.items():
        rel = path.relative_to(root).as_posix()
        try:
            imports += imports_of(module, path, rel, known)
        except LayerError as exc:
            problems.append(str(exc))
            continue
        if module in (MACHINE, MACHINE_LOCAL):
            found += clock_violations(module, rel, ast.parse(path.read_text(encoding="utf-8")))
        if _within(module, "bot.handlers"):
            parsed = ast.parse(path.read_text(encoding="utf-8"))
            found += handler_port_violations(module, rel, parsed)
    found += layer_violations(imports, known) + cycle_violations(imports, known)
    seen = {key for _, key in found}
    stale = [
        f"tests/layers.py: KNOWN_EXCEPTIONS lists {m} importing {t}, which it no longer does"
        for m, t in listed
        if (m, t) not in seen
    ]
    return problems + [message for message, key in found if key not in listed] + stale


def main(argv: list[str] | None = None) -> int:
    """Print one line per violation and return 1, or print "layers: ok" and return 0."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parent.parent
    found = violations(root, {} if args else KNOWN_EXCEPTIONS)
    for line in found:
        print(line)
    if found:
        return 1
    print("layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
