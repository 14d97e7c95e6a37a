"""`rsi-bot serve`, `rsi-bot db upgrade` and configuration, as a user runs them."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from bot.config import ConfigError, load_settings
from tests import appkit

RSI = str(Path(sys.executable).with_name("rsi-bot"))
ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from bot.cli import main; main()"]  # with PYTHONPATH=ROOT


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    base.update(
        {
            "APP_ID": str(appkit.APP_ID),
            "PRIVATE_KEY": appkit.private_key_pem(),
            "WEBHOOK_SECRET": appkit.WEBHOOK_SECRET,
            "RSI_INTAKE_SECRET": appkit.INTAKE_SECRET,
            "RSI_RUNNER_REPO": appkit.RUNNER,
            "GITHUB_API_URL": "http://127.0.0.1:9",
            "GITHUB_RETRY_BACKOFF_S": "0",  # GitHub is unreachable here: no wait between tries
            "DATABASE_URL": f"sqlite:///{tmp_path / 'state' / 'rsi.db'}",
            "QUEUE_PATH": str(tmp_path / "state" / "queue.db"),
            "ARTIFACT_STORE": str(tmp_path / "artifacts"),
            "LOG_LEVEL": "DEBUG",
            "METRICS_PORT": str(free_metrics_port()),
        }
    )
    base.update(extra)
    return base


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_metrics_port() -> int:
    """A free port whose next is free too: `serve` gives the queue worker METRICS_PORT + 1."""
    while True:
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


def test_db_upgrade_from_any_directory(tmp_path: Path) -> None:
    elsewhere = tmp_path / "somewhere"
    elsewhere.mkdir()
    for _ in range(2):  # idempotent
        proc = subprocess.run(
            [RSI, "db", "upgrade"],
            cwd=elsewhere,
            env=env(tmp_path),
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "database is up to date" in proc.stdout
    assert (tmp_path / "state" / "rsi.db").exists()


def test_missing_configuration_names_every_variable(tmp_path: Path) -> None:
    e = env(tmp_path)
    for name in ("APP_ID", "WEBHOOK_SECRET", "PRIVATE_KEY"):
        e.pop(name)
    proc = subprocess.run(
        [RSI, "db", "upgrade"], env=e, capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert proc.returncode == 2
    assert "APP_ID: is missing" in proc.stderr
    assert "WEBHOOK_SECRET: is missing" in proc.stderr
    assert "PRIVATE_KEY or PRIVATE_KEY_PATH" in proc.stderr
    assert "create one with `rsi-bot setup`" in proc.stderr  # where a newcomer goes next
    e["RSI_RUNNER_REPO"] = "nope"
    proc = subprocess.run(
        [RSI, "db", "upgrade"], env=e, capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert "RSI_RUNNER_REPO: must be owner/name, the repository holding the GPU workflow" in (
        proc.stderr
    )
    assert appkit.INTAKE_SECRET not in proc.stderr


def test_settings_never_show_secrets() -> None:
    s = load_settings(
        _env_file=None,
        APP_ID=1,
        PRIVATE_KEY=appkit.private_key_pem(),
        WEBHOOK_SECRET="w-s3cr3t",
        RSI_INTAKE_SECRET="i-s3cr3t",
        RSI_RUNNER_REPO="o/r",
        SENTRY_DSN="https://k3y@sentry.example/1",
    )
    text = repr(s) + str(s.model_dump())
    for secret in ("w-s3cr3t", "i-s3cr3t", "PRIVATE KEY", "k3y@"):
        assert secret not in text
    with pytest.raises(ConfigError, match="RSI_RUNNER_REPO"):
        load_settings(
            _env_file=None,
            APP_ID=1,
            PRIVATE_KEY=appkit.private_key_pem(),
            WEBHOOK_SECRET="w",
            RSI_INTAKE_SECRET="i",
            RSI_RUNNER_REPO="not a repo",
        )


def test_database_url_forms() -> None:
    from bot.db import normalize_url

    assert normalize_url("postgresql://u@h:5432/db") == "postgresql+psycopg://u@h:5432/db"
    assert normalize_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("sqlite:////var/lib/rsi.db") == "sqlite:////var/lib/rsi.db"


def test_serve_runs_web_and_worker(tmp_path: Path) -> None:
    """`rsi-bot serve`: gunicorn (no development server), the queue worker beside it, and
    `/metrics` on its own port only."""
    from bot.signatures import sign
    from tests.standin import example

    port = free_port()
    e = env(tmp_path, PYTHONPATH=str(ROOT))  # this checkout's code
    metrics = f"http://127.0.0.1:{e['METRICS_PORT']}/metrics"
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*CLI, "serve", "--port", str(port)],
            env=e,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, port, log)
        server = requests.get(f"{base}/healthz", timeout=5).headers.get("Server", "")
        assert server == "gunicorn", server  # not Werkzeug's development server
        assert requests.get(f"{base}/metrics", timeout=5).status_code == 404
        body = requests.compat.json.dumps(example("installation", "created")).encode()
        headers = {
            "X-GitHub-Event": "installation",
            "X-GitHub-Delivery": "serve-1",
            "Content-Type": "application/json",
            "X-Hub-Signature-256": sign(body, appkit.WEBHOOK_SECRET),
        }
        assert (
            requests.post(
                f"{base}/webhooks/github", data=body, headers=headers, timeout=5
            ).status_code
            == 202
        )
        bad = dict(headers, **{"X-Hub-Signature-256": "sha256=00"})
        assert (
            requests.post(f"{base}/webhooks/github", data=body, headers=bad, timeout=5).status_code
            == 401
        )
        # The embedded worker processes the delivery.
        import sqlite3

        deadline = time.monotonic() + 20
        while True:
            with sqlite3.connect(tmp_path / "state" / "rsi.db") as db:
                row = db.execute("SELECT status FROM deliveries WHERE id='serve-1'").fetchone()
            if row and row[0] == "done":
                break
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        scraped = requests.get(metrics, timeout=5).text
        assert 'rsi_webhook_deliveries_total{event="installation",outcome="accepted"}' in scraped

        # A queue worker that dies is started again.
        def queue_workers() -> list[int]:
            return [
                int(p) for p in re.findall(r"queue worker started \(pid (\d+)\)", log.read_text())
            ]

        first = queue_workers()[-1]
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while queue_workers()[-1] == first:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert f"the queue worker (pid {first}) exited" in log.read_text()
    finally:
        stop(proc)
    assert proc.returncode == 0, log.read_text()
    text = log.read_text()
    for secret in (appkit.WEBHOOK_SECRET, appkit.INTAKE_SECRET, "BEGIN PRIVATE KEY"):
        assert secret not in text
    assert "serve-1" in text  # logs carry the delivery id


# --- slow clients ---------------------------------------------------------------------------

SLOW_CLIENTS = 2000
ATTACK_S = 20.0
CUT_OFF_S = 16.0  # headers within 5 s (keepalive), the body within 10 s more


def start_web(tmp_path: Path, how: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    """The web process as a deployment starts it: `rsi-bot serve`, or the Procfile's
    `web:` (gunicorn with bot.gunicorn_conf, on PORT); the code of this checkout."""
    e = env(tmp_path, PYTHONPATH=str(ROOT), PORT=str(port), METRICS_PORT=str(free_metrics_port()))
    if how == "serve":
        cmd = [*CLI, "serve", "--port", str(port)]
    else:
        subprocess.run([*CLI, "db", "upgrade"], env=e, cwd=tmp_path, check=True)
        web = (ROOT / "Procfile").read_text().split("web:", 1)[1].splitlines()[0]
        assert web.strip() == "gunicorn -c python:bot.gunicorn_conf 'bot.web.app:create_app()'"
        cmd = [sys.executable, "-m", "gunicorn", "-c", "python:bot.gunicorn_conf"]
        cmd += ["bot.web.app:create_app()"]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=e, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(proc, port, log)
    except BaseException:
        stop(proc)
        raise
    return proc


def wait_healthy(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 60  # two web workers and a queue worker start at once
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def signed_webhook(port: int, delivery: str) -> tuple[int, float]:
    """POST a signed `installation` delivery; (status, seconds) — 0 when it timed out."""
    from bot.signatures import sign
    from tests.standin import example

    body = json.dumps(example("installation", "created")).encode()
    headers = {
        "X-GitHub-Event": "installation",
        "X-GitHub-Delivery": delivery,
        "Content-Type": "application/json",
        "X-Hub-Signature-256": sign(body, appkit.WEBHOOK_SECRET),
    }
    t0 = time.perf_counter()
    try:
        status = requests.post(
            f"http://127.0.0.1:{port}/webhooks/github", data=body, headers=headers, timeout=15
        ).status_code
    except requests.RequestException:
        status = 0
    return status, time.perf_counter() - t0


@pytest.mark.long
@pytest.mark.parametrize("how", ["serve", "procfile"])
def test_slow_clients_do_not_delay_a_webhook(tmp_path: Path, how: str) -> None:
    """2,000 connections that send their headers a byte a second, or nothing, and come back
    whenever the server drops them: a signed webhook is still answered within a second
    throughout, and the server cuts every slow client off."""
    port = free_port()
    log = tmp_path / "web.log"
    web = start_web(tmp_path, how, port, log)
    attack = subprocess.Popen(
        [sys.executable, "-m", "tests.slowloris", str(port), str(SLOW_CLIENTS), str(ATTACK_S)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    timings: list[tuple[int, float]] = []
    when: list[float] = []
    try:
        assert attack.stdout is not None
        assert attack.stdout.readline().strip() == "ready"
        started = time.monotonic()
        time.sleep(1.0)  # every slow client is connected and waiting
        i = 0
        while time.monotonic() - started < ATTACK_S - 1.5:
            i += 1
            when.append(time.monotonic() - started)
            timings.append(signed_webhook(port, f"slow-{how}-{i}"))
            time.sleep(0.25)
        out, _ = attack.communicate(timeout=ATTACK_S + 30)
    finally:
        if attack.poll() is None:
            attack.kill()
            attack.wait()
        if attack.stdout is not None:
            attack.stdout.close()
        stop(web)
    stats = json.loads(out.strip().splitlines()[-1])
    worst = max(t for _, t in timings)
    slowest = sorted(zip((t for _, t in timings), when, strict=True), reverse=True)[:5]
    print(
        f"{how}: {len(timings)} webhooks, worst {worst:.3f} s; slow clients {stats['opened']};"
        f" slowest (s, at s): {[(round(t, 3), round(at, 1)) for t, at in slowest]}"
    )
    assert stats["connect_failed"] == 0, stats
    assert [s for s, _ in timings] == [202] * len(timings), (timings, log.read_text()[-3000:])
    assert worst < 1.0, slowest
    # Read timeouts: each of the first 2,000 was cut off, none later than CUT_OFF_S.
    closed = stats["closed"]
    summary = {k: (len(v), max(v, default=None)) for k, v in closed.items()}
    for lives in closed.values():
        assert len(lives) >= SLOW_CLIENTS // 3, summary
        assert max(lives) <= CUT_OFF_S, summary


@pytest.mark.long
@pytest.mark.parametrize(
    ("fields", "size"), [(99, 8000), (39, 4000)], ids=["gunicorn-defaults", "within-limits"]
)
def test_header_floods_do_not_delay_a_webhook(tmp_path: Path, fields: int, size: int) -> None:
    """Unsigned clients sending 800 KB of headers, 80 a second, delayed signed webhooks by
    4.7 s at gunicorn's defaults (it rescans the header buffer on each read): its limits
    now refuse such headers (431) past 40 fields or 4 KiB a line; webhooks stay at 10 ms."""
    port = free_port()
    log = tmp_path / "web.log"
    web = start_web(tmp_path, "procfile", port, log)
    flood = subprocess.Popen(
        [sys.executable, "-m", "tests.header_flood", str(port), "80", str(fields), str(size), "8"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    timings: list[tuple[int, float]] = []
    try:
        assert flood.stdout is not None
        assert flood.stdout.readline().strip() == "ready"
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < 7.5:
            i += 1
            timings.append(signed_webhook(port, f"flood-{fields}-{i}"))
            time.sleep(0.25)
        out, _ = flood.communicate(timeout=30)
        big = b"X-Filler: " + b"a" * 5000
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n\r\n")
            refused = c.recv(200)
    finally:
        if flood.poll() is None:
            flood.kill()
            flood.wait()
        if flood.stdout is not None:
            flood.stdout.close()
        stop(web)
    sent = json.loads(out.strip().splitlines()[-1])
    worst = max(t for _, t in timings)
    print(f"{fields} x {size} B: {sent}, {len(timings)} webhooks, worst {worst:.3f} s")
    assert sent["connections"] > 100, sent
    assert [s for s, _ in timings] == [202] * len(timings), (timings, log.read_text()[-3000:])
    assert worst < 1.0, timings
    assert refused.startswith(b"HTTP/1.1 431"), refused  # a header line past 4 KiB


def test_metrics_need_a_port_of_their_own(tmp_path: Path) -> None:
    port = free_port()
    e = env(tmp_path, PYTHONPATH=str(ROOT), METRICS_PORT=str(port), PORT=str(port))
    serve = subprocess.run(
        [*CLI, "serve", "--port", str(port)], env=e, cwd=tmp_path, capture_output=True, text=True
    )
    assert serve.returncode == 2
    assert "METRICS_PORT" in serve.stderr
    gunicorn = [sys.executable, "-m", "gunicorn", "-c", "python:bot.gunicorn_conf"]
    web = subprocess.run(
        [*gunicorn, "--check-config", "bot.web.app:create_app()"],
        env=e,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert web.returncode != 0
    assert "METRICS_PORT and PORT are both" in web.stdout + web.stderr


STALLED = 60
STALLED_MIB = 25


def worker_pids(arbiter: int) -> list[int]:
    children = Path(f"/proc/{arbiter}/task/{arbiter}/children").read_text().split()
    return [int(pid) for pid in children]


def peak_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for {pid}")


def stalled_bodies(port: int, count: int, mib: int) -> subprocess.Popen[str]:
    attack = subprocess.Popen(
        [sys.executable, "-m", "tests.stalled_bodies", str(port), str(count), str(mib)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert attack.stdout is not None
    assert attack.stdout.readline().strip() == "ready"
    return attack


def stalled_result(attack: subprocess.Popen[str]) -> dict[str, object]:
    out, _ = attack.communicate(input="", timeout=60)
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_stalled_unsigned_bodies_hold_little_memory(tmp_path: Path) -> None:
    """The outside try's attack: 60 unsigned connections each send a 25 MiB body but its
    last byte and stall. Each web worker's peak memory grows by well under 100 MiB (it grew
    by 1.6 GiB when bodies were read into memory), and a signed webhook is answered 202
    while they stall. bench/body_memory.py measures it against the old way."""
    port = free_port()
    web = start_web(tmp_path, "procfile", port, tmp_path / "web.log")
    try:
        workers = worker_pids(web.pid)
        assert len(workers) == 2, workers
        before = {pid: peak_mib(pid) for pid in workers}
        attack = stalled_bodies(port, STALLED, STALLED_MIB)
        status, _ = signed_webhook(port, "while-stalled")
        grown = {pid: peak_mib(pid) - before[pid] for pid in workers}
        result = stalled_result(attack)
    finally:
        stop(web)
    assert result["sent"] == STALLED, result
    assert status == 202
    assert max(grown.values()) < 100, grown


def test_past_the_disk_budget_a_body_is_answered_503_and_signed_ones_still_202(
    tmp_path: Path,
) -> None:
    """With the workers' disk budget for bodies at 8 MiB, 4 stalled 25 MiB bodies are
    answered 503 with Retry-After as the budget runs out; a signed webhook, which fits in
    memory, is still answered 202."""
    port = free_port()
    log = tmp_path / "web.log"
    e = env(tmp_path, PYTHONPATH=str(ROOT), PORT=str(port), WEB_BODY_DISK_BYTES=str(8 << 20))
    subprocess.run([*CLI, "db", "upgrade"], env=e, cwd=tmp_path, check=True)
    cmd = [sys.executable, "-m", "gunicorn", "-c", "python:bot.gunicorn_conf", "-w", "1"]
    with log.open("w") as out:
        web = subprocess.Popen(
            [*cmd, "bot.web.app:create_app()"],
            env=e,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_healthy(web, port, log)
        attack = stalled_bodies(port, 4, STALLED_MIB)
        status, _ = signed_webhook(port, "past-the-budget")
        result = stalled_result(attack)
    finally:
        stop(web)
    assert status == 202
    assert "HTTP/1.1 503 Service Unavailable" in result["answers"], result  # type: ignore[operator]
    text = log.read_text()
    assert re.search(r"answered .* 503: \d+ bytes of request bodies spooled already", text)
    assert "Error handling request" not in text
