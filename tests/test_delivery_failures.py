"""A handler's exception ends its delivery once, with one log record: a bug or GitHub's
refusal fails the same way on every attempt, so retrying it was a storm of tracebacks (six
queue retries, then the reconciler's requeues). An outage a retry may outlast (GitHub
unreachable or failing, the database or the queue unreachable) is still retried."""

from __future__ import annotations

import datetime as dt
import logging

import psycopg
import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from github import GithubException
from sqlalchemy.exc import OperationalError

from bot import deliveries, handlers
from bot.github.api import GitHubError
from bot.models import Delivery
from bot.services import Services
from tests.standin import GitHubStandIn, example
from tests.test_app_flow import deliver


def row(app: Flask, delivery_id: str) -> Delivery:
    with app.extensions["rsi"].db.session() as s:
        d = s.get(Delivery, delivery_id)
        assert d is not None
        return d


def test_a_handlers_bug_fails_its_delivery_once_with_one_log_record(
    app: Flask, client: FlaskClient, github: GitHubStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a warning and huey's traceback, the job scheduled again (six times), the
    delivery left `queued` for the reconciler to queue again every minute."""
    svc: Services = app.extensions["rsi"]
    payload = example("pull_request", "opened")
    payload["pull_request"]["number"] = "seven"  # int() raises ValueError in the handler
    caplog.set_level(logging.WARNING)
    assert deliver(client, "pull_request", payload, "bug-1") == 202
    d = row(app, "bug-1")
    assert (d.status, d.attempts) == ("failed", 1)
    assert d.error is not None
    assert d.error.startswith("ValueError: invalid literal for int()")
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1, [f"{r.name}: {r.getMessage()}" for r in said]
    assert said[0].name == "bot.deliveries"
    assert "not retried" in said[0].getMessage()
    assert svc.huey.scheduled_count() == 0
    assert svc.huey.pending_count() == 0
    with svc.db.session() as s:
        got = s.get(Delivery, "bug-1")
        assert got is not None
        got.received_at = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    assert deliveries.requeue_lost(svc) == 0
    github.assert_clean()


def test_an_outage_in_a_handler_is_still_retried(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc: Services = app.extensions["rsi"]

    def unreachable(_ctx: handlers.Context) -> int:
        raise GitHubError(0, "GitHub unreachable: ConnectionError: refused")

    monkeypatch.setattr(handlers, "dispatch", unreachable)
    assert deliver(client, "installation", example("installation", "created"), "out-1") == 202
    d = row(app, "out-1")
    assert (d.status, d.claimed_until) == ("queued", None)
    assert d.error == "GitHubError: GitHub unreachable: ConnectionError: refused"
    assert svc.huey.scheduled_count() == 1  # the queue's retry


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (GitHubError(0, "GitHub unreachable"), True),
        (GitHubError(502, "Bad Gateway"), True),
        (GitHubError(429, "Too Many Requests"), True),
        (GitHubError(403, "API rate limit exceeded for installation"), True),
        (GithubException(503, {"message": "unavailable"}, None), True),
        (OperationalError("SELECT 1", {}, Exception("connection refused")), True),
        (psycopg.OperationalError("server closed the connection"), True),
        (redis.ConnectionError("Connection refused"), True),
        (ConnectionResetError(104, "reset"), True),
        (GitHubError(403, "Resource not accessible by integration"), False),
        (GitHubError(404, "Not Found"), False),
        (GitHubError(422, "Validation Failed"), False),
        (GithubException(404, {"message": "Not Found"}, None), False),
        (ValueError("invalid literal"), False),
        (RuntimeError("could not apply"), False),
        (AssertionError(), False),
    ],
    ids=repr,
)
def test_only_outages_are_transient(exc: BaseException, retried: bool) -> None:
    assert deliveries.transient(exc) is retried
