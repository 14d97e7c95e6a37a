"""Route a webhook to the feature handlers registered for its event and action
(bedevere's pattern: one router per feature module, composed in `bot/features`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

Payload = dict[str, Any]
Handler = Callable[[Payload], None]


class Router:
    def __init__(self, *others: Router) -> None:
        self._handlers: dict[tuple[str, str | None], list[Handler]] = defaultdict(list)
        for other in others:
            for key, handlers in other._handlers.items():
                self._handlers[key].extend(handlers)

    def register(self, event: str, action: str | None = None) -> Callable[[Handler], Handler]:
        def deco(fn: Handler) -> Handler:
            self._handlers[(event, action)].append(fn)
            return fn

        return deco

    def handlers(self, event: str, action: str | None) -> list[Handler]:
        """Handlers for the event regardless of action, then those for this action."""
        out = list(self._handlers.get((event, None), []))
        if action is not None:
            out += self._handlers.get((event, action), [])
        return out

    def dispatch(self, event: str, payload: Payload) -> int:
        action = payload.get("action")
        handlers = self.handlers(event, action if isinstance(action, str) else None)
        for handler in handlers:
            handler(payload)
        return len(handlers)
