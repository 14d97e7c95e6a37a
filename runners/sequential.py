"""The sequential design: rounds of base and head in ABBA order (runners/schedule.py), a
server started for each side and round and stopped before the other side's starts. A
server whose command, health URL and environment do not change with the row (mode,
concurrency, requests) serves every row of its round, one start for all; otherwise each
run starts its own.

The design sees the verification through `Study` (runners/study.py); its rounds are
paired and stopped by the runner's sequential test (runners/adaptive.py), as the
resident designs' bursts are.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runners import host, outputs, proc, schedule
from runners.failures import Interrupted, RunFailure, RunnerBug
from runners.gpu import Monitor, wait_idle
from runners.serving import wall_clock
from runners.task import render
from runners.util import iso, write_json_atomic

if TYPE_CHECKING:
    from runners import sandbox
    from runners.study import Study


ROW_PLACEHOLDERS = ("{mode}", "{concurrency}", "{requests}")


def shares_rows(v: Study) -> bool:
    """Whether one server start can serve every row of a round: its command, health URL
    and environment do not change with the row (`{round}` and `{side}` are one block's)."""
    s = v.task.server
    acc = v.task.accuracy
    if acc is not None and acc.after_server_stop:
        return False  # each run's accuracy step needs its own server stopped
    texts = [s.command, s.health, *s.env.values()]
    return not any(p in t for t in texts for p in ROW_PLACEHOLDERS)


@dataclass
class _Started:
    """The server a block of runs shares, and how its end was recorded."""

    process: proc.Process | None = None
    group: sandbox.Group | None = None
    monitor: Monitor | None = None
    vals: dict[str, object] = field(default_factory=dict)
    net: str | None = None
    shared: dict[str, Any] = field(default_factory=dict)  # what each later run's info repeats
    stopped: bool = False
    ended: RunFailure | None = None  # why the server can serve no further run
    survivors: list[dict[str, Any]] = field(default_factory=list)


class Sequential:
    """Runs the plan, one server start a run or, where every row can share it, one a side
    and round (`shares_rows`); `Verifier.run` calls `run()`."""

    def __init__(self, v: Study) -> None:
        self.v = v

    def blocks(self) -> Iterator[list[schedule.Planned]]:
        v = self.v
        if shares_rows(v):
            yield from v.rounds.blocks(lambda: v.bundle.runs)
        else:
            for p in v.rounds.runs(lambda: v.bundle.runs):
                yield [p]

    def run(self) -> str | None:
        """Every planned run in order, until the rounds are decided or time runs out;
        why the schedule stopped early, or None."""
        v = self.v
        stop_reason: str | None = None
        limit = f"the verification's total time limit ({v.total_timeout:.0f}s) was reached"
        for block in self.blocks():
            v._check_signal()
            if stop_reason is None and time.monotonic() >= v.deadline:
                stop_reason = limit
            if stop_reason is not None:
                for p in block:
                    v.bundle.add(v._skipped(p, stop_reason))
                continue
            for p, rec in zip(block, self.run_block(block), strict=True):
                if rec["status"] != "failed" or stop_reason is not None:
                    continue
                if rec.get("failure") == "total-time-limit":
                    stop_reason = limit
                elif v.on_failure == "stop":
                    stop_reason = (
                        f"the schedule stopped after run {p.id} failed (policy on_failure = stop)"
                    )
        return stop_reason

    def run_one(self, p: schedule.Planned) -> dict[str, Any]:
        """One run with a server of its own."""
        return self.run_block([p])[0]

    def run_block(self, ps: list[schedule.Planned]) -> list[dict[str, Any]]:
        """Runs of one side and round on one server start: wait for an idle GPU, start the
        server, then for each run warm it up and run the client (and the accuracy step
        when due), and stop it after the last; each run's files and record are written
        as it ends. Whatever goes wrong is a failed run with its reason and logs; a server
        that died fails the block's remaining runs, naming the run it died in."""
        v = self.v
        first = ps[0]
        server_log = v.bundle.log_dir(first.id) / "server.log"
        scratch = v.fresh_scratch(first.id)  # the server's `server/`, the first run's `bench/`
        st = _Started()
        recs: list[dict[str, Any]] = []
        try:
            for i, p in enumerate(ps):
                recs.append(self._run(p, i == len(ps) - 1, st, scratch, server_log))
        finally:
            if not st.stopped:  # something between its runs raised: the server goes too
                with v._shielded():
                    st.stopped = True
                    if st.process is not None:
                        st.process.stop(3.0)
                    v.sandbox.end(first.side, st.group)
                    if st.monitor is not None:
                        st.monitor.stop()
            shutil.rmtree(scratch, ignore_errors=True)
        return recs

    def _run(
        self,
        p: schedule.Planned,
        last: bool,
        st: _Started,
        server_scratch: Path,
        server_log: Path,
    ) -> dict[str, Any]:
        v = self.v
        side = p.side
        first = st.process is None and not st.stopped
        rdir = v.bundle.run_dir(p.id)
        ldir = v.bundle.log_dir(p.id)
        client_log = ldir / "client.log"
        scratch = server_scratch if first else v.fresh_scratch(p.id)
        rec: dict[str, Any] = dict(p.record())
        rec.update(
            {
                "status": "ok",
                "run_started_at": iso(),
                "accuracy": p.accuracy,
                "files": {},
                "logs": {
                    "server": v.bundle.rel(server_log),
                    "client": v.bundle.rel(client_log),
                },
            }
        )
        info: dict[str, Any] = {
            "startup_s": None,
            "peak_vram_mib": None,
            "gpu_samples": [],
            "cpuset_busy_prelaunch": None,
            "foreign_peak_cores": None,
            "host_cpu_ms": None,
            "gpu_backend": v.backend.name,
            "cpuset": host.cpuset_spec(host.cpuset()),
        }
        run_t0 = time.monotonic()
        run_deadline = run_t0 + v.run_timeout
        stage = "gpu-wait" if first else "warm-up"
        bench_vals: dict[str, object] | None = None
        kept = False

        def stop_server(grace: float) -> None:
            """Stop the server and the sampling (once), and note how it ended."""
            if st.stopped:
                return
            st.stopped = True
            server = st.process
            if server is not None:
                was_running = server.poll() is None
                rc = server.stop(grace)
                info["server_exit"] = {
                    "returncode": rc,
                    "how": server.stopped_how,
                    "running_at_stop": was_running,
                }
            # Nothing the candidate started may outlive its server: a daemon that left
            # the process group would otherwise answer what runs next on its port.
            st.survivors.extend(v.sandbox.end(side, st.group))
            end_sampling()

        def end_sampling() -> None:
            if st.monitor is not None:
                st.monitor.stop()
                info.update(st.monitor.summary())
                st.monitor = None

        failure: RunFailure | None = None
        interrupted: Interrupted | None = None
        bug: BaseException | None = None
        try:
            if st.ended is not None:
                raise RunFailure(
                    st.ended.kind,
                    f"not run: the server it shared ended before it ({st.ended.message})",
                    last=st.ended.last,
                )
            if first:
                self._start(p, st, info, rec, scratch, server_log, run_deadline)
            else:
                st.monitor = Monitor(v.backend, v.o.sample_interval_s)
                st.monitor.start()
                info.update(st.shared)
            server = st.process
            assert server is not None
            vals = dict(st.vals, mode=p.mode, concurrency=p.concurrency, requests=p.requests)
            cenv = v.client_env(vals)
            if p.warmup_requests > 0:
                stage = "warm-up"
                info["warmup"] = v._warm_up(
                    p, vals, scratch, cenv, client_log, server, run_deadline, st.net
                )

            stage = "benchmark"
            bvals = bench_vals = dict(vals, out=str(scratch / "bench"))
            v.sandbox.private(scratch / "bench")
            fin = v._client(
                "benchmark",
                v.task.benchmark.modes[p.mode],
                bvals,
                cenv,
                client_log,
                server,
                v.task.benchmark.timeout_s,
                run_deadline,
                st.net,
            )
            rec["started_at"] = iso(fin.started)
            rec["ended_at"] = iso(fin.ended)
            rec["runner_wall_s"] = round(fin.wall_s, 4)
            src = v.benchmark_output(bvals)
            dest = rdir / src.name  # the client's file, byte for byte, under its own name
            shutil.copyfile(src, dest)
            rec["files"]["speed"] = v.bundle.rel(dest)
            extra, missing = outputs.keep(v.task.benchmark, bvals, rdir, v.bundle.rel)
            rec["files"].update(extra)
            kept = True
            if missing:
                raise RunFailure(
                    "no-output",
                    f"the benchmark client exited 0 but wrote no {', '.join(missing)}",
                    last="client",
                )
            wall, wsrc = wall_clock(dest, fin.wall_s)
            rec["wall_clock_s"] = wall
            rec["wall_clock_source"] = wsrc

            acc = v.task.accuracy
            if p.accuracy and acc is not None and not acc.after_server_stop:
                stage = "accuracy"
                self._accuracy(rec, rdir, bvals, cenv, client_log, server, run_deadline, st.net)
            stage = "stop"
            rc = server.poll()
            if rc is not None:
                raise RunFailure(
                    "crashed", f"the server exited during the run ({proc.describe_exit(rc)})"
                )
            if p.accuracy and acc is not None and acc.after_server_stop:
                stop_server(v.task.server.stop_grace_s)
                if st.survivors:
                    raise RunFailure(
                        "process-survived",
                        f"{len(st.survivors)} process(es) of the {side} side's user outlived "
                        "the server outside its cgroup and were killed",
                    )
                stage = "accuracy"
                self._accuracy(rec, rdir, bvals, cenv, client_log, None, run_deadline)
        except RunFailure as exc:
            failure = exc
        except Interrupted as exc:
            interrupted = exc
            failure = RunFailure("interrupted", f"interrupted by {exc.name} during {stage}")
        except Exception as exc:
            bug = exc
            failure = RunFailure("runner-error", f"runner error during {stage}: {exc!r}")
        finally:
            with v._shielded():
                alive = st.process is not None and st.process.poll() is None
                never_healthy = first and info.get("startup_s") is None
                if (
                    failure is not None
                    and st.ended is None
                    and (
                        not alive
                        or never_healthy
                        or interrupted is not None
                        or bug is not None
                        or failure.kind in ("total-time-limit", "run-time-limit")
                    )
                ):
                    st.ended = failure  # the block's later runs cannot use this server
                if last or st.ended is not None:
                    stop_server(3.0 if interrupted is not None else v.task.server.stop_grace_s)
                    # Everything the candidate started dies with its cgroup; a process of its
                    # user still alive elsewhere escaped, and the run cannot be trusted.
                    st.survivors.extend(v.sandbox.end(side, st.group))
                    if st.survivors:
                        info["survivors"] = rec["survivors"] = list(st.survivors)
                        if failure is None or failure.kind == "crashed":
                            failure = RunFailure(
                                "process-survived",
                                f"{len(st.survivors)} process(es) of the {side} side's user "
                                "outlived the run outside its cgroup and were killed",
                            )
                        st.survivors.clear()
                else:
                    end_sampling()
                self._record(p, rec, info, failure, rdir, server_log, client_log, bench_vals, kept)
                rec["run_s"] = round(time.monotonic() - run_t0, 3)
                if scratch != server_scratch:
                    shutil.rmtree(scratch, ignore_errors=True)
                rec["logs"] = {k: f for k, f in rec["logs"].items() if (v.bundle.out / f).is_file()}
                _rmdir_if_empty(ldir)
                # Recorded here, shielded: a signal cannot fall between the run's end and
                # its record, so a finished run is never reported as skipped.
                v.bundle.add(rec)
        if interrupted is not None:
            interrupted.record = rec
            raise interrupted
        if bug is not None:
            raise RunnerBug(rec, bug)
        return rec

    def _start(
        self,
        p: schedule.Planned,
        st: _Started,
        info: dict[str, Any],
        rec: dict[str, Any],
        scratch: Path,
        server_log: Path,
        run_deadline: float,
    ) -> None:
        """Wait for an idle GPU, then start the block's server and wait until healthy; the
        facts of the start go in the first run's `info` (the later runs repeat the
        server's, not its start-up)."""
        v = self.v
        limit, which = v._limit(v.gpu_idle_timeout, run_deadline)
        cpu = host.CpuLoad()  # foreign CPU load is measured over the idle wait too
        wait = wait_idle(v.backend, limit)
        info["gpu_wait"] = wait.as_dict()
        rec["gpu_wait_s"] = round(wait.waited_s, 3)
        if not wait.idle:
            kind = {"total": "total-time-limit", "run": "run-time-limit"}.get(which, "gpu-busy")
            raise RunFailure(
                kind,
                f"the GPU stayed busy for {wait.waited_s:.0f}s "
                f"({wait.foreign.get('reason')}); the run was not started",
                last="gpu",
            )
        pre = None
        if v.o.prelaunch_s > 0 and cpu.available:
            time.sleep(max(0.0, v.o.prelaunch_s - wait.waited_s))
            pre = cpu.window()
        info["cpuset_busy_prelaunch"] = round(pre, 4) if pre is not None else None
        info["host_cpu_ms"] = host.loop_ms(min(v.placement.server) if v.placement else None)

        st.monitor = Monitor(v.backend, v.o.sample_interval_s)
        launched = v.launch_server(p.side, p, p.id, scratch, server_log)
        st.process, st.group, st.vals, st.net = (
            launched.process,
            launched.group,
            launched.vals,
            launched.net,
        )
        info.update(
            {
                "server_variant": launched.variant,
                "port": launched.port,
                "health": launched.health,
                "command": launched.argv,
                "network": v.sandbox.describe_net(launched.group),
            }
        )
        st.shared = {k: info[k] for k in ("server_variant", "port", "health", "command", "network")}
        st.shared["server_started_in"] = p.id
        st.monitor.start()
        info["startup_s"] = round(
            v._wait_healthy(launched.process, launched.health, run_deadline, launched.net), 4
        )

    def _record(
        self,
        p: schedule.Planned,
        rec: dict[str, Any],
        info: dict[str, Any],
        failure: RunFailure | None,
        rdir: Path,
        server_log: Path,
        client_log: Path,
        bench_vals: dict[str, object] | None,
        kept: bool,
    ) -> None:
        """The run's server.json, its end, and on a failure its reason, log tail and what
        the client wrote before it failed."""
        v = self.v
        spath = rdir / "server.json"
        write_json_atomic(spath, info, indent=None)
        rec["files"]["server"] = v.bundle.rel(spath)
        rec["run_ended_at"] = iso()
        rec["startup_s"] = info.get("startup_s")
        if failure is None:
            return
        left = v._output(v.task.benchmark.output, bench_vals) if bench_vals is not None else None
        if "speed" not in rec["files"] and left is not None:
            # what the client recorded before the run failed, for diagnosis
            shutil.copyfile(left, rdir / left.name)
            rec["files"]["speed"] = v.bundle.rel(rdir / left.name)
        if bench_vals is not None and not kept:
            # and its other files, if it wrote any
            extra, _ = outputs.keep(v.task.benchmark, bench_vals, rdir, v.bundle.rel)
            rec["files"].update({k: f for k, f in extra.items() if f})
        rec["status"] = "failed"
        rec["failure"] = failure.kind
        rec["error"] = failure.message
        rec["log_tail"] = v._log_tail(failure, server_log, client_log, info)
        rec.setdefault("started_at", rec["run_started_at"])
        rec.setdefault("ended_at", rec["run_ended_at"])
        rec.setdefault("wall_clock_s", None)

    def _accuracy(
        self,
        rec: dict[str, Any],
        rdir: Path,
        vals: dict[str, object],
        env: dict[str, str],
        log: Path,
        server: proc.Process | None,
        run_deadline: float,
        net: str | None = None,
    ) -> None:
        """The task's accuracy command, in the measured run's {out} (it may read the
        audio the benchmark saved there), in the server's network namespace while it runs;
        its output becomes the run's wer_results.json."""
        v = self.v
        acc = v.task.accuracy
        assert acc is not None
        v._client(
            "accuracy",
            acc.command,
            vals,
            env,
            log,
            server,
            acc.timeout_s or v.task.benchmark.timeout_s,
            run_deadline,
            net,
        )
        src = v._output(acc.output, vals)
        if src is None:
            raise RunFailure(
                "no-output",
                f"the accuracy command exited 0 but wrote no {render(acc.output, vals)}",
                last="client",
            )
        dest = rdir / src.name
        if rec["files"].get("speed") == v.bundle.rel(dest):
            dest = rdir / f"accuracy-{src.name}"
        shutil.copyfile(src, dest)
        rec["files"]["wer"] = v.bundle.rel(dest)


def _rmdir_if_empty(d: Path) -> None:
    with suppress(OSError):
        d.rmdir()
