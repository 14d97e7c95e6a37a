"""The sequential design: a server start for every run, rounds of base and head in ABBA
order per row (runners/schedule.py), a run's server stopped before the next starts.

The design sees the verification through `Study` (runners/study.py); its rounds are
paired and stopped by the runner's sequential test (runners/adaptive.py), as the
resident designs' bursts are.
"""

from __future__ import annotations

import shutil
import time
from contextlib import suppress
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


class Sequential:
    """Runs the plan one server start a run; `Verifier.run` calls `run()`."""

    def __init__(self, v: Study) -> None:
        self.v = v

    def run(self) -> str | None:
        """Every planned run in order, until the rounds are decided or time runs out;
        why the schedule stopped early, or None."""
        v = self.v
        stop_reason: str | None = None
        for p in v.rounds.runs(lambda: v.bundle.runs):
            v._check_signal()
            if stop_reason is None and time.monotonic() >= v.deadline:
                stop_reason = (
                    f"the verification's total time limit ({v.total_timeout:.0f}s) was reached"
                )
            if stop_reason is not None:
                v.bundle.add(v._skipped(p, stop_reason))
                continue
            rec = self.run_one(p)  # it adds its record to the bundle itself
            if rec["status"] == "failed":
                if rec.get("failure") == "total-time-limit":
                    stop_reason = (
                        f"the verification's total time limit ({v.total_timeout:.0f}s) was reached"
                    )
                elif v.on_failure == "stop":
                    stop_reason = (
                        f"the schedule stopped after run {p.id} failed (policy on_failure = stop)"
                    )
        return stop_reason

    def run_one(self, p: schedule.Planned) -> dict[str, Any]:
        """One run: wait for an idle GPU, start the server, warm it up, run the client
        (and the accuracy step when due), stop it, write the run's files and record;
        whatever goes wrong is a failed run with its reason and logs."""
        v = self.v
        side = p.side
        rdir = v.bundle.run_dir(p.id)
        ldir = v.bundle.log_dir(p.id)
        server_log, client_log = ldir / "server.log", ldir / "client.log"
        scratch = v.fresh_scratch(p.id)
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
        stage = "gpu-wait"
        bench_vals: dict[str, object] | None = None
        server: proc.Process | None = None
        monitor: Monitor | None = None
        stopped = False
        kept = False
        group: sandbox.Group | None = None

        def stop_server(grace: float) -> None:
            """Stop the server and the sampling (once), and note how it ended."""
            nonlocal stopped
            if stopped:
                return
            stopped = True
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
            survivors.extend(v.sandbox.end(side, group))
            if monitor is not None:
                monitor.stop()
                info.update(monitor.summary())

        failure: RunFailure | None = None
        interrupted: Interrupted | None = None
        bug: BaseException | None = None
        survivors: list[dict[str, Any]] = []
        try:
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

            stage = "start"
            monitor = Monitor(v.backend, v.o.sample_interval_s)
            launched = v.launch_server(side, p, p.id, scratch, server_log)
            server, group, vals, net = launched.process, launched.group, launched.vals, launched.net
            cenv = v.client_env(vals)
            info.update(
                {
                    "server_variant": launched.variant,
                    "port": launched.port,
                    "health": launched.health,
                    "command": launched.argv,
                    "network": v.sandbox.describe_net(group),
                }
            )
            monitor.start()
            health = launched.health
            info["startup_s"] = round(v._wait_healthy(server, health, run_deadline, net), 4)

            if p.warmup_requests > 0:
                stage = "warm-up"
                info["warmup"] = v._warm_up(
                    p, vals, scratch, cenv, client_log, server, run_deadline, net
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
                net,
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
                self._accuracy(rec, rdir, bvals, cenv, client_log, server, run_deadline, net)
            stage = "stop"
            rc = server.poll()
            if rc is not None:
                raise RunFailure(
                    "crashed", f"the server exited during the run ({proc.describe_exit(rc)})"
                )
            if p.accuracy and acc is not None and acc.after_server_stop:
                stop_server(v.task.server.stop_grace_s)
                if survivors:
                    raise RunFailure(
                        "process-survived",
                        f"{len(survivors)} process(es) of the {side} side's user outlived "
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
                stop_server(3.0 if interrupted is not None else v.task.server.stop_grace_s)
                # Everything the candidate started dies with its cgroup; a process of its
                # user still alive elsewhere escaped, and the run cannot be trusted.
                survivors.extend(v.sandbox.end(side, group))
                if survivors:
                    info["survivors"] = rec["survivors"] = survivors
                    if failure is None or failure.kind == "crashed":
                        failure = RunFailure(
                            "process-survived",
                            f"{len(survivors)} process(es) of the {side} side's user outlived "
                            "the run outside its cgroup and were killed",
                        )
                spath = rdir / "server.json"
                write_json_atomic(spath, info, indent=None)
                rec["files"]["server"] = v.bundle.rel(spath)
                rec["run_ended_at"] = iso()
                rec["run_s"] = round(time.monotonic() - run_t0, 3)
                rec["startup_s"] = info.get("startup_s")
                if failure is not None:
                    left = (
                        v._output(v.task.benchmark.output, bench_vals)
                        if bench_vals is not None
                        else None
                    )
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
