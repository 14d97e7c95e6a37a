"""Memory a web worker holds for unsigned request bodies, and a signed webhook meanwhile.

The outside try's attack: 60 unsigned connections declare a 25 MiB body, send
all of it but the last byte and stall; and 24 unsigned senders send a whole 25 MiB body
as fast as they can. One web worker, as the Procfile starts it (`gunicorn -c
python:bot.gunicorn_conf -w 1`, SQLite), is measured twice in this process, alternately:

* reference: the worker as it was, reading each body whole into memory before the
  application runs (`InMemoryWorker` below);
* bounded: `bot.serving.GeventWorker`, which keeps 64 KiB of each body and 16 MiB in all
  in memory and spools the rest (`bot.bodies`).

For each: the worker's resident memory at rest and its peak (VmHWM) during each attack,
and the latency of signed webhooks sent while the stalled bodies are held.

    .venv/bin/python bench/body_memory.py

Target: the bounded worker's peak ≤ 300 MiB under the stalled senders, and a
signed webhook answered 202 in < 1 s. Exit 0 when met, 1 when not.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from bot.serving import BODY_TIMEOUT_S, MAX_BODY_BYTES, GeventWorker  # noqa: E402
from tests import appkit  # noqa: E402

STALLED, FAST, MIB = 60, 24, 25
SIGNED = 10


class InMemoryWorker(GeventWorker):  # type: ignore[misc]
    """The reference: the body read whole into memory before the application runs (the
    worker before bodies were bounded)."""

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> Any:
        import gevent

        if req.body is not None:
            try:
                with gevent.Timeout(BODY_TIMEOUT_S, TimeoutError("too slow")):
                    body = req.body.read(MAX_BODY_BYTES + 1)
            except TimeoutError:
                raise StopIteration("request body too slow") from None
            req.body = io.BytesIO(body)
        return super(GeventWorker, self).handle_request(listener_name, req, sock, addr)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(worker_class: str, state: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """gunicorn with one worker of `worker_class`: (arbiter, worker pid, port)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(
        APP_ID=str(appkit.APP_ID),
        PRIVATE_KEY=appkit.private_key_pem(),
        WEBHOOK_SECRET=appkit.WEBHOOK_SECRET,
        RSI_INTAKE_SECRET=appkit.INTAKE_SECRET,
        RSI_RUNNER_REPO=appkit.RUNNER,
        GITHUB_API_URL="http://127.0.0.1:9",
        DATABASE_URL=f"sqlite:///{state / 'rsi.db'}",
        QUEUE_PATH=str(state / "queue.db"),
        ARTIFACT_STORE=str(state / "artifacts"),
        METRICS_PORT="0",
        PORT=str(port),
        PYTHONPATH=f"{ROOT}:{ROOT / 'bench'}",
        GUNICORN_WORKER_CLASS=worker_class,
    )
    cli = [sys.executable, "-c", "from bot.cli import main; main()"]
    subprocess.run([*cli, "db", "upgrade"], env=env, cwd=state, check=True, capture_output=True)
    cmd = [sys.executable, "-m", "gunicorn", "-c", "python:bot.gunicorn_conf", "-w", "1"]
    web = subprocess.Popen(
        [*cmd, "bot.web.app:create_app()"],
        env=env,
        cwd=state,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).ok:
                break
        except requests.RequestException:
            pass
        if time.monotonic() > deadline or web.poll() is not None:
            raise SystemExit(f"{worker_class}: the web process did not start")
        time.sleep(0.2)
    children = Path(f"/proc/{web.pid}/task/{web.pid}/children").read_text().split()
    return web, int(children[0]), port


