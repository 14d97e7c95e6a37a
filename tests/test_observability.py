"""Operating the App: Sentry events without secrets, `/metrics` after real deliveries
through `create_app`, and log lines that carry the delivery id."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from bot import handlers, observability, runtime, services
from bot.models import Delivery, Verification
from bot.web.app import create_app
from tests import appkit
from tests.standin import GitHubStandIn, example

GHS = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"
GHP = "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"
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOjQyNDI0MiwiZXhwIjoxfQ.c2lnbmF0dXJlLWJ5dGVz"


def rt(app: Flask) -> services.Services:
    r: services.Services = app.extensions["rsi"]
    return r


def deliver(
    client: FlaskClient, event: str, payload: dict[str, Any], delivery: str, secret: str = ""
) -> int:
    body = orjson.dumps(payload)
    headers = appkit.webhook_headers(body, event, delivery, secret or appkit.WEBHOOK_SECRET)
    return client.post("/webhooks/github", data=body, headers=headers).status_code


METRICS = "http://localhost:9100"  # the metrics listener (METRICS_PORT's default)


def scrape(client: FlaskClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    resp = client.get("/metrics", base_url=METRICS)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(resp.get_data(as_text=True)):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


# --- Sentry ---------------------------------------------------------------------------------


def test_sentry_events_lose_every_secret(tmp_path: Path) -> None:
    settings = appkit.settings(
        tmp_path,
        "http://127.0.0.1:1",
        DATABASE_URL="postgresql://rsi:db-password-123@db:5432/rsi",
        SENTRY_DSN="https://public@o1.ingest.example/1",
    )
    pem = appkit.private_key_pem()
    scrub = observability.Scrubber(observability.configured_secrets(settings))
    sig = "sha256=" + "ab" * 32
    event: dict[str, Any] = {
        "message": f"GitHub said 401 for token {GHS}",
        "exception": {
            "values": [
                {
                    "type": "ValueError",
                    "value": f"bad secret {appkit.WEBHOOK_SECRET} and {appkit.INTAKE_SECRET}",
                    "stacktrace": {
                        "frames": [
                            {
                                "function": "github_webhook",
                                "vars": {
                                    "key": repr(pem),
                                    "pem_text": pem,
                                    "secret": f"'{appkit.WEBHOOK_SECRET}'",
                                    "body": 'b\'{"action": "created"}\'',
                                    "auth": f"'Bearer {JWT}'",
                                    "pat": f"'{GHP}'",
                                    "signature_header": f"'{sig}'",
                                    "url": "'https://rsi.example.com/reports/v-1?token=s3cr3t'",
                                    "delivery": "'d-1'",
                                },
                            }
                        ]
                    },
                }
            ]
        },
        "request": {
            "url": "https://rsi.example.com/webhooks/github",
            "method": "POST",
            "query_string": "token=report-token&x=1",
            "headers": {
                "Authorization": f"token {GHS}",
                "X-Hub-Signature-256": sig,
                "X-RSI-Signature-256": sig,
                "X-GitHub-Event": "pull_request",
                "User-Agent": "GitHub-Hookshot/abc",
            },
            "data": {"candidate_id": "c-1", "summary": "secret plans"},
            "cookies": {"session": "x"},
        },
        "breadcrumbs": {
            "values": [
                {"category": "log", "message": f"minted {GHS} for installation 7"},
                {"category": "db", "message": "connect postgresql://rsi:db-password-123@db/rsi"},
            ]
        },
        "extra": {"private_key": pem, "note": f"escaped key {pem!r}"},
        "contexts": {"runtime": {"name": "CPython"}},
    }
    out = scrub(json.loads(json.dumps(event)), {})
    text = json.dumps(out)
    for secret in (
        appkit.WEBHOOK_SECRET,
        appkit.INTAKE_SECRET,
        GHS,
        GHP,
        JWT,
        sig,
        "PRIVATE KEY",
        pem.splitlines()[1],
        "s3cr3t",
        "report-token",
        "db-password-123",
        "secret plans",
        "public@o1",
    ):
        assert secret not in text, secret
    request = out["request"]
    assert request["data"] == observability.FILTERED
    assert request["headers"]["Authorization"] == observability.FILTERED
    assert request["headers"]["X-Hub-Signature-256"] == observability.FILTERED
    assert request["headers"]["X-RSI-Signature-256"] == observability.FILTERED
    # What helps debugging stays.
    assert request["headers"]["User-Agent"] == "GitHub-Hookshot/abc"
    assert request["headers"]["X-GitHub-Event"] == "pull_request"
    assert request["query_string"] == "token=[Filtered]&x=1"
    frame = out["exception"]["values"][0]["stacktrace"]["frames"][0]
    assert frame["function"] == "github_webhook"
    assert frame["vars"]["delivery"] == "'d-1'"
    assert frame["vars"]["url"] == "'https://rsi.example.com/reports/v-1?token=[Filtered]'"
    assert out["breadcrumbs"]["values"][0]["message"] == "minted [Filtered] for installation 7"
    assert out["contexts"] == {"runtime": {"name": "CPython"}}
    assert out["exception"]["values"][0]["value"] == "bad secret [Filtered] and [Filtered]"


def test_init_sentry_only_with_a_dsn_and_without_pii(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sentry_sdk

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(sentry_sdk, "init", lambda **kw: calls.append(kw))
    monkeypatch.setattr(observability.sentry, "_sentry_component", None)
    assert observability.init_sentry(appkit.settings(tmp_path, "http://x"), "web") is False
    assert calls == []

    dsn = "https://public@o1.ingest.example/1"
    settings = appkit.settings(tmp_path, "http://x", SENTRY_DSN=dsn)
    assert observability.init_sentry(settings, "worker") is True
    assert observability.init_sentry(settings, "web") is True  # once per process
    assert len(calls) == 1
    options = calls[0]
    assert options["dsn"] == dsn
    assert options["send_default_pii"] is False
    before_send = options["before_send"]
    event = {"message": f"leaked {appkit.INTAKE_SECRET}", "request": {"data": "raw body"}}
    assert before_send(event, {}) == {
        "message": "leaked [Filtered]",
        "request": {"data": "[Filtered]"},
    }
    assert sentry_sdk.get_global_scope()._tags["component"] == "worker"
    sentry_sdk.get_global_scope().remove_tag("component")


# --- metrics --------------------------------------------------------------------------------


def _verification(vid: str, state: str) -> Verification:
    return Verification(
        id=vid,
        repo=appkit.UPSTREAM,
        task="cosyvoice3",
        base_sha="a" * 40,
        head_sha="b" * 40,
        head_repo=appkit.FORK,
        head_ref=appkit.HEAD_REF,
        gpus=["H200"],
        rounds=3,
        modes=["streaming"],
        candidate={},
        state=state,
    )


def test_metrics_after_real_deliveries(
    app: Flask, client: FlaskClient, github: GitHubStandIn
) -> None:
    before = scrape(client)
    installation = example("installation", "created")
    assert deliver(client, "installation", installation, "m-1") == 202
    assert deliver(client, "installation", installation, "m-1") == 202  # redelivery
    assert deliver(client, "installation", installation, "m-2", secret="wrong") == 401
    assert deliver(client, "ping", example("ping"), "m-3") == 200
    # A candidate: the App opens the PR, the check run and dispatches (GitHub calls).
    body = appkit.dumps(appkit.candidate())
    resp = client.post("/api/v1/candidates", data=body, headers=appkit.intake_headers(body, "m-4"))
    assert resp.status_code == 202, resp.get_data(as_text=True)
    with rt(app).db.session() as s:
        s.add_all([_verification("v-fail1", "failed"), _verification("v-fail2", "failed")])
        s.add(_verification("v-done1", "published"))

    after = scrape(client)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    deliveries = "rsi_webhook_deliveries_total"
    assert delta(deliveries, event="installation", outcome="accepted") == 1
    assert delta(deliveries, event="installation", outcome="duplicate") == 1
    assert delta(deliveries, event=observability.UNVERIFIED, outcome="rejected") == 1
    assert delta(deliveries, event="ping", outcome="accepted") == 1

    assert delta("rsi_jobs_total", task="process_delivery", outcome="success") == 1
    assert delta("rsi_jobs_total", task="start", outcome="success") >= 1

    # Every request GitHub received is counted once, the App JWT's and token minting too.
    counted = sum(
        v - before.get((name, labels), 0.0)
        for (name, labels), v in after.items()
        if name == "rsi_github_requests_total"
    )
    assert counted == len(github.requests) > 0
    assert github.count("POST", r"/access_tokens$") >= 1
    assert delta("rsi_github_requests_total", method="POST", status="201") >= 3  # token, PR, check
    assert delta("rsi_github_requests_total", method="GET", status="200") >= 1

    # The gauge is the database's truth, every state listed.
    verifications = {
        dict(labels)["state"]: v
        for (name, labels), v in after.items()
        if name == "rsi_verifications"
    }
    assert verifications["failed"] == 2
    assert verifications["published"] == 1
    assert verifications["dispatched"] == 1
    assert verifications["running"] == 0
    assert set(verifications) >= {"queued", "ingesting", "cancelled", "superseded", "timed-out"}

    # The rate limit as GitHub's latest response headers said, per client.
    remaining = {
        dict(labels)["installation"]: v
        for (name, labels), v in after.items()
        if name == "rsi_github_rate_limit_remaining"
    }
    assert "app" in remaining
    upstream = str(github.repo(appkit.UPSTREAM).installation_id)
    assert upstream in remaining
    assert 0 < remaining[upstream] < 5000
    assert value(after, "rsi_github_rate_limit_limit", installation=upstream) == 5000
    assert github.count("GET", r"^/rate_limit") == 0  # no API call for it


def test_metrics_text_names_every_family(client: FlaskClient) -> None:
    assert deliver(client, "ping", example("ping"), "t-1") == 200
    text = client.get("/metrics", base_url=METRICS).get_data(as_text=True)
    for name in (
        "# TYPE rsi_webhook_deliveries_total counter",
        "# TYPE rsi_jobs_total counter",
        "# TYPE rsi_github_requests_total counter",
        "# TYPE rsi_verifications gauge",
        'rsi_webhook_deliveries_total{event="ping",outcome="accepted"}',
        'rsi_verifications{state="queued"} 0.0',
        "process_resident_memory_bytes",
    ):
        assert name in text, name
    openmetrics = client.get(
        "/metrics", base_url=METRICS, headers={"Accept": "application/openmetrics-text"}
    )
    assert openmetrics.headers["Content-Type"].startswith("application/openmetrics-text")
    assert openmetrics.get_data(as_text=True).rstrip().endswith("# EOF")


def test_failed_jobs_are_counted(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.github.api import GitHubError

    def broken(ctx: handlers.Context) -> int:
        raise GitHubError(502, "Bad Gateway")  # an outage: the job fails and is retried

    monkeypatch.setattr(handlers, "dispatch", broken)
    before = scrape(client)
    assert deliver(client, "installation", example("installation", "created"), "f-1") == 202
    after = scrape(client)
    jobs = "rsi_jobs_total"
    for outcome in ("error", "retry"):
        got = value(after, jobs, task="process_delivery", outcome=outcome)
        assert got - value(before, jobs, task="process_delivery", outcome=outcome) == 1


def test_metrics_are_not_on_the_public_listener(
    tmp_path: Path, client: FlaskClient, github: GitHubStandIn
) -> None:
    # The public port (here 80, 443 and 8000) answers 404; the metrics port answers.
    for public in ("http://localhost", "https://rsi.example.com", "http://localhost:8000"):
        resp = client.get("/metrics", base_url=public)
        assert resp.status_code == 404, public
        assert b"rsi_" not in resp.get_data()
    # A Host header naming the metrics port does not make a public request one.
    resp = client.get("/metrics", headers={"Host": "localhost:9100"})
    assert resp.status_code == 404
    assert client.get("/metrics", base_url=METRICS).status_code == 200

    # Another port, or none at all, as configured.
    def app_with(**overrides: Any) -> FlaskClient:
        settings = appkit.settings(tmp_path, github.url, **overrides)
        return create_app(svc=runtime.build(settings, immediate=True)).test_client()

    other = app_with(METRICS_PORT=9464)
    assert other.get("/metrics", base_url=METRICS).status_code == 404
    assert other.get("/metrics", base_url="http://localhost:9464").status_code == 200
    assert app_with(METRICS_PORT=0).get("/metrics", base_url=METRICS).status_code == 404
    # Only when asked for, on the public listener too.
    opened = app_with(METRICS_PUBLIC=True)
    assert opened.get("/metrics", base_url="https://rsi.example.com").status_code == 200


def test_worker_serves_its_own_metrics(app: Flask) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stop = observability.serve_metrics(rt(app), port, host="127.0.0.1")
    try:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        stop()
    assert "rsi_verifications" in text
    assert "rsi_jobs_total" in text or "# HELP rsi_jobs" in text


def test_worker_runs_its_jobs_when_its_metrics_port_is_taken(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process on the worker's metrics port: the worker says so and goes on (it
    exited, was started again, exited again, and processed no delivery)."""
    from bot.cli import _serve_worker_metrics

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with caplog.at_level(logging.ERROR, logger="rsi.worker"):
            _serve_worker_metrics(rt(app), port, "127.0.0.1")
    [line] = [r.getMessage() for r in caplog.records if r.name == "rsi.worker"]
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in line
    assert "runs its jobs without them" in line
    assert "METRICS_PORT" in line


