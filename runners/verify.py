"""`rsi-runner verify`: base and head of one change, measured on one machine, as a bundle.

The steps: check out both commits as git worktrees, prepare each as the task
says, fingerprint each side's environment, then run the schedule — per mode and
concurrency, rounds in balanced order. One run: wait for an idle GPU, start the server,
time it until healthy, sample GPU and CPU while it runs, warm up, run the upstream's own
benchmark client (and, when due, its accuracy script), stop the server, and write the
run's files. Whatever goes wrong is recorded as a failed run with its reason and the
tail of its logs; the task's policy says whether the schedule goes on. The manifest is
written last, also when the verification is interrupted (SIGTERM, SIGINT) or breaks.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import Any

from runners import (
    __version__,
    adaptive,
    crossover,
    devices,
    fingerprint,
    gitwork,
    host,
    memory,
    netns,
    placement,
    proc,
    reach,
    resident,
    sandbox,
    schedule,
    sequential,
)
from runners.bundle import BundleWriter
from runners.failures import Interrupted, RunFailure, RunnerBug
from runners.gpu import Backend, NoGpu, detect
from runners.serving import Launched, free_port, healthy, wall_clock
from runners.study import Options as Options
from runners.task import RUNNER_ROOT, HeadFileError, render, render_command
from runners.util import tail

GPU_LABELS = {"h100": "H100", "h200": "H200", "cpu": "CPU"}
NETNS = Path(__file__).resolve().parent / "_netns.py"  # a client into a server's namespace


def _sha256(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except OSError:
        return None


WARMUP_EXTRA_SHARE = 0.1  # the most of the total time limit extra warm-up passes may take


class Verifier:
    def __init__(self, opts: Options) -> None:
        self.o = opts
        self.task = opts.task
        pol = self.task.policy
        self.run_timeout = opts.run_timeout_s or pol.run_timeout_s
        self.total_timeout = opts.total_timeout_s or pol.total_timeout_s
        self.gpu_idle_timeout = opts.gpu_idle_timeout_s or pol.gpu_idle_timeout_s
        self.on_failure = opts.on_failure or pol.on_failure
        self.gpu = opts.gpu.lower()
        self.concurrencies = opts.concurrencies or list(self.task.benchmark.concurrencies)
        self.requests = opts.requests or self.task.benchmark.requests
        self.warmup = (
            opts.warmup_requests
            if opts.warmup_requests is not None
            else self.task.benchmark.warmup_requests
        )
        acc = None
        if self.task.accuracy is not None:
            acc = "every_round" if self.task.accuracy.every_round else "first"
        self.plan = schedule.plan(
            opts.modes, self.concurrencies, opts.rounds, self.requests, self.warmup, acc
        )
        self.backend: Backend = NoGpu()
        self.warnings: list[str] = []
        self.design = opts.design
        self.refused: str | None = None  # why the design asked for could not run
        self.refused_design: str | None = None  # … and which design that was
        self.minutes: Callable[[list[dict[str, Any]]], dict[str, float]] = adaptive.held_minutes
        self.rounds = self._rounds()
        self.worktrees: dict[str, Path] = {}
        self.rsi_root = RUNNER_ROOT  # `{rsi_root}`; a readable copy when isolated needs one
        self.rsi_root_why: str | None = None
        self.bench_tree: Path | None = None
        self.placement: placement.Placement | None = None
        self.sandbox = sandbox.Sandbox("none", {}, None, Path("."))
        # the trusted client's: the runner's less its credentials; candidate code's: only
        # what the allowlist names (runners/proc.py), and the task's own variables
        self.env_base, _ = proc.scrub_env(os.environ)
        self.env_candidate, self.withheld = proc.candidate_env(
            os.environ, self.task.candidate.inherit
        )
        self._pending: int | None = None
        self._raised = False
        self._shield = False
        self.deadline = time.monotonic() + self.total_timeout
        self.workdir: Path | None = None
        self._own_workdir = False
        self.bundle: BundleWriter

    def _rounds(self) -> adaptive.Rounds:
        return adaptive.Rounds(
            self.plan,
            self.o.adaptive,
            self.o.rounds,
            self.o.threshold_pct,
            self.o.gpu_minutes,
            warn=self.warnings.append,
            progress=self.say,
            root=self.o.out,
            paired=self.design in resident.PAIRED,
            rounds=self.design == "sequential",
        )

    def _design(self) -> dict[str, Any]:
        """The manifest's `design` (runners/resident.py): what ran and what it assumes."""
        extra: dict[str, Any] = {}
        if self.design in resident.RESIDENT:
            extra["burst_requests"] = self.requests
            extra["memory_fraction"] = self.memory_share()
        if self.refused:
            extra["refused"] = self.refused
            extra["refused_design"] = self.refused_design
        extra["chosen_by"] = self.o.design_source
        return resident.describe(self.design, **extra)

    # ------------------------------------------------------------------ signals

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._pending = signum
        if not self._shield and not self._raised:
            self._raised = True
            raise Interrupted(signum)

    def _check_signal(self) -> None:
        if self._pending is not None and not self._raised:
            self._raised = True
            raise Interrupted(self._pending)

    @contextmanager
    def _shielded(self) -> Iterator[None]:
        prev, self._shield = self._shield, True
        try:
            yield
        finally:
            self._shield = prev

    @contextmanager
    def _signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    # ------------------------------------------------------------------ header

    def header(self) -> dict[str, Any]:
        o = self.o
        head: dict[str, Any] = {"sha": o.head, "ref": o.head_ref}
        head["repo"] = o.head_repo_name or gitwork.repo_name(o.head_repo)
        labels = o.runner_labels
        if labels is None:
            env_labels = os.environ.get("RSI_RUNNER_LABELS")
            if env_labels:
                labels = [x.strip() for x in env_labels.split(",") if x.strip()]
            elif os.environ.get("GITHUB_ACTIONS") == "true":
                labels = ["self-hosted", "linux", self.gpu]
            else:
                labels = []
        b = self.task.benchmark
        return {
            "verification_id": o.verification_id,
            "repo": o.repo_name or gitwork.repo_name(o.repo),
            "task": self.task.name,
            "base": {"sha": o.base, "ref": o.base_ref},
            "head": head,
            "gpu": GPU_LABELS.get(self.gpu, self.gpu.upper()),
            "runner": {
                "name": o.runner_name or os.environ.get("RUNNER_NAME") or socket.gethostname(),
                "labels": labels,
                "hostname": socket.gethostname(),
                "rsi_runner": __version__,
                "commit": _runner_commit(),
                "python": sys.version.split()[0],
                "env_withheld": self.withheld,
                "env_inherited": sorted(self.env_candidate),
                "cuda_device_order": devices.ORDER,
            },
            "environment": {},
            "benchmark": {
                "command": b.modes[o.modes[0]] if o.modes and o.modes[0] in b.modes else None,
                "commands": {m: b.modes[m] for m in o.modes if m in b.modes},
                "server_command": self.task.server.command,
                "dataset": b.dataset,
                "modes": o.modes,
                "concurrencies": self.concurrencies,
                "rounds": "auto" if o.adaptive else o.rounds,
                "max_rounds": o.rounds,
                "requests": self.requests,
                "warmup_requests": self.warmup,
                "order": "balanced",
            },
            "design": self._design(),
            "task_file": self.task.summary(),
            "policy": {
                "on_failure": self.on_failure,
                "run_timeout_s": self.run_timeout,
                "total_timeout_s": self.total_timeout,
                "gpu_idle_timeout_s": self.gpu_idle_timeout,
            },
            "planned_runs": len(self.plan),
        }

    # ------------------------------------------------------------------ placeholders

    def _base_values(self, side: str) -> dict[str, object]:
        return {
            "python": self.o.python,
            "worktree": str(self.worktrees.get(side, "")),
            "model": self.task.model,
            "gpu": self.gpu,
            "side": side,
            "rsi_root": str(self.rsi_root),
            "bench": str(self.bench_tree or ""),
            "memory_fraction": self.memory_share(),
            "warmup": self.warmup,
        }

    def memory_share(self) -> float:
        """`{memory_fraction}`: each server's share of its GPU's memory (runners/memory.py):
        the resident designs' two servers (three with the null control) split a GPU; the
        sequential design's one server has it alone."""
        if self.design not in resident.RESIDENT:
            return memory.SEQUENTIAL
        return memory.resident_share(3 if self.o.control != "none" else 2)

    def _gpu_memory(self, device: str | None) -> tuple[int | None, int | None]:
        """(used, total) MiB of the GPU a server is about to start on; None: unknown."""
        want = int(device) if device is not None and device.isdigit() else None
        used: int | None = None
        for s in self.backend.sample():
            if want is None or s.get("gpu") == want:
                u = s.get("mem_used_mib")
                used = int(u) if isinstance(u, int | float) else None
                break
        return used, self.backend.info().gpu_memory_total_mib

    def dataset(self, side: str) -> str:
        """`benchmark.dataset` for a side: placeholders, then `$VARS` and `~` expanded."""
        d = self.task.benchmark.dataset
        if d is None:
            return ""
        return os.path.expanduser(os.path.expandvars(render(d, self._base_values(side))))

    def values(self, side: str, rnd: int | None, **extra: object) -> dict[str, object]:
        v = self._base_values(side)
        v["dataset"] = self.dataset(side)
        if rnd is not None:
            v["round"] = rnd
        v.update(extra)
        return v

    def env(self, side: str, values: dict[str, object]) -> dict[str, str]:
        """The candidate's environment: the allowlisted variables, its worktree first on
        the path, its own home, the task's variables."""
        tree = self.worktrees[side]
        return self.sandbox.env(side, self._env(tree, values, self.env_candidate))

    def client_env(self, values: dict[str, object]) -> dict[str, str]:
        """The client's: the trusted tree first on the path, the runner's own user."""
        assert self.bench_tree is not None
        # the task's variables rendered for the trusted tree: `{worktree}` in them must
        # not put the head's files on the root client's paths
        vals = dict(values, worktree=str(self.bench_tree))
        env = self._env(self.bench_tree, vals, self.env_base)
        env["PYTHONNOUSERSITE"] = "1"
        return env

    def _env(self, tree: Path, values: dict[str, object], base: dict[str, str]) -> dict[str, str]:
        env = dict(base)
        env["PYTHONUNBUFFERED"] = "1"
        # CUDA then numbers GPUs as NVML and nvidia-smi do, so an index in
        # CUDA_VISIBLE_DEVICES names the GPU the runner samples (runners/devices.py).
        env.update(devices.ORDER_ENV)
        env["PYTHONPATH"] = str(tree) + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
        )
        for k, t in self.task.server.env.items():
            try:
                env[k] = render(t, values)
            except KeyError:
                continue  # names a run's placeholder ({mode}, {port}…): set for runs only
        return env

    # ------------------------------------------------------------------ the whole verification

    def say(self, line: str) -> None:
        """A progress line on stderr: time spent, time left under the total limit."""
        spent = time.monotonic() - (self.deadline - self.total_timeout)
        left = max(0.0, self.deadline - time.monotonic())
        print(f"rsi-runner: [{_clock(spent)} in, {_clock(left)} left] {line}", file=sys.stderr)

    def _ran(self, run: dict[str, Any]) -> None:
        """A run as it ends; the runs an early stop skips are counted at the end, not said
        one by one (a stopped plan would bury the error above them)."""
        if run.get("status") == "skipped":
            return
        n = len(self.bundle.runs)
        took = run.get("duration_s") or run.get("run_s")
        how = f" in {float(took):.0f} s" if isinstance(took, int | float) else ""
        why = f": {run.get('reason') or run.get('error')}" if run.get("status") != "ok" else ""
        self.say(
            f"run {n} of {len(self.plan)} {run.get('status')}: {run.get('side')} "
            f"{run.get('mode')} c{run.get('concurrency')} round {run.get('round')}{how}"
            f"{str(why)[:200]}"
        )

    def run(self) -> int:
        o = self.o
        self.bundle = BundleWriter(o.out, self.header())
        self.bundle.on_add = self._ran
        complete = False
        code = 1
        interrupted: str | None = None
        error: str | None = None
        stop_reason: str | None = None
        co: gitwork.Checkout | None = None
        with self._signals():
            try:
                self.workdir = self._make_workdir()
                self._isolate()
                self.backend = self._backend()
                self._place()
                try:
                    co = gitwork.checkout(self.workdir, o.repo, o.base, o.head_repo, o.head)
                except gitwork.GitError as exc:
                    raise _Abort(f"checkout failed: {exc}") from exc
                self.worktrees = {"base": co.base, "head": co.head}
                self.bundle.header["base"]["sha"] = co.base_sha
                self.bundle.header["head"]["sha"] = co.head_sha
                self._trusted_tree(co)
                for side, wt in self.worktrees.items():
                    self.sandbox.own(side, wt)
                self._fingerprint()
                self._prepare()
                stop_reason = self._schedule()
                complete = stop_reason is None
                code = 0 if complete else 1
            except Interrupted as exc:
                interrupted = exc.name
                code = 128 + exc.signum
                self._skip_rest(f"the verification was interrupted ({exc.name})")
            except _Abort as exc:
                error = str(exc)
                self._skip_rest(error)
            except RunnerBug as exc:
                error = f"runner error: {exc.exc!r}"
                self._skip_rest(error)
                traceback.print_exception(type(exc.exc), exc.exc, exc.exc.__traceback__)
            except Exception as exc:
                error = f"runner error: {exc!r}"
                traceback.print_exc()
                self._skip_rest(error)
            finally:
                self._shield = True
                self._raised = True  # from here on a signal only waits for the manifest
                self.bundle.update(
                    warnings=self.warnings,
                    interrupted=interrupted,
                    error=error,
                    stopped=stop_reason,
                    adaptive=self.rounds.manifest(cut_short=not complete),
                    gpu_minutes=self.minutes(self.bundle.runs),
                )
                if self.sandbox.isolated:  # with what the proxy to the task's hosts saw
                    self.bundle.update(isolation=self._isolation())
                path = self.bundle.finalize(complete)
                self._cleanup(co)
        n = {
            s: sum(1 for r in self.bundle.runs if r["status"] == s)
            for s in ("ok", "failed", "skipped")
        }
        print(
            f"rsi-runner: {path} written: {n['ok']} ok, {n['failed']} failed, "
            f"{n['skipped']} skipped of {len(self.plan)}; complete={complete}",
            file=sys.stderr,
        )
        for line in self._why_stopped(stop_reason or interrupted or error):
            print(f"rsi-runner: {line}", file=sys.stderr)
        return code

    def _why_stopped(self, early: str | None) -> list[str]:
        """Why the runs stopped where they did: cut short, or each row's sequential
        decision (rounds until decided), or the fixed rounds all ran."""
        if early:
            return [f"stopped early: {early}"]
        doc = self.rounds.manifest(cut_short=False) if self.o.adaptive else None
        if doc is None:
            return ["stopped: every planned run was made (fixed rounds)"]
        rows = doc.get("rows") or {}
        return [f"stopped: {doc.get('stopped')}"] + [
            f"  {name}: {r.get('verdict')}, {r.get('reason')}" for name, r in rows.items()
        ]

    def _schedule(self) -> str | None:
        """Run the plan in the chosen design; why it stopped early, or None."""
        if self.design == "crossover":
            cross = crossover.Crossover(self)
            try:
                return cross.run()
            except resident.Refused as exc:
                self._fall_back(str(exc), cross.fallback)
        if self.design == "alternate":
            alt = resident.Alternation(self)
            try:
                reason = alt.run()
            except resident.Refused as exc:
                self._fall_back(str(exc))
            else:
                return reason
        return sequential.Sequential(self).run()

    def _fall_back(self, reason: str, to: str = "sequential") -> None:
        """The design cannot run here (two servers do not fit a GPU, or the crossover has
        one GPU): `to` runs the plan from the start, the first refusal recorded."""
        self.warnings.append(f"design {self.design} refused: {reason}")
        if self.o.control != "none" and to != "alternate":
            self.warnings.append("the null control needs the alternate design: it did not run")
        if self.refused is None:
            self.refused, self.refused_design = reason, self.design
        self.design = to
        self.bundle.runs.clear()
        self.rounds = self._rounds()
        self.bundle.update(design=self._design())

    def _make_workdir(self) -> Path:
        if self.o.workdir is not None:
            self.o.workdir.mkdir(parents=True, exist_ok=True)
            return self.o.workdir.resolve()
        self._own_workdir = True
        return Path(tempfile.mkdtemp(prefix="rsi-work-")).resolve()

    def _isolate(self) -> None:
        """Open the sandbox (or refuse), and close the bundle to the candidates."""
        assert self.workdir is not None
        try:
            self.sandbox = sandbox.Sandbox.open(
                self.o.isolation, self.workdir / "sandbox", self.o.candidate_users
            )
        except sandbox.SandboxError as exc:
            self.bundle.update(isolation={"mode": self.o.isolation, "error": str(exc)})
            raise _Abort(str(exc)) from exc
        self.sandbox.hosts = self.task.candidate.hosts
        self.bundle.update(isolation=self._isolation())
        self._network_warnings()
        if not self.sandbox.isolated:
            self.warnings.append(
                "candidate code ran as the runner's own user, without isolation "
                "(--isolation none): it could have changed the other side or the records"
            )
            return
        # The candidates may pass through the work folder to their own worktree, but
        # not list it; the bundle is the runner's alone.
        self.workdir.chmod(0o711)
        blocked = [p for p in self.workdir.parents if not p.stat().st_mode & 0o001]
        if blocked:
            raise _Abort(
                f"the candidate users cannot reach {self.workdir}: {blocked[0]} is not "
                "searchable by others (chmod o+x it, or give another --workdir)"
            )
        self.bundle.out.chmod(0o700)
        self._reachable_root()
        for side in self.sandbox.accounts:
            self._can_run_python(side)

    def _network_warnings(self) -> None:
        """Candidates with the host's network: refused for a task that names hosts (it
        would get every host), else said."""
        why = self.sandbox.network().get("reason")
        if why is None or not self.sandbox.isolated:
            return
        hosts = self.task.candidate.hosts
        if hosts:
            raise _Abort(
                f"the task names the hosts its candidates may reach ({', '.join(hosts)}), "
                f"but this machine cannot give them a network namespace ({why}): they would "
                "reach every host. Run the runner with CAP_SYS_ADMIN (a privileged container)"
            )
        self.warnings.append(
            f"candidate code had the machine's network ({why}): it could reach the "
            "internet, the LAN and the other side's server"
        )

    def _reachable_root(self) -> None:
        """`{rsi_root}` where the candidate users can read it: this checkout when they
        can, else a copy of the runner's package in the work folder (a clone under a
        0700 home or in `mktemp -d`), recorded in `isolation.rsi_root`."""
        assert self.workdir is not None
        why = reach.why_unreachable(RUNNER_ROOT / "runners")
        if why is None:
            return
        copy = self.workdir / "rsi-root"
        reach.copy_package(RUNNER_ROOT / "runners", copy / "runners")
        copy.chmod(0o755)
        self.rsi_root, self.rsi_root_why = copy, why
        self.bundle.update(isolation=self._isolation())

    def _isolation(self) -> dict[str, Any]:
        """The manifest's `isolation`: the sandbox's, and where `{rsi_root}` was copied."""
        out = self.sandbox.describe()
        if self.rsi_root_why is not None:
            out["rsi_root"] = {"copied_to": str(self.rsi_root), "why": self.rsi_root_why}
        return out

    def _can_run_python(self, side: str) -> None:
        """The side's user must be able to start `{python}` (often under /root)."""
        argv = [self.o.python, "-c", "import json, sys"]
        with self._candidate(side, f"check-{side}") as group:
            cmd, env = self.sandbox.command(
                side, group, argv, self.sandbox.env(side, self.env_candidate)
            )
            try:
                r = subprocess.run(
                    cmd,
                    cwd="/",
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise _Abort(f"cannot start {self.o.python} as the {side} user: {exc}") from exc
        if r.returncode != 0:
            why = (r.stderr or r.stdout).strip().splitlines()
            raise _Abort(
                f"the {side} side's user {self.sandbox.accounts[side].name} cannot run "
                f"{self.o.python} ({why[-1] if why else f'exit code {r.returncode}'}): make "
                "the interpreter and its folders readable by it, or give --python"
            )

    def _place(self) -> None:
        """Disjoint cores for server and client, from the GPU's NUMA node if known."""
        if self.o.cpu_placement != "split":
            self.bundle.update(placement={"mode": "none"})
            return
        node = placement.gpu_numa_node(self.backend.indices()) if self.gpu != "cpu" else None
        near = placement.node_cpus(node) if node is not None else None
        self.placement = placement.plan(host.cpuset(), near, node)
        if self.placement is None:
            self.bundle.update(placement={"mode": "none", "reason": "fewer than two cores"})
            return
        self.bundle.update(placement=self.placement.describe())

    def _trusted_tree(self, co: gitwork.Checkout) -> None:
        """The benchmark client's tree, out of the head's reach; the manifest says which."""
        assert self.workdir is not None
        b = self.task.benchmark
        ref = self.o.benchmark_ref or gitwork.pinned_benchmark_ref(co) or b.trusted_ref
        path = self.workdir / "bench"
        try:
            sha = gitwork.trusted_tree(co, path, self.o.repo, ref)
            changed = gitwork.changed(co, list(b.scripts))
        except gitwork.GitError as exc:
            where = ref or "the base commit"
            raise _Abort(f"cannot check out the benchmark scripts ({where}): {exc}") from exc
        if self.sandbox.isolated:
            path.chmod(0o700)
        self.bench_tree = path
        self.bundle.update(
            benchmark_tree={
                "source": "base" if ref is None else "pinned",
                "ref": ref,
                "sha": sha,
                "scripts": list(b.scripts),
                "changed_by_head": changed,
            }
        )
        if changed:
            self.warnings.append(
                f"the head changes the benchmark scripts ({', '.join(changed[:5])}"
                f"{', …' if len(changed) > 5 else ''}); both sides were measured with the "
                f"trusted copy at {sha[:12]}"
            )

    def _cleanup(self, co: gitwork.Checkout | None) -> None:
        with suppress(Exception):
            self.backend.close()
        with suppress(Exception):
            self.sandbox.close()
        if self.o.keep_workdir or self.workdir is None:
            return
        shutil.rmtree(self.workdir / "scratch", ignore_errors=True)
        shutil.rmtree(self.workdir / "sandbox", ignore_errors=True)
        if co is not None:
            gitwork.remove(co)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _backend(self) -> Backend:
        if self.o.backend is not None:
            return self.o.backend
        if self.gpu == "cpu":
            return NoGpu()
        try:
            b = detect()
        except Exception as exc:
            self.warnings.append(f"the GPU could not be read: {exc}")
            return NoGpu()
        if b.name is None:
            self.warnings.append(
                "no GPU backend (no NVML, no nvidia-smi): nothing about the GPU was recorded"
            )
        if b.note:
            self.warnings.append(b.note)
        inherited = os.environ.get(devices.ORDER_VAR)
        if inherited not in (None, devices.ORDER):
            self.warnings.append(
                f"{devices.ORDER_VAR} was {inherited}; the runner sets {devices.ORDER} for "
                "the processes it starts, so CUDA numbers GPUs as NVML does"
            )
        return b

    def _skipped(self, p: schedule.Planned, reason: str) -> dict[str, Any]:
        rec: dict[str, Any] = dict(p.record())
        rec.update({"status": "skipped", "error": reason, "files": {}})
        return rec

    def _skip_rest(self, reason: str) -> None:
        done = {r["id"] for r in self.bundle.runs}
        for p in self.rounds.pending():
            if p.id not in done:
                self.bundle.add(self._skipped(p, reason))

    # ------------------------------------------------------------------ fingerprint, prepare

    def _fingerprint(self) -> None:
        envs: dict[str, dict[str, Any]] = {}
        checkout: dict[str, Any] = {}
        for side in ("base", "head"):
            # Read for each side, so a fact one side lacks shows as missing there.
            machine = fingerprint.machine(self.backend)
            vals = self.values(side, rnd=None)
            with self._candidate(side, f"probe-{side}") as group:
                fp = fingerprint.side(
                    self.o.python,
                    self.worktrees[side],
                    self.env(side, vals),
                    launch=functools.partial(self.sandbox.command, side, group),
                )
            env = dict(machine)
            env["python"] = fp["python"]
            env["packages"] = fp["packages"]
            envs[side] = env
            bad = fingerprint.outside(self.worktrees[side], fp["imports"])
            checkout[side] = {
                "worktree": str(self.worktrees[side]),
                "imports": fp["imports"],
            }
            if fp.get("error"):
                checkout[side]["fingerprint_error"] = fp["error"]
                self.warnings.append(f"the {side} side's Python could not be probed: {fp['error']}")
            for mod, where in bad.items():
                self.warnings.append(
                    f"the {side} side imports {mod} from {where}, not from its worktree: "
                    "it may not run its own code"
                )
        self.bundle.update(environment=envs, checkout=checkout)
        bench = self.bundle.header["benchmark"]
        shas = {}
        for side in ("base", "head"):
            d = self.dataset(side)
            if d:
                path = Path(d) if os.path.isabs(d) else self.worktrees[side] / d
                shas[side] = _sha256(path) if path.is_file() else None
        if shas:
            bench["dataset_sha256"] = shas.get("base")
            if shas.get("base") != shas.get("head"):
                bench["dataset_sha256_head"] = shas.get("head")
                self.warnings.append("base and head read different dataset files")

    @contextmanager
    def _candidate(self, side: str, label: str) -> Iterator[sandbox.Group | None]:
        """A cgroup for one candidate command; anything of the side's left is killed, and
        a process that escaped it stops the verification (`process-survived`)."""
        group = self.sandbox.group(label)
        try:
            yield group
        finally:
            survivors = self.sandbox.end(side, group)
        if survivors:
            self.bundle.update(survivors=survivors)
            raise _Abort(
                f"process-survived: {len(survivors)} process(es) of the {side} side's user "
                f"outlived {label} outside its cgroup and were killed"
            )

    def _prepare(self) -> None:
        record: dict[str, Any] = {}
        self.bundle.update(prepare=record)
        for side in ("base", "head"):
            log = self.bundle.out / "logs" / f"prepare-{side}.log"
            t0 = time.monotonic()
            entry: dict[str, Any] = {"status": "ok", "commands": len(self.task.prepare)}
            record[side] = entry
            if self.task.prepare:
                entry["log"] = self.bundle.rel(log)
            for tmpl in self.task.prepare:
                vals = self.values(side, rnd=None)
                argv = render_command(tmpl, vals)
                left = min(self.task.prepare_timeout_s, self.deadline - time.monotonic())
                try:
                    with self._candidate(side, f"prepare-{side}") as group:
                        cmd, env = self.sandbox.command(side, group, argv, self.env(side, vals))
                        fin = proc.run(
                            cmd,
                            self.worktrees[side],
                            env,
                            log,
                            timeout=max(left, 1.0),
                            header=f"$ {shlex.join(argv)}",
                        )
                except OSError as exc:
                    entry.update(status="failed", error=f"{shlex.join(argv)}: {exc}")
                    raise _Abort(f"prepare failed on {side}: {shlex.join(argv)}: {exc}") from exc
                if fin.timed_out or fin.returncode != 0:
                    why = (
                        f"timed out after {fin.wall_s:.0f}s"
                        if fin.timed_out
                        else proc.describe_exit(fin.returncode)
                    )
                    entry.update(
                        status="failed",
                        error=f"{shlex.join(argv)}: {why}",
                        log_tail=tail(log),
                        duration_s=round(time.monotonic() - t0, 3),
                    )
                    raise _Abort(f"prepare failed on {side}: {shlex.join(argv)}: {why}")
            entry["duration_s"] = round(time.monotonic() - t0, 3)

    # ------------------------------------------------------------------ one run

    def _left(self, run_deadline: float) -> float:
        return run_deadline - time.monotonic()

    def _limit(self, step_s: float, run_deadline: float) -> tuple[float, str]:
        """The time a step may take and, if it is cut, which limit cut it."""
        cands = [
            (step_s, "step"),
            (run_deadline - time.monotonic(), "run"),
            (self.deadline - time.monotonic(), "total"),
        ]
        t, which = min(cands, key=lambda c: c[0])
        return max(t, 0.0), which

    def fresh_scratch(self, label: str) -> Path:
        """An empty scratch folder for one run or server start. Isolated, the candidate's
        user may pass through it (not list it): `server/` is the candidate's, `bench/` the
        client's."""
        assert self.workdir is not None
        scratch = self.workdir / "scratch" / label
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        if self.sandbox.isolated:
            scratch.parent.chmod(0o711)
            scratch.chmod(0o711)
        return scratch

    def launch_server(
        self,
        side: str,
        p: schedule.Planned,
        label: str,
        scratch: Path,
        log: Path,
        device: str | None = None,
        cpus: frozenset[int] | None = None,
    ) -> Launched:
        """Start `side`'s server for `p` in a cgroup of its own named `label`, writing to
        `scratch/server` and `log`, pinned to the server's cores; `device`: the GPU it is
        given (CUDA_VISIBLE_DEVICES, an index in PCI bus order), else the runner's; `cpus`:
        its cores, else the servers' half of the placement. A server
        that cannot be started is a `start-failed` RunFailure, its cgroup already ended."""
        port = free_port()
        vals = self.values(
            side,
            p.round,
            port=port,
            mode=p.mode,
            concurrency=p.concurrency,
            requests=p.requests,
            out=str(scratch / "server"),
        )
        used, total = self._gpu_memory(device)
        vals.update(memory.values(self.task.server.memory, self.memory_share(), total, used))
        (scratch / "server").mkdir()
        self.sandbox.own(side, scratch / "server")
        env = self.env(side, vals)
        if device is not None:
            env[devices.VISIBLE_VAR] = device
        template, variant = self.choose_server(side)
        argv = render_command(template, vals)
        health = render(self.task.server.health, vals)
        group = self.sandbox.group(label)
        try:
            cmd, cmd_env = self.sandbox.command(side, group, argv, env)
            server = proc.Process(
                cmd, self.worktrees[side], cmd_env, log, header=f"$ {shlex.join(argv)}"
            )
        except OSError as exc:
            self.sandbox.end(side, group)
            raise RunFailure("start-failed", f"the server could not be started: {exc}") from exc
        placement.pin(server.pid, cpus or (self.placement.server if self.placement else None))
        return Launched(server, group, vals, argv, health, port, variant)

    def choose_server(self, side: str) -> tuple[str, dict[str, Any]]:
        """The server command for the side's worktree (the task's variants); a file the
        check will not read (a FIFO, a link, too big) fails the run, naming it."""
        try:
            return self.task.server.choose(Path(self.worktrees[side]))
        except HeadFileError as exc:
            raise RunFailure(
                "start-failed", f"the server's variant check refused a file of the {side}: {exc}"
            ) from exc

    def _wait_healthy(
        self, server: proc.Process, url: str, run_deadline: float, net: str | None = None
    ) -> float:
        limit, which = self._limit(self.task.server.startup_timeout_s, run_deadline)
        t_end = time.monotonic() + limit
        delay = 0.05
        while True:
            rc = server.poll()
            if rc is not None:
                raise RunFailure(
                    "start-failed",
                    f"the server exited before its health check passed ({proc.describe_exit(rc)})",
                )
            ask = functools.partial(healthy, url, min(5.0, max(0.5, t_end - time.monotonic())))
            if netns.run_in(net, ask):
                return server.elapsed()
            now = time.monotonic()
            if now >= t_end:
                kind = {"total": "total-time-limit", "run": "run-time-limit"}.get(
                    which, "start-timeout"
                )
                raise RunFailure(
                    kind,
                    f"the server did not pass its health check ({url}) within {limit:.0f}s",
                )
            time.sleep(min(delay, max(0.0, t_end - now)))
            delay = min(delay * 1.5, 1.0)

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
    ) -> proc.Finished:
        """Run a client command against the live server; RunFailure if it goes wrong.

        The server is watched while the client runs: if it dies, the client gets a few
        seconds to record its failed requests, then it is stopped and the run fails as
        a crash. A client past its time limit is stopped (a hung server, usually).
        """
        argv = render_command(template, vals)
        if net is not None:  # the server's own network namespace (runners/netns.py)
            argv = [sys.executable, "-I", "-S", str(NETNS), net, "--", *argv]
        limit, which = self._limit(step_timeout, run_deadline)
        assert self.bench_tree is not None
        try:
            c = proc.Process(argv, self.bench_tree, env, log, f"--- {what}\n$ {shlex.join(argv)}")
            placement.pin(c.pid, self.placement.client if self.placement else None)
        except OSError as exc:
            raise RunFailure(
                "client-failed", f"the {what} client could not be started: {exc}", "client"
            ) from exc
        t_end = time.monotonic() + limit
        server_died: float | None = None
        rc: int | None = None
        timed_out = False
        try:
            while True:
                try:
                    rc = c.popen.wait(timeout=0.25)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if server_died is None and server is not None and server.poll() is not None:
                    server_died = now
                if server_died is not None and now - server_died > 10.0:
                    break
                if now >= t_end:
                    timed_out = True
                    break
        finally:
            wall = c.elapsed()
            c.stop(grace=2.0)
        srv_rc = server.poll() if server is not None else None
        if srv_rc is not None:
            raise RunFailure(
                "crashed",
                f"the server exited during the {what} ({proc.describe_exit(srv_rc)})",
                last="server",
            )
        if timed_out:
            kind = {"total": "total-time-limit", "run": "run-time-limit"}.get(which, "hung")
            if which == "total":  # the budget ran out, not the server's time
                msg = (
                    f"the verification's total time limit was reached during the {what}; "
                    f"its client was stopped after {wall:.0f}s"
                )
            else:
                msg = (
                    f"the {what} client did not finish within {limit:.0f}s (the server may "
                    "hang) and was stopped"
                )
            raise RunFailure(kind, msg, last="server")
        if rc != 0:
            raise RunFailure(
                "client-failed", f"the {what} client failed ({proc.describe_exit(rc)})", "client"
            )
        return proc.Finished(rc, False, wall, c.started, c.started + wall)

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
    ) -> dict[str, Any]:
        """Warm-up passes until two in a row agree on throughput (steady), at most
        `warmup_max_passes`: a fixed count cannot know how long a server takes to settle.
        One still moving after them gets as many again, within `WARMUP_EXTRA_SHARE` of
        the verification's time; if it still moves, the audit names it with its rates."""
        b = self.task.benchmark
        rates: list[float] = []
        steady = False
        source = "runner"
        most = b.warmup_max_passes
        extra_until: float | None = None
        n = 0
        while not steady:
            if n >= most:
                if most <= 1 or n >= 2 * most:
                    break
                now = time.monotonic()
                if extra_until is None:
                    extra_until = now + WARMUP_EXTRA_SHARE * self.total_timeout
                if now >= extra_until:
                    break
            wvals = dict(vals, requests=p.warmup_requests, out=str(scratch / f"warmup{n}"))
            self.sandbox.private(scratch / f"warmup{n}")
            fin = self._client(
                "warm-up",
                b.modes[p.mode],
                wvals,
                cenv,
                client_log,
                server,
                b.timeout_s,
                run_deadline,
                net,
            )
            out = self._output(b.output, wvals)
            wall, source = wall_clock(out, fin.wall_s) if out else (fin.wall_s, "runner")
            rates.append(p.warmup_requests / wall if wall > 0 else 0.0)
            if len(rates) >= 2 and rates[-2] > 0:
                steady = abs(rates[-1] / rates[-2] - 1) * 100 <= b.warmup_steady_pct
            n += 1
        return {
            "passes": len(rates),
            "rates": [round(r, 4) for r in rates],
            "rate_source": source,
            "steady": steady if most > 1 else None,
            "steady_pct": b.warmup_steady_pct,
            "max_passes": most,
            "extended": max(0, len(rates) - most),  # passes past `max_passes`
        }

    def benchmark_output(self, vals: dict[str, object]) -> Path:
        """The benchmark client's speed file; a client that exited 0 without writing it
        failed the run (`no-output`)."""
        src = self._output(self.task.benchmark.output, vals)
        if src is None:
            raise RunFailure(
                "no-output",
                "the benchmark client exited 0 but wrote no "
                f"{render(self.task.benchmark.output, vals)}",
                last="client",
            )
        return src

    def _output(self, template: str, vals: dict[str, object]) -> Path | None:
        """An output file the client wrote (relative paths: in the trusted tree)."""
        p = Path(render(template, vals))
        if not p.is_absolute():
            assert self.bench_tree is not None
            p = self.bench_tree / p
        return p if p.is_file() else None

    def _log_tail(
        self, failure: RunFailure, server_log: Path, client_log: Path, info: dict[str, Any]
    ) -> str:
        parts: list[tuple[str, str]] = []
        s, c = tail(server_log, 30, 2500), tail(client_log, 30, 2500)
        if failure.last == "gpu":
            return json.dumps(info.get("gpu_wait") or {}, indent=None)[-2000:]
        order = [("server.log", s), ("client.log", c)]
        if failure.last == "server":
            order.reverse()
        parts = [(n, t) for n, t in order if t]
        return "\n".join(f"==> {n} <==\n{t}" for n, t in parts) or failure.message


class _Abort(Exception):
    """The verification cannot go on (checkout or prepare failed)."""


def _clock(seconds: float) -> str:
    m, sec = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{sec:02d}" if m >= 60 else f"{m}:{sec:02d}"


def _runner_commit() -> str | None:
    try:
        return gitwork.git("rev-parse", "HEAD", cwd=RUNNER_ROOT, timeout=10)
    except gitwork.GitError:
        return None
