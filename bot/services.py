"""What a process needs, built once from the settings (`bot.runtime.build`) and handed
down explicitly (Flask keeps it in `app.extensions["rsi"]`; the worker's jobs close over
it). Nothing looks it up globally."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from huey import Huey, SqliteHuey

from bot.artifacts import ArtifactStore
from bot.batcher import Batcher
from bot.config import Settings
from bot.db import Database
from bot.files import private_file
from bot.github.api import GitHub
from bot.github.client import GitHubApp
from bot.github.config_file import ConfigCache
from bot.queue_store import redis_huey
from bot.repo_config import ConfigResult
from bot.signing import UrlSigner

if TYPE_CHECKING:
    from bot.queue import Queue

log = logging.getLogger(__name__)
CONFIG_TTL_S = 60.0


def make_huey(settings: Settings, immediate: bool = False) -> Huey:
    """The queue, with priorities (`bot.lanes` orders jobs by them): a sorted set on
    Redis, a table on SQLite."""
    if settings.REDIS_URL:
        return redis_huey(settings.REDIS_URL, immediate=immediate)
    private_file(settings.QUEUE_PATH)  # 0600 in a 0700 folder, before SQLite opens it
    return SqliteHuey(
        "rsi-bot", filename=str(settings.QUEUE_PATH.expanduser()), immediate=immediate
    )


@dataclass
class Services:
    settings: Settings
    db: Database
    github_app: GitHubApp
    store: ArtifactStore
    signer: UrlSigner
    huey: Huey
    github: GitHub = field(init=False)
    queue: Queue = field(init=False)

    def __post_init__(self) -> None:
        self.github = GitHub(self.github_app)
        # `queue` is set by the composition root (bot.runtime.build), which knows the jobs.
        self._batcher = Batcher(lambda ids: self.queue.process_deliveries(ids))
        self._configs = ConfigCache()
        self._config_seen: dict[str, tuple[float, ConfigResult]] = {}

    def repo_config(self, repo: str) -> ConfigResult:
        """`.github/rsi.yml` of the repository's default branch: revalidated by ETag at
        most once a minute (one verification reads it several times)."""
        now = time.monotonic()
        hit = self._config_seen.get(repo)
        if hit is not None and now - hit[0] < CONFIG_TTL_S:
            return hit[1]
        result = self._configs.get(self.github_app, self.github_app.installation_id(repo), repo)
        self._config_seen[repo] = (now, result)
        return result

    def known_config(self, repo: str) -> ConfigResult | None:
        """The repository's configuration as last read by this process, however old, or
        None: for weighing other repositories' queued work without a request each."""
        hit = self._config_seen.get(repo)
        return hit[1] if hit is not None else None

    def enqueue_delivery(self, delivery_id: str) -> None:
        """Best effort, off the request thread (`bot.batcher`): a delivery left `queued`
        is picked up again by the reconciler. An immediate (in-process) queue runs the job
        here and now, as tests expect."""
        if not self.huey.immediate:
            self._batcher.put(delivery_id)
            return
        try:
            self.queue.process_delivery(delivery_id)
        except Exception:
            log.exception("could not enqueue delivery %s; the reconciler will", delivery_id)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every acknowledged delivery of this process has its job queued."""
        return self._batcher.flush(timeout)

    def report_url(self, verification_id: str) -> str:
        return self.signer.report_url(self.settings.PUBLIC_URL, verification_id)

    def history_url(self, repo: str, **filters: str) -> str:
        return self.signer.history_url(self.settings.PUBLIC_URL, repo, filters=filters)

    def plot_url(self, verification_id: str, name: str) -> str:
        return self.signer.plot_url(self.settings.PUBLIC_URL, verification_id, name)
