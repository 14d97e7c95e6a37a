"""A YAML reader for files a stranger wrote: it refuses, early and cheaply, what would
cost more than a config ever needs.

`.github/rsi.yml` is read from any repository that installs the App, by the same queue
workers that serve every other repository. PyYAML's safe loader is safe from code, not
from cost: eleven levels of aliases (a 700-byte "billion laughs") expand to 10¹¹ nodes,
deep flow nesting overflows the composer's recursion, and a 200,000-digit number makes
the first `str()` of it raise. Each bound below is checked while the document is
composed, before the work it guards is done, so a refused file costs about what reading
its bytes costs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import yaml

MAX_BYTES = 64 * 1024
"""A real config is a few hundred bytes; GitHub shows files up to 1 MB."""
MAX_DEPTH = 24
"""Nesting of mappings and lists; the schema itself is four deep."""
MAX_NODES = 5_000
"""Scalars, mappings and lists, counting what aliases repeat as often as they repeat it."""
MAX_NUMBER_CHARS = 40
"""Digits of a number (sign, prefix and underscores included); budgets fit in ten."""


@dataclass(frozen=True)
class Refused(Exception):
    """The file passes a bound: `code` is the problem's macro, `params` its arguments,
    `line`/`column` where the reader was (1-based; None for the whole file)."""

    code: str
    params: tuple[tuple[str, Any], ...] = ()
    line: int | None = None
    column: int | None = None


class _Loader(yaml.SafeLoader):
    """SafeLoader that measures each node as it is composed: its depth on the way in,
    its expanded size (an alias counts as everything it stands for) on the way out."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0
        self._composed = 0
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _refused("yaml_too_deep", self._at(), most=MAX_DEPTH)
            self._composed += 1  # the file's own nodes, before the mapping that holds them ends
            if self._composed > MAX_NODES:
                raise _refused("yaml_too_many_nodes", self._at(), most=MAX_NODES)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is None:
            return None
        size = self._size(node)
        if size > MAX_NODES:
            raise _refused("yaml_too_many_nodes", node.start_mark, most=MAX_NODES)
        return node

    def _at(self) -> Any:
        return self.peek_event().start_mark  # type: ignore[no-untyped-call]

    def _size(self, node: yaml.Node) -> int:
        known = self._sizes.get(id(node))
        if known is not None:  # an alias: the node it names, counted again
            return known
        if isinstance(node, yaml.MappingNode):
            size = 1 + sum(
                self._sizes.get(id(k), 1) + self._sizes.get(id(v), 1) for k, v in node.value
            )
        elif isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._sizes.get(id(v), 1) for v in node.value)
        else:
            size = 1
        self._sizes[id(node)] = size
        return size

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise _refused("number_too_long", node.start_mark)
        return int(super().construct_yaml_int(node))

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise _refused("number_too_long", node.start_mark)
        return float(super().construct_yaml_float(node))


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)


def _refused(code: str, mark: Any, **params: Any) -> Refused:
    line = mark.line + 1 if mark is not None else None
    column = mark.column + 1 if mark is not None else None
    return Refused(code, tuple(params.items()), line, column)


def load(text: str) -> tuple[yaml.Node | None, Any]:
    """The document's node tree and its Python value (None, None when empty).

    Raises `Refused` past a bound and `yaml.YAMLError` for text that is not YAML; the
    node tree is shared where the file uses aliases, never copied."""
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise Refused("yaml_too_large", (("most", MAX_BYTES),))
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        # The constructor rewrites a mapping's nodes where it merges `<<` keys: it gets a
        # copy (bounded like the file), and the tree returned is the file as written.
        data = loader.construct_document(copy.deepcopy(root)) if root is not None else None
    finally:
        loader.dispose()
    return root, data
