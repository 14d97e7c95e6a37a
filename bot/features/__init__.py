"""Webhook features, each with its own router, composed here."""

from __future__ import annotations

from bot.features import commands, installations, reviews, runner_events
from bot.routing import Router

router = Router(installations.router, runner_events.router, reviews.router, commands.router)
