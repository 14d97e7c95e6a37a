"""No delivery is lost to a database outage: the acknowledgement answers 500 while
PostgreSQL is unreachable, GitHub records those deliveries as failed (and does not retry
them by itself), and `bot.github.deliveries` asks GitHub to redeliver exactly the ones we
never stored — each then stored and processed once.

The outage is a TCP proxy between the App and the shared PostgreSQL being cut (its live
connections dropped, new ones refused); the server itself keeps running for everyone else.
"""

from __future__ import annotations

import datetime as dt
import logging
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from flask import Flask
from sqlalchemy import select

from bot import runtime, services
from bot.db import upgrade
from bot.github.client import GitHubApp
from bot.github.deliveries import failed_deliveries, redeliver_failed
from bot.models import Delivery, Installation
from bot.web.app import create_app
from tests import appkit
from tests.services import postgres_database
from tests.standin import GitHubStandIn, example
from tests.tcpproxy import TcpProxy
from tests.test_worker_killed import RSI, _env

BURST = 60
OUTAGE = range(20, 40)  # the middle third of the burst finds the database unreachable
PATH = r"^/app/hook/deliveries/\d+/attempts$"


def wait_for(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@dataclass
class Deployed:
    app: Flask
    web: services.Services  # the web process's (the worker has its own)
    proxy: TcpProxy

    def post(self, body: bytes, headers: dict[str, str]) -> int:
        """What GitHub does with a delivery: POST it to the App's webhook URL."""
        return (
            self.app.test_client().post("/webhooks/github", data=body, headers=headers).status_code
        )

    def rows(self) -> dict[str, Delivery]:
        with self.web.db.session() as s:
            return {d.id: d for d in s.scalars(select(Delivery))}


@pytest.fixture
def deployed(tmp_path: Path, github: GitHubStandIn) -> Iterator[Deployed]:
    """PostgreSQL behind a proxy; the web process's services and the worker's (each its
    own pool, as two processes have) sharing a SQLite queue with a real threaded consumer."""
    with postgres_database() as url, TcpProxy("127.0.0.1", 5432) as proxy:
        upgrade(url)
        proxied = url.replace("@127.0.0.1:5432/", f"@127.0.0.1:{proxy.port}/")
        settings = appkit.settings(tmp_path, github.url, DATABASE_URL=proxied)
        web = runtime.build(settings)
        worker = runtime.build(settings)  # the consumer's jobs close over these
        saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        # SQLite is polled: huey's backoff would let an idle worker sleep up to 10 s.
        consumer = worker.huey.create_consumer(
            workers=2,
            worker_type="thread",
            periodic=False,
            check_worker_health=False,
            initial_delay=0.02,
            backoff=1.0,
            max_delay=0.02,
        )
        consumer.start()
        try:
            yield Deployed(create_app(svc=web), web, proxy)
        finally:
            proxy.up()
            consumer.stop(graceful=True)
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            web.db.dispose()
            worker.db.dispose()


def test_deliveries_failed_during_an_outage_are_redelivered_and_processed_once(
    deployed: Deployed, github: GitHubStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    github.webhook_target = deployed.post
    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    guids = [f"7a1f0c00-d0c1-11f0-8a3e-{i:012x}" for i in range(BURST)]
    acks: dict[int, int] = {}

    def deliver(i: int) -> None:
        """GitHub delivers: POST, then records the attempt and what the App answered."""
        payload = example("installation", "created")
        payload["installation"]["id"] = 90_000 + i  # one installation each: no races
        body = orjson.dumps(payload)
        headers = appkit.webhook_headers(body, "installation", guids[i])
        acks[i] = deployed.post(body, headers)
        github.record_hook_delivery(guids[i], "installation", "created", acks[i], body, headers)

    def burst(part: range) -> None:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(deliver, part))

    stored_before = range(OUTAGE.start)
    burst(stored_before)
    # Their jobs are done before the cut: a job cut between its claim and its end would
    # wait for its lease to expire (bot.deliveries.process), which is not what this tests.
    wait_for(lambda: sum(d.status == "done" for d in deployed.rows().values()) == OUTAGE.start)
    caplog.clear()
    deployed.proxy.down()
    burst(OUTAGE)
    deployed.proxy.up()
    refused = [r for r in caplog.records if r.levelno >= logging.ERROR]
    burst(range(OUTAGE.stop, BURST))

    assert [acks[i] for i in OUTAGE] == [500] * len(OUTAGE)
    assert {acks[i] for i in range(BURST) if i not in OUTAGE} == {202}
    # One log record per refused delivery, without a traceback; Flask logged nothing.
    assert sorted(r.getMessage().split()[1] for r in refused) == sorted(guids[i] for i in OUTAGE)
    assert all(r.exc_info is None and r.name.endswith(".webhooks") for r in refused)
    wait_for(lambda: len(deployed.rows()) == BURST - len(OUTAGE))

    lost = {guids[i] for i in OUTAGE}
    app = deployed.web.github_app
    assert {d.guid for d in failed_deliveries(app, since)} == lost
    deployed.web.queue.reconcile()  # what the worker does every minute
    asked = [int(r.path.split("/")[4]) for r in github.matching("POST", PATH)]
    first_attempt = {a.id: a.guid for a in github.hook_attempts if not a.redelivery}
    assert sorted(first_attempt[i] for i in asked) == sorted(lost)  # each failed one, once
    github.wait_for_redeliveries()
    redelivered = [a for a in github.hook_attempts if a.redelivery]
    assert sorted(a.guid for a in redelivered) == sorted(lost)
    assert {a.status_code for a in redelivered} == {202}

    def all_done() -> bool:
        rows = deployed.rows()
        return len(rows) == BURST and all(d.status == "done" for d in rows.values())

    wait_for(all_done)
    rows = deployed.rows()
    assert sorted(rows) == sorted(guids)
    assert {(d.status, d.attempts, d.error) for d in rows.values()} == {("done", 1, None)}
    with deployed.web.db.session() as s:
        installations = set(s.scalars(select(Installation.id)))
    assert installations == {90_000 + i for i in range(BURST)}

    # Nothing is left to ask for: the second run redelivers nothing.
    assert failed_deliveries(app, since) == []
    assert redeliver_failed(app, deployed.web.db.stored_delivery_ids, since) == 0
    deployed.web.queue.reconcile()
    assert github.count("POST", PATH) == len(OUTAGE)
    github.assert_clean()


# --- listing and choosing what to redeliver, against the stand-in -------------------------


@pytest.fixture
def gh_app(tmp_path: Path, github: GitHubStandIn) -> GitHubApp:
    return GitHubApp(appkit.settings(tmp_path, github.url))


def test_failed_deliveries_page_group_attempts_and_stop_at_since(
    github: GitHubStandIn, gh_app: GitHubApp
) -> None:
    now = dt.datetime.now(dt.UTC)
    github.clock = lambda: now - dt.timedelta(hours=2)
    for i in range(150):  # before `since`: left alone, and their pages not even read
        github.record_hook_delivery(f"too-old-{i}", "push", None, 500)
    github.clock = lambda: now
    for i in range(150):  # pages of 100: the failures below are on the second page
        github.record_hook_delivery(f"ok-{i}", "push", None, 202)
    github.record_hook_delivery("recovered", "issues", "opened", 500)
    github.record_hook_delivery("recovered", "issues", "opened", 202, redelivery=True)
    first = github.record_hook_delivery("still-failing", "issues", "closed", 500)
    last = github.record_hook_delivery("still-failing", "issues", "closed", 502, redelivery=True)
    moved = github.record_hook_delivery("redirected", "push", None, 301)
    for i in range(150):
        github.record_hook_delivery(f"later-{i}", "push", None, 200)

    failed = failed_deliveries(gh_app, now - dt.timedelta(hours=1))
    assert [(d.guid, d.id, d.status_code) for d in failed] == [
        ("still-failing", last.id, 502),  # its latest attempt, the one to redeliver
        ("redirected", moved.id, 301),  # GitHub's "success" filter counts 3xx; we do not
    ]
    assert failed[0].action == "closed"
    assert failed[0].id != first.id
    assert github.count("GET", r"^/app/hook/deliveries$") == 4  # of 5 pages
    assert failed_deliveries(gh_app, now + dt.timedelta(seconds=5)) == []
    github.assert_clean()


def test_redeliver_failed_skips_stored_guids_and_keeps_to_its_limit(
    github: GitHubStandIn, gh_app: GitHubApp
) -> None:
    sent: list[str] = []

    def app_answers(_body: bytes, headers: dict[str, str]) -> int:
        sent.append(headers["X-GitHub-Delivery"])
        return 202

    github.webhook_target = app_answers
    for guid in ("a", "b", "c", "d"):
        github.record_hook_delivery(guid, "push", None, 500)
    github.record_hook_delivery("b", "push", None, 504, redelivery=True)
    asked: list[list[str]] = []

    def known(guids: list[str]) -> set[str]:
        asked.append(guids)
        return {"c"}  # stored, though GitHub saw a failure (the 500 came after the commit)

    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    assert redeliver_failed(gh_app, known, since, limit=2) == 2
    github.wait_for_redeliveries()
    assert asked == [["a", "b", "c", "d"]]
    assert sorted(sent) == ["a", "b"]  # oldest first, "c" skipped, "d" left for the next run
    redelivered_b = [a for a in github.hook_attempts if a.guid == "b" and a.redelivery]
    assert [a.status_code for a in redelivered_b] == [504, 202]  # the 504 one was asked for
    assert github.count("POST", PATH) == 2
    assert redeliver_failed(gh_app, known, since, limit=2) == 1  # only "d" is still failed
    github.wait_for_redeliveries()
    assert sorted(sent) == ["a", "b", "d"]
    github.assert_clean()


def test_reconcile_says_when_github_could_not_be_asked_and_exits_1(
    app: Flask, github: GitHubStandIn
) -> None:
    """Before: "asked GitHub to redeliver 0 failed deliveries", "reconciled", exit 0,
    which reads as "there were none"."""
    github.fail_next("GET", r"^/app/hook/deliveries", 502, times=50)
    proc = subprocess.run(
        [RSI, "reconcile", "--redeliver-since", "2"],
        env=_env(app.extensions["rsi"]),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    github.clear_faults()
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == (
        "reconcile: GitHub could not be asked for its failed deliveries (see the log "
        "above); nothing was redelivered, try again later"
    )
    assert github.count("GET", r"^/app/hook/deliveries") >= 1
