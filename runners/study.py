"""What a measurement design needs of the verification it runs in.

The designs (runners/resident.py, runners/crossover.py) schedule the runs; the verifier
(runners/verify.py) owns the checkouts, the isolation, the bundle and the signals. A
design sees the verifier only through `Study`, so it depends on this narrow interface
and not on the verifier's module: no import circle, and a design can be read (and
tested) on its own. `Options` are the verification's settings, shared by both.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runners import adaptive, placement, proc, sandbox, schedule
from runners.bundle import BundleWriter
from runners.failures import RunFailure
from runners.gpu import Backend
from runners.serving import Launched
from runners.task import Task


@dataclass
class Options:
    repo: str
    base: str
    head_repo: str
    head: str
    task: Task
    gpu: str
    rounds: int
    modes: list[str]
    out: Path
    verification_id: str
    repo_name: str | None = None
    head_repo_name: str | None = None
    base_ref: str | None = None
    head_ref: str | None = None
    concurrencies: list[int] | None = None
    requests: int | None = None
    warmup_requests: int | None = None
    workdir: Path | None = None
    keep_workdir: bool = False
    run_timeout_s: float | None = None
    total_timeout_s: float | None = None
    gpu_idle_timeout_s: float | None = None
    on_failure: str | None = None
    python: str = field(default_factory=lambda: sys.executable)
    sample_interval_s: float = 1.0
    prelaunch_s: float = 1.0
    runner_name: str | None = None
    runner_labels: list[str] | None = None
    backend: Backend | None = None  # tests inject one; else detected
    isolation: str = "cgroup"  # runners/sandbox.py; "none" only when asked for
    candidate_users: dict[str, str] | None = None  # side -> user (default rsi-base/rsi-head)
    benchmark_ref: str | None = None  # the trusted tree's ref (default: task's, else base)
    adaptive: bool = False  # --rounds auto: `rounds` is then the most a side (runners/adaptive.py)
    threshold_pct: float = 3.0
    gpu_minutes: float | None = None
    cpu_placement: str = "split"  # runners/placement.py: server and client on disjoint cores
    design: str = "sequential"  # or "alternate": both servers resident (runners/resident.py),
    # or "crossover": base and head on two GPUs at once, swapped (runners/crossover.py)
    control: str = "none"  # "aa": a null control's pairs beside the real ones (alternate only)
    burst_sizing: bool = True  # alternate with rounds until decided: size bursts (bursts.py)
    design_source: str = "option"  # "task": `--design auto` took the task's; "control": its need


class Study(Protocol):
    """The verification as a design sees it (runners/verify.py `Verifier`)."""

    o: Options
    task: Task
    bundle: BundleWriter
    backend: Backend
    sandbox: sandbox.Sandbox
    placement: placement.Placement | None
    rounds: adaptive.Rounds
    deadline: float  # time.monotonic() by which the verification ends
    total_timeout: float
    run_timeout: float
    gpu_idle_timeout: float
    on_failure: str
    minutes: Callable[[list[dict[str, Any]]], dict[str, float]]
    warnings: list[str]  # the manifest's `warnings`

    def values(self, side: str, rnd: int | None, **extra: object) -> dict[str, object]: ...

    def client_env(self, values: dict[str, object]) -> dict[str, str]: ...

    def fresh_scratch(self, label: str) -> Path: ...

    def launch_server(
        self,
        side: str,
        p: schedule.Planned,
        label: str,
        scratch: Path,
        log: Path,
        device: str | None = None,
        cpus: frozenset[int] | None = None,
    ) -> Launched: ...

    def _design(self) -> dict[str, Any]: ...

    def _skipped(self, p: schedule.Planned, reason: str) -> dict[str, Any]: ...

    def _check_signal(self) -> None: ...

    def _shielded(self) -> AbstractContextManager[None]: ...

    def _limit(self, step_s: float, run_deadline: float) -> tuple[float, str]: ...

    def _wait_healthy(
        self, server: proc.Process, url: str, run_deadline: float, net: str | None = None
    ) -> float: ...

    def _warm_up(
        self,
        p: schedule.Planned,
        vals: dict[str, object],
        scratch: Path,
        cenv: dict[str, str],
        client_log: Path,
        server: proc.Process,
        run_deadline: float,
        net: str | None = None,
    ) -> dict[str, Any]: ...

    def _client(
        self,
        what: str,
        template: str,
        vals: dict[str, object],
        env: dict[str, str],
        log: Path,
        server: proc.Process | None,
        step_timeout: float,
        run_deadline: float,
        net: str | None = None,
    ) -> proc.Finished: ...

    def benchmark_output(self, vals: dict[str, object]) -> Path: ...

    def _output(self, template: str, vals: dict[str, object]) -> Path | None: ...

    def _log_tail(
        self, failure: RunFailure, server_log: Path, client_log: Path, info: dict[str, Any]
    ) -> str: ...