def reset_peak(pid: int) -> None:
    """Start VmHWM again from the present resident size (Linux: clear_refs 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no {field} for {pid}")


def signed(port: int, n: int) -> list[tuple[int, float]]:
    from bot.signatures import sign
    from tests.standin import example

    body = json.dumps(example("installation", "created")).encode()
    out = []
    for i in range(n):
        headers = {
            "X-GitHub-Event": "installation",
            "X-GitHub-Delivery": f"bench-{time.monotonic_ns()}-{i}",
            "Content-Type": "application/json",
            "X-Hub-Signature-256": sign(body, appkit.WEBHOOK_SECRET),
        }
        t0 = time.perf_counter()
        try:
            r = requests.post(
                f"http://127.0.0.1:{port}/webhooks/github", data=body, headers=headers, timeout=15
            )
            status = r.status_code
        except requests.RequestException:
            status = 0
        out.append((status, time.perf_counter() - t0))
    return out


def stalled(port: int) -> list[tuple[int, float]]:
    attack = subprocess.Popen(
        [sys.executable, "-m", "tests.stalled_bodies", str(port), str(STALLED), str(MIB)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert attack.stdout is not None
    if attack.stdout.readline().strip() != "ready":
        raise SystemExit("the stalled senders did not start")
    timings = signed(port, SIGNED)
    attack.communicate(input="", timeout=60)
    return timings


def fast(port: int) -> None:
    body = b"x" * (MIB << 20)

    def send() -> None:
        with contextlib.suppress(requests.RequestException):
            requests.post(
                f"http://127.0.0.1:{port}/webhooks/github",
                data=body,
                headers={"X-Hub-Signature-256": "sha256=" + "0" * 64},
                timeout=60,
            )

    threads = [threading.Thread(target=send) for _ in range(FAST)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def measure(worker_class: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        web, pid, port = start(worker_class, Path(tmp))
        try:
            signed(port, 3)  # warm
            rest = mib(pid, "VmRSS")
            reset_peak(pid)
            timings = stalled(port)
            peak_stalled = mib(pid, "VmHWM")
            time.sleep(BODY_TIMEOUT_S)  # the stalled ones are cut off and their bodies freed
            reset_peak(pid)
            fast(port)
            peak_fast = mib(pid, "VmHWM")
        finally:
            web.send_signal(signal.SIGINT)
            web.wait(timeout=30)
    lat = [t for _, t in timings]
    return {
        "rest": rest,
        "peak_stalled": peak_stalled,
        "peak_fast": peak_fast,
        "signed_202": sum(s == 202 for s, _ in timings),
        "signed_median": statistics.median(lat),
        "signed_max": max(lat),
    }


def main() -> int:
    classes = {"reference": "body_memory.InMemoryWorker", "bounded": "bot.serving.GeventWorker"}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in classes}
    for name in ("reference", "bounded", "bounded", "reference"):
        runs[name].append(measure(classes[name]))
    worst = {k: {f: max(r[f] for r in v) for f in v[0]} for k, v in runs.items()}
    print(f"{STALLED} stalled and {FAST} fast unsigned senders of {MIB} MiB; one worker")
    print(
        f"{'':<10} {'at rest':>9} {'peak stalled':>13} {'peak fast':>10} {'signed 202':>11}"
        f" {'signed max':>11}"
    )
    for k, w in worst.items():
        print(
            f"{k:<10} {w['rest']:>7.0f} M {w['peak_stalled']:>11.0f} M {w['peak_fast']:>8.0f} M"
            f" {min(r['signed_202'] for r in runs[k]):>5.0f}/{SIGNED:<5} {w['signed_max']:>9.3f} s"
        )
    ref, new = worst["reference"], worst["bounded"]
    print(
        "peak under stalled senders, bounded/reference: "
        f"{new['peak_stalled'] / ref['peak_stalled']:.2f}"
    )
    print(f"peak under fast senders, bounded/reference: {new['peak_fast'] / ref['peak_fast']:.2f}")
    ok = (
        new["peak_stalled"] <= 300
        and min(r["signed_202"] for r in runs["bounded"]) == SIGNED
        and new["signed_max"] < 1.0
    )
    print("target met" if ok else "target NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
