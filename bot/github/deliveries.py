"""Ask GitHub again for the webhook deliveries we never stored.

GitHub does not redeliver by itself: a delivery that failed (our acknowledgement answered
500 while PostgreSQL was down, or timed out) stays failed. GitHub's recommended remedy is
to list the App's hook deliveries and request a redelivery of the failed ones
(https://docs.github.com/webhooks/using-webhooks/handling-failed-webhook-deliveries);
this module does that, for the reconciler.

The list has one entry per *attempt*: a redelivery is a new entry (`redelivery: true`)
with the same `guid` — our `X-GitHub-Delivery` and the deliveries table's id. So a guid
counts as delivered once any of its attempts succeeded, and only guids the database does
not hold are asked for again: a 500 may still have come after the row was committed.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from github import GithubException

from bot.github.client import GitHubApp

log = logging.getLogger(__name__)

LIST_PATH = "/app/hook/deliveries?per_page=100"
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="next"')


@dataclass(frozen=True)
class HookDelivery:
    """One delivery attempt as GitHub lists it; `id` names the attempt, `guid` the event."""

    id: int
    guid: str
    event: str
    action: str | None
    delivered_at: dt.datetime
    status_code: int

    @property
    def succeeded(self) -> bool:
        return 200 <= self.status_code < 300


def failed_deliveries(app: GitHubApp, since: dt.datetime) -> list[HookDelivery]:
    """The latest attempt of each guid delivered at or after `since` (timezone-aware) that
    no attempt delivered, in the order of the guids' first attempts (so redeliveries keep
    the events' order).

    All attempts are listed, not only `status=failure`: a success after a failure must
    be seen to know the guid arrived, and GitHub counts 3xx as success where we do not.
    The list is newest first, so paging stops at the first page reaching past `since`.
    """
    latest_failure: dict[str, HookDelivery] = {}
    first_seen: dict[str, tuple[dt.datetime, int]] = {}
    delivered: set[str] = set()
    url: str | None = LIST_PATH
    seen_urls: set[str] = set()
    while url is not None and url not in seen_urls:
        seen_urls.add(url)
        status, body, headers = app.app_request("GET", url)
        if status != 200 or not isinstance(body, list):
            raise GithubException(status, body, headers)
        reached_since = False
        for item in body:
            attempt = _parse(item)
            if attempt.delivered_at < since:
                reached_since = True
                continue
            when = (attempt.delivered_at, attempt.id)
            first_seen[attempt.guid] = min(first_seen.get(attempt.guid, when), when)
            if attempt.succeeded:
                delivered.add(attempt.guid)
                continue
            known = latest_failure.get(attempt.guid)
            if known is None or (known.delivered_at, known.id) < when:
                latest_failure[attempt.guid] = attempt
        url = None if reached_since else _next_url(headers.get("link", ""))
    failed = [d for guid, d in latest_failure.items() if guid not in delivered]
    return sorted(failed, key=lambda d: first_seen[d.guid])


def redeliver(app: GitHubApp, delivery_id: int) -> bool:
    """Ask GitHub to deliver attempt `delivery_id`'s payload again; True once it accepted
    (202: it delivers shortly, asynchronously). A refusal is logged, not raised, so one
    bad entry does not stop the others."""
    status, body, _ = app.app_request("POST", f"/app/hook/deliveries/{delivery_id}/attempts")
    if status == 202:
        return True
    message = body.get("message") if isinstance(body, dict) else None
    log.warning("GitHub refused to redeliver hook delivery %d: %d %s", delivery_id, status, message)
    return False


def redeliver_failed(
    app: GitHubApp,
    known: Callable[[list[str]], set[str]],
    since: dt.datetime,
    limit: int = 100,
) -> int:
    """Request one redelivery for each guid that failed since `since` and that `known`
    (given the failed guids, returns those already stored) says we do not have; at most
    `limit` requests, the oldest first, the rest left to the next run. Returns how many
    GitHub accepted."""
    failed = failed_deliveries(app, since)
    if not failed:
        return 0
    stored = known([d.guid for d in failed])
    asked: set[str] = set()
    accepted = 0
    for attempt in failed:
        if attempt.guid in stored or attempt.guid in asked:
            continue
        if len(asked) >= limit:
            log.info("redelivery limit %d reached; the rest wait for the next run", limit)
            break
        asked.add(attempt.guid)
        if redeliver(app, attempt.id):
            accepted += 1
            log.info(
                "asked GitHub to redeliver %s (%s.%s, failed with %d)",
                attempt.guid,
                attempt.event,
                attempt.action,
                attempt.status_code,
            )
    return accepted


def _parse(item: Any) -> HookDelivery:
    action = item.get("action")
    return HookDelivery(
        id=int(item["id"]),
        guid=str(item["guid"]),
        event=str(item["event"]),
        action=action if isinstance(action, str) else None,
        delivered_at=dt.datetime.fromisoformat(str(item["delivered_at"])),
        status_code=int(item["status_code"]),
    )


def _next_url(link: str) -> str | None:
    """The `rel="next"` URL of a `Link` header: GitHub pages deliveries by an opaque
    cursor, so the URL is followed as given rather than rebuilt."""
    match = _NEXT.search(link)
    return match.group(1) if match else None
