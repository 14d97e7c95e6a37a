"""What a handler is given: the delivery at hand and the ports of the process, which it
only hands on to `bot.features` (a handler reads a payload; it opens no database session
and writes nothing itself)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.verification.ports import StepPorts

Payload = dict[str, Any]


@dataclass
class Context:
    svc: StepPorts
    event: str
    payload: Payload
    delivery_id: str = ""

    @property
    def repo(self) -> str:
        return str((self.payload.get("repository") or {}).get("full_name") or "")

    @property
    def sender(self) -> str:
        return str((self.payload.get("sender") or {}).get("login") or "")
