"""A server started for one side, and what the runner reads from it and its client: a
free port, its health, the measured part's wall clock from the client's output."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runners import proc, sandbox


@dataclass
class Launched:
    """A server just started for one side: its process, cgroup and network, and what it
    was given (the values its command was rendered with, its health address)."""

    process: proc.Process
    group: sandbox.Group | None
    vals: dict[str, object]
    argv: list[str]
    health: str
    port: int
    variant: dict[str, Any]

    @property
    def net(self) -> str | None:
        """The network namespace it runs in (health checks and the client enter it)."""
        g = self.group
        return g.net.path if g is not None and g.net is not None else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def healthy(url: str, timeout: float = 5.0) -> bool:
    """HTTP(S): a 200 answer; tcp://host:port: the port accepts a connection."""
    if url.startswith("tcp://"):
        hostport = url[len("tcp://") :].rstrip("/")
        host_, _, port = hostport.rpartition(":")
        try:
            with socket.create_connection((host_.strip("[]") or "127.0.0.1", int(port)), timeout):
                return True
        except (OSError, ValueError):
            return False
    try:
        with _NO_PROXY.open(url, timeout=timeout) as r:
            return int(r.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wall_clock(speed_file: Path, runner_wall_s: float) -> tuple[float, str]:
    """The measured part's wall clock and where it came from: the client's own when its
    output says it (`wall_clock_s` in its summary or config, or in the one repeat of an
    ASR sweep, or a top-level `duration` as SGLang's and vLLM's serving benchmarks
    write), else completed requests over the summary's throughput, else the runner's
    timing of the client process (which includes any warm-up pass the client makes)."""
    doc: Any = {}
    try:
        text = speed_file.read_text(encoding="utf-8")
        try:
            doc = json.loads(text)
        except ValueError:  # JSON Lines (bench_serving appends a line per run): the last
            lines = [ln for ln in text.splitlines() if ln.strip()]
            doc = json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    summary: dict[str, Any] = doc["summary"] if isinstance(doc.get("summary"), dict) else {}
    config: dict[str, Any] = doc["config"] if isinstance(doc.get("config"), dict) else {}

    def pos(v: Any) -> float | None:
        ok = isinstance(v, int | float) and not isinstance(v, bool) and v > 0
        return float(v) if ok and v != float("inf") else None

    for source, d in (("client-summary", summary), ("client-config", config)):
        v = pos(d.get("wall_clock_s"))
        if v is not None:
            return v, source
    # benchmark_asr_seedtts' sweep: one result per concurrency, one summary per repeat.
    results = doc.get("results") if isinstance(doc.get("results"), list) else []
    reps = [
        r
        for res in results
        if isinstance(res, dict) and isinstance(res.get("per_repeat"), list)
        for r in res["per_repeat"]
        if isinstance(r, dict)
    ]
    v = pos(reps[0].get("wall_clock_s")) if len(reps) == 1 else None
    if v is not None:
        return v, "client-summary"
    v = pos(doc.get("duration"))
    if v is not None:
        return v, "client-duration"
    done, thr = summary.get("completed_requests"), pos(summary.get("throughput_qps"))
    if isinstance(done, int) and done > 0 and thr is not None:
        return round(done / thr, 4), "client-throughput"
    return round(runner_wall_s, 4), "runner"
