"""Webhook handlers, one module per feature, each `handler(ctx)`; they share no code
with each other but `context` and `registry`."""

from __future__ import annotations

from bot.handlers import (  # noqa: F401  (registers the handlers)
    closing,
    commands,
    installations,
    pushes,
    rerun,
    reviews,
    runs,
    watch,
)
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
