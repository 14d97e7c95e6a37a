"""What a handler is given: the ports of the process (`bot.verification.ports`) and the
delivery at hand."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot import pull_lease

if TYPE_CHECKING:
    from bot.config import Settings
    from bot.db import Database
    from bot.github.api import GitHub
    from bot.queue import Queue
    from bot.repo_config import RepoConfig
    from bot.verification.ports import StepPorts

Payload = dict[str, Any]


@dataclass
class Context:
    svc: StepPorts
    event: str
    payload: Payload
    delivery_id: str = ""
    _configs: dict[str, RepoConfig] = field(default_factory=dict)

    @property
    def db(self) -> Database:
        return self.svc.db

    @property
    def github(self) -> GitHub:
        return self.svc.github

    @property
    def queue(self) -> Queue:
        return self.svc.queue

    @property
    def settings(self) -> Settings:
        return self.svc.settings

    @property
    def repo(self) -> str:
        return str((self.payload.get("repository") or {}).get("full_name") or "")

    @property
    def sender(self) -> str:
        return str((self.payload.get("sender") or {}).get("login") or "")

    def pull_lease(self, number: int) -> AbstractContextManager[None]:
        """Held while a command of PR `number` is acted on (`bot.pull_lease`)."""
        return pull_lease.held(self.db, self.repo, number, self.settings.RSI_LEASE_S)

    def config(self, repo: str | None = None) -> RepoConfig:
        """The repository's `.github/rsi.yml` (the defaults when malformed)."""
        name = repo or self.repo
        if name not in self._configs:
            self._configs[name] = self.svc.repo_config(name).config
        return self._configs[name]
