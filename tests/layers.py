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
from collections.abc import Iterable, Iterator
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

GITHUB_CLIENTS = frozenset({"github", "requests"})
"""Top-level packages that talk to GitHub; within bot/ only bot/github/ may use them."""
GITHUB_HOME = "bot.github"
GITHUB_WRITERS_EXEMPT: set[str] = set()
"""Dotted module names outside bot/github/ still allowed to use GITHUB_CLIENTS."""

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
                found.append(Import(module, rel, node.lineno, target, type_checking))
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
                found.append(Import(module, rel, node.lineno, target, type_checking))
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _feature(name: str) -> str:
    """`bot.handlers.pushes.util` belongs to feature `bot.handlers.pushes`."""
    return ".".join(name.split(".")[:3])


def layer_violations(imports: Iterable[Import], known: set[str]) -> list[str]:
    """Rules 1-4 and 6: which layer may depend on which, one message per import line."""
    out: list[str] = []
    for imp in imports:
        mod, target = imp.module, imp.target
        if _within(mod, "evidence") and imp.top in EVIDENCE_FORBIDDEN:
            out.append(f"{imp.where()}: evidence must not import bot, flask or github ({target})")
        if (
            _within(mod, "runners")
            and not _within(mod, RUNNERS_EXEMPT)
            and imp.top != "runners"
            and imp.top not in sys.stdlib_module_names
        ):
            out.append(f"{imp.where()}: runners may import only the stdlib and runners ({target})")
        if (
            _within(mod, "bot.handlers")
            and mod not in HANDLER_SHARED
            and _within(target, "bot.handlers")
            and target not in HANDLER_SHARED
            and _feature(target) != _feature(mod)
        ):
            out.append(f"{imp.where()}: handlers must not import each other ({target})")
        if (
            mod == MACHINE
            and target not in MACHINE_ALLOWED
            and not (target == MACHINE_LOCAL and MACHINE_LOCAL in known)
        ):
            out.append(f"{imp.where()}: the verification machine must not do I/O ({target})")
        if (
            _within(mod, "bot")
            and imp.top in GITHUB_CLIENTS
            and not _within(mod, GITHUB_HOME)
            and mod not in GITHUB_WRITERS_EXEMPT
        ):
            out.append(
                f"{imp.where()}: only bot/github/ may import {' or '.join(sorted(GITHUB_CLIENTS))}"
                f" ({target})"
            )
    return list(dict.fromkeys(out))  # `from m import a, b` is one import, one message


def cycle_violations(imports: Iterable[Import], known: set[str]) -> list[str]:
    """Rule 5: report every import cycle among bot/ modules, each once.

    For each edge on a cycle the shortest cycle through it is reported, so every import
    that would have to go to break the cycles appears in at least one message while the
    output stays bounded. A cycle is written from its alphabetically first module.
    """

    def in_graph(name: str) -> bool:
        return _within(name, "bot") and not _within(name, CYCLE_IGNORED) and name in known

    edges: dict[str, dict[str, Import]] = {}
    for imp in imports:
        if imp.type_checking or not (in_graph(imp.module) and in_graph(imp.target)):
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
        out.append(f"{imp.where()}: import cycle {chain}")
    return out


def violations(root: Path) -> list[str]:
    """Every layer and cycle violation under `root`, as `path:line: message (target)`."""
    files = source_files(root)
    known = set(files)
    imports: list[Import] = []
    problems: list[str] = []
    for module, path in files.items():
        try:
            imports += imports_of(module, path, path.relative_to(root).as_posix(), known)
        except LayerError as exc:
            problems.append(str(exc))
    return problems + layer_violations(imports, known) + cycle_violations(imports, known)


def main(argv: list[str] | None = None) -> int:
    """Print one line per violation and return 1, or print "layers: ok" and return 0."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parent.parent
    found = violations(root)
    for line in found:
        print(line)
    if found:
        return 1
    print("layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
