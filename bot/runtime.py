"""The composition root: the services of a process and the queue's jobs, wired once.

Only here do the queue's tasks meet what they run (deliveries, the verification steps):
`bot.queue` knows huey and `bot.services` knows the clients, and neither imports the jobs,
so no import circle runs through them.
"""

from __future__ import annotations

from sqlalchemy import select

from bot import deliveries, inquiries, pull_writes
from bot.artifacts import store_from_url
from bot.config import Settings
from bot.db import Database
from bot.github.client import GitHubApp
from bot.models import Verification
from bot.queue import Jobs, Queue
from bot.services import Services, make_huey
from bot.signing import UrlSigner
from bot.verification import steps


def build(settings: Settings, *, immediate: bool = False) -> Services:
    """The services of one process, with its queue and the jobs its tasks run."""
    svc = Services(
        settings=settings,
        db=Database(settings.DATABASE_URL),
        github_app=GitHubApp(settings),
        store=store_from_url(settings.ARTIFACT_STORE, settings.AWS_ENDPOINT_URL),
        signer=UrlSigner(settings.WEBHOOK_SECRET.get_secret_value()),
        huey=make_huey(settings, immediate=immediate),
    )

    def reconcile() -> None:
        deliveries.requeue_lost(svc)
        steps.reconcile(svc)
        inquiries.resume(svc)
        for repo, number in pull_writes.due(svc.db):
            svc.queue.write(repo, number)
        deliveries.redeliver_failed(svc)

    def write(repo: str, number: int) -> float | None:
        st = svc.settings
        retry = pull_writes.Retry(st.RSI_EFFECT_ATTEMPTS, st.RSI_EFFECT_BACKOFF_S)
        return pull_writes.drain(svc.db, svc.github, retry, repo, number)

    def verification_lane(vid: str) -> str | None:
        with svc.db.session() as s:
            repo = s.scalar(select(Verification.repo).where(Verification.id == vid))
        return repo.lower() if repo else None

    svc.queue = Queue(
        svc.huey,
        Jobs(
            process_delivery=lambda delivery_id: deliveries.process(svc, delivery_id),
            start=lambda vid: steps.start(svc, vid),
            drain=lambda vid: steps.drain(svc, vid),
            write=write,
            reconcile=reconcile,
            verification_lane=verification_lane,
            delivery_lanes=lambda ids: deliveries.lanes(svc.db, ids),
        ),
    )
    return svc
