"""The one error the engine raises for input it cannot read at all."""

from __future__ import annotations


class InputError(Exception):
    """Unreadable input: names the file and what is wrong (the CLI exits 2 on it)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
