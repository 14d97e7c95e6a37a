"""What a verification's jobs and effects use of the process, as protocols: the effects
are given exactly these ports, the jobs these and the queue. `bot.services.Services`
is one such process; a test may hand in any other object that has them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bot.artifacts import ArtifactStore
    from bot.config import Settings
    from bot.db import Database
    from bot.github.api import GitHub
    from bot.queue import Queue
    from bot.repo_config import ConfigResult


class EffectPorts(Protocol):
    """The database, GitHub, the artifact store, the settings, a repository's
    `.github/rsi.yml`, and the signed links of a verification's report."""

    @property
    def db(self) -> Database: ...

    @property
    def github(self) -> GitHub: ...

    @property
    def store(self) -> ArtifactStore: ...

    @property
    def settings(self) -> Settings: ...

    def repo_config(self, repo: str) -> ConfigResult: ...

    def known_config(self, repo: str) -> ConfigResult | None: ...

    def report_url(self, verification_id: str) -> str: ...

    def plot_url(self, verification_id: str, name: str) -> str: ...

    def history_url(self, repo: str, **filters: str) -> str: ...


class StepPorts(EffectPorts, Protocol):
    """The effects' ports and the queue the jobs put their next steps on."""

    @property
    def queue(self) -> Queue: ...
