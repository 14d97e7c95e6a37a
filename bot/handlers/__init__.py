"""Webhook handlers, one module per feature, each `handler(ctx)`; they share no code
with each other but `context`, and `registry` lists which takes which webhook."""

from __future__ import annotations

from bot.handlers.context import Context
from bot.handlers.registry import handlers

__all__ = ["Context", "dispatch"]


def dispatch(ctx: Context) -> int:
    """Run every handler for the delivery; how many there were."""
    action = ctx.payload.get("action")
    found = handlers(ctx.event, action if isinstance(action, str) else None)
    for handler in found:
        handler(ctx)
    return len(found)
