"""The one error the engine raises for input it cannot read at all."""

from __future__ import annotations


class InputError(Exception):
    """Unreadable input: names the file and what is wrong (the CLI exits 2 on it)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class BoundError(InputError):
    """Input beyond the engine's bounds (`evidence.limits`): an archive too big or too
    many times compressed, JSON too deep, too many runs, a number outside its physical
    range. The whole bundle is refused, even where a malformed run file alone would only
    be a finding: an honest runner never writes one."""


class NotOneVerification(InputError):
    """Bundles that cannot be one verification's: different verification ids,
    repositories or commits, or two bundles for the same GPU kind."""