# --- logs -----------------------------------------------------------------------------------


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO)
    return caplog


def test_log_lines_carry_the_delivery_id(
    app: Flask,
    client: FlaskClient,
    records: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records.set_level(logging.DEBUG, logger="bot.web.webhooks")  # "queued" is a DEBUG line
    assert deliver(client, "installation", example("installation", "created"), "log-1") == 202
    queued = [r for r in records.records if r.name == "bot.web.webhooks"]
    assert queued
    assert all(getattr(r, "delivery_id", None) == "log-1" for r in queued)
    line = observability.ContextFormatter().format(queued[-1])
    assert " bot.web.webhooks delivery=log-1: delivery log-1 queued" in line
    done = [r for r in records.records if r.name == "bot.deliveries"]  # the job's INFO line
    line = observability.ContextFormatter().format(done[-1])
    assert " bot.deliveries delivery=log-1: delivery log-1 (installation.created) of " in line

    # A rejected delivery names the id it claimed too.
    records.clear()
    assert deliver(client, "ping", example("ping"), "log-bad", secret="wrong") == 401
    assert [
        getattr(r, "delivery_id", None) for r in records.records if r.name == "bot.web.webhooks"
    ] == ["log-bad"]

    # The job binds it too, outside any request (as in `rsi-bot worker`).
    def handler(ctx: handlers.Context) -> int:
        logging.getLogger("bot.handlers.test").info("handling %s", ctx.event)
        return 1

    monkeypatch.setattr(handlers, "dispatch", handler)
    with rt(app).db.session() as s:
        s.add(Delivery(id="log-2", source="github", event="installation", payload="{}"))
    records.clear()
    assert observability.current_delivery() is None  # the request unbound it
    rt(app).queue.process_delivery("log-2")
    handled = [r for r in records.records if r.name == "bot.handlers.test"]
    assert [getattr(r, "delivery_id", None) for r in handled] == ["log-2"]
    assert "delivery=log-2: handling installation" in observability.ContextFormatter().format(
        handled[0]
    )
    assert observability.current_delivery() is None
    logging.getLogger("bot.features.test").info("after")
    assert getattr(records.records[-1], "delivery_id", "unset") is None
    assert (
        observability.ContextFormatter()
        .format(records.records[-1])
        .endswith("bot.features.test: after")
    )


def test_configure_logging_sets_one_format(tmp_path: Path) -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    root.handlers.clear()
    try:
        settings = appkit.settings(tmp_path, "http://x", LOG_LEVEL="WARNING")
        observability.configure_logging(settings)
        observability.configure_logging(settings)  # idempotent
        assert len(root.handlers) == 1
        assert isinstance(root.handlers[0].formatter, observability.ContextFormatter)
        assert root.level == logging.WARNING
        with observability.delivery_context("abc"):
            record = logging.getLogger("x").makeRecord("x", logging.WARNING, "f", 1, "m", (), None)
        assert root.handlers[0].format(record).endswith(" WARNING x delivery=abc: m")
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


def test_delivery_filter_for_handlers_configured_elsewhere() -> None:
    record = logging.LogRecord("x", logging.INFO, "f", 1, "m", (), None)
    with observability.delivery_context("d-9"):
        assert observability.DeliveryFilter().filter(record)
    assert record.delivery_id == "d-9"  # type: ignore[attr-defined]
