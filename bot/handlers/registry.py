"""Which handler takes which webhook: `(event, action)` → handlers, filled by the
feature modules' `@on(...)` and read by `bot.handlers.dispatch`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from bot.handlers.context import Context

Handler = Callable[[Context], None]
_HANDLERS: dict[tuple[str, str | None], list[Handler]] = defaultdict(list)


def on(event: str, action: str | None = None) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        _HANDLERS[(event, action)].append(fn)
        return fn

    return register


def handlers(event: str, action: str | None) -> list[Handler]:
    """Handlers for the event regardless of action, then those for this action."""
    out = list(_HANDLERS.get((event, None), []))
    if action is not None:
        out += _HANDLERS.get((event, action), [])
    return out
