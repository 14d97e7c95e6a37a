"""`rsi-runner` / `python3 -m runners`: the runner's command line (standard library only).

    rsi-runner verify --repo URL_OR_PATH --base SHA --head-repo URL_OR_PATH --head SHA \\
        --task NAME_OR_TOML --gpu h100|h200|cpu --rounds N|auto \\
        --modes streaming,non-streaming --out DIR
    rsi-runner tasks          list the task files and check that each one loads
    rsi-runner fingerprint    print this machine's environment fingerprint
    rsi-runner sandbox        check (or --create the users for) candidate isolation
    rsi-runner check-bundle DIR   verify a bundle's files against its manifest's digests

Exit status of `verify`: 0 when the whole schedule ran (failed runs are data in the
bundle, not errors of the runner), 1 when it was cut short (`complete: false`), 2 for a
usage error (no bundle written), 128+N when stopped by signal N (a bundle is written).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from runners import __version__, memory, schedule
from runners import task as tasks
from runners.bundle import BundleError

if TYPE_CHECKING:
    from runners import sandbox


def _csv(value: str) -> list[str]:
    return [x.strip() for x in value.split(",") if x.strip()]


def _ints(value: str) -> list[int]:
    try:
        out = [int(x) for x in _csv(value)]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected integers like 1,16: {value!r}") from exc
    if not out or any(x < 1 for x in out):
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,16: {value!r}")
    return out


def _modes(value: str) -> list[str]:
    out = _csv(value)
    bad = [m for m in out if m not in schedule.MODE_TAGS]
    if not out or bad:
        raise argparse.ArgumentTypeError(
            f"modes are streaming and non-streaming (comma-separated), not {value!r}"
        )
    return list(dict.fromkeys(out))


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {value!r}") from exc
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {value!r}")
    return n


def _rounds(value: str) -> int | str:
    if value.strip().lower() == "auto":
        return "auto"
    try:
        return _positive_int(value)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer or auto, not {value!r}"
        ) from exc


def _positive(value: str) -> float:
    try:
        n = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number, not {value!r}") from exc
    if not 0 < n < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, not {value!r}")
    return n


def _seconds(value: str) -> float:
    try:
        n = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected seconds, not {value!r}") from exc
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {value!r}")
    return n


def _gpu(value: str) -> str:
    v = value.strip().lower()
    if not re.fullmatch(r"[a-z0-9-]+", v):
        raise argparse.ArgumentTypeError(f"expected h100, h200 or cpu, not {value!r}")
    return v


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rsi-runner",
        description="Measure base and head of one change on this machine and write a bundle.",
    )
    ap.add_argument("--version", action="version", version=f"rsi-runner {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    v = sub.add_parser(
        "verify",
        help="check out base and head, run the task's benchmark in balanced rounds, write a bundle",
        description="Check out base and head as git worktrees, prepare them, and run the "
        "task's server and benchmark in interleaved, order-balanced rounds (base, head, head, "
        "base, …) per mode and concurrency. Writes a bundle (manifest.json last).",
    )
    req = v.add_argument_group("required")
    req.add_argument("--repo", required=True, help="upstream repository: URL or local path")
    req.add_argument("--base", required=True, help="base commit (SHA, or a ref)")
    req.add_argument("--head", required=True, help="head commit (SHA, or a ref)")
    req.add_argument(
        "--task", required=True, help=f"task name ({', '.join(tasks.available())}) or a .toml"
    )
    req.add_argument("--gpu", required=True, type=_gpu, help="h100, h200 or cpu")
    req.add_argument(
        "--rounds",
        required=True,
        type=_rounds,
        help="rounds per side, or auto: pairs of rounds until each primary row is decided "
        "(docs/statistics.md, Adaptive rounds)",
    )
    req.add_argument(
        "--modes",
        required=True,
        type=_modes,
        help="comma-separated: streaming,non-streaming",
    )
    req.add_argument("--out", required=True, type=Path, help="new folder for the bundle")
    opt = v.add_argument_group("optional")
    opt.add_argument("--head-repo", help="repository of the head commit (default: --repo)")
    opt.add_argument("--verification-id", help="default: local-<UTC time>")
    opt.add_argument("--repo-name", help="owner/repo for the manifest (default: from --repo)")
    opt.add_argument("--head-repo-name", help="owner/repo of the head (default: from --head-repo)")
    opt.add_argument("--base-ref", help="branch name of the base, for the manifest")
    opt.add_argument("--head-ref", help="branch name of the head, for the manifest")
    opt.add_argument(
        "--concurrencies", type=_ints, help="comma-separated, e.g. 1,16 (default: the task's)"
    )
    opt.add_argument("--requests", type=_positive_int, help="measured requests a run")
    opt.add_argument(
        "--warmup-requests", type=int, help="warm-up requests before each measured run"
    )
    opt.add_argument("--workdir", type=Path, help="where the clone and worktrees go (kept)")
    opt.add_argument("--keep-workdir", action="store_true", help="keep worktrees afterwards")
    opt.add_argument("--run-timeout", type=_seconds, help="seconds per run (task's default)")
    opt.add_argument("--total-timeout", type=_seconds, help="seconds in all (task's default)")
    opt.add_argument("--gpu-idle-timeout", type=_seconds, help="seconds to wait for an idle GPU")
    opt.add_argument(
        "--on-failure", choices=("continue", "stop"), help="override the task's policy"
    )
    opt.add_argument("--python", help="interpreter for {python} (default: this one)")
    opt.add_argument(
        "--sample-interval", type=_seconds, default=1.0, help="GPU/CPU sampling period (s)"
    )
    opt.add_argument(
        "--prelaunch-window",
        type=float,
        default=1.0,
        help="seconds of CPU load measured before each launch (0: none)",
    )
    opt.add_argument(
        "--max-rounds",
        type=_positive_int,
        default=10,
        help="with --rounds auto: the most rounds a side, per mode and concurrency (10)",
    )
    opt.add_argument(
        "--gpu-minutes",
        type=_positive,
        help="with --rounds auto: GPU minutes to spend at most, both sides (default: no limit)",
    )
    opt.add_argument(
        "--threshold-pct",
        type=_positive,
        default=3.0,
        help="with --rounds auto: the practical threshold, percent (3)",
    )
    opt.add_argument(
        "--design",
        choices=("auto", "sequential", "alternate", "crossover"),
        default="auto",
        help="auto (default): the task's [benchmark] design; sequential: a server start per "
        "run; alternate: both servers resident on one GPU, the idle one frozen, bursts of "
        "--requests alternating (runners/resident.py); crossover: base and head resident on "
        "each of two GPUs, a pair is two simultaneous bursts, GPUs swapped every pair "
        "(runners/crossover.py)",
    )
    opt.add_argument(
        "--control",
        choices=("none", "aa"),
        default="none",
        help="aa: a null control (the base code again, in the head's place) paired with the "
        "base beside every real pair; needs the alternate design",
    )
    opt.add_argument(
        "--burst-sizing",
        choices=("auto", "off"),
        default="auto",
        help="auto (default): with --design alternate and --rounds auto, the bursts after the "
        "first three pairs take the length that narrows the interval fastest (runners/"
        "bursts.py); off: every burst is --requests",
    )
    opt.add_argument("--runner-name", help="default: $RUNNER_NAME or the host name")
    opt.add_argument("--runner-labels", type=_csv, help="comma-separated runner labels")
    iso = v.add_argument_group("isolation (runners/README.md, The runner machine)")
    iso.add_argument(
        "--isolation",
        choices=("cgroup", "none"),
        default="cgroup",
        help="cgroup (default): each side as its own user, each run in its own cgroup; "
        "none: candidates run as this user, and the evidence says so as an error",
    )
    iso.add_argument(
        "--candidate-users",
        type=_users,
        help="the sides' users (default: base=rsi-base,head=rsi-head)",
    )
    opt.add_argument(
        "--cpu-placement",
        choices=("split", "none"),
        default="split",
        help="split (default): server and client on disjoint halves of the job's cores, "
        "near the GPU; none: wherever the scheduler puts them",
    )
    iso.add_argument(
        "--benchmark-ref",
        help="ref of --repo the benchmark client runs from (default: the task's "
        "trusted_ref, else the base commit)",
    )

    sub.add_parser("tasks", help="list the task files and check that each one loads")
    sub.add_parser("fingerprint", help="print this machine's environment fingerprint (JSON)")
    sb = sub.add_parser("sandbox", help="check that this machine can isolate candidate code")
    sb.add_argument(
        "--create-users", action="store_true", help="create the candidate users first (root)"
    )
    sb.add_argument("--candidate-users", type=_users, help="default: base=rsi-base,head=rsi-head")
    sb.add_argument("--python", help="the interpreter verify will be given (default: this one)")
    sb.add_argument(
        "--workdir", type=Path, help="the work folder `verify --workdir` will use (default: TMPDIR)"
    )
    cb = sub.add_parser("check-bundle", help="verify a bundle's files against its digests")
    cb.add_argument("dir", type=Path)
    return ap


def _users(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in _csv(value):
        side, sep, name = part.partition("=")
        if not sep or side not in ("base", "head") or not re.fullmatch(r"[a-z_][a-z0-9_-]*", name):
            raise argparse.ArgumentTypeError(f"expected base=USER,head=USER: {value!r}")
        out[side] = name
    if set(out) != {"base", "head"}:
        raise argparse.ArgumentTypeError(f"name both sides' users: {value!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "tasks":
        return _tasks()
    if args.command == "sandbox":
        return _sandbox(args)
    if args.command == "check-bundle":
        from runners.bundle import check

        problems = check(args.dir)
        for p in problems:
            print(f"rsi-runner: {args.dir}: {p}", file=sys.stderr)
        if not problems:
            print(f"{args.dir}: every file matches the manifest's digests")
        return 1 if problems else 0
    if args.command == "fingerprint":
        from runners import fingerprint, gpu

        b = gpu.detect()
        try:
            print(json.dumps(fingerprint.machine(b), indent=2))
        finally:
            b.close()
        return 0
    return _verify(args)


def _sandbox(args: argparse.Namespace) -> int:
    import subprocess
    import tempfile

    from runners import sandbox

    users = args.candidate_users or sandbox.DEFAULT_USERS
    if args.create_users:
        import pwd

        for name in users.values():
            try:
                pwd.getpwnam(name)
            except KeyError:
                cmd = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
                r = subprocess.run([*cmd, name], capture_output=True, text=True, check=False)
                if r.returncode != 0:
                    print(f"rsi-runner: useradd {name}: {r.stderr.strip()}", file=sys.stderr)
                    return 1
                print(f"created user {name}")
    with tempfile.TemporaryDirectory(prefix="rsi-sandbox-") as d:
        try:
            sb = sandbox.Sandbox.open("cgroup", Path(d) / "sandbox", users)
        except sandbox.SandboxError as exc:
            print(f"rsi-runner: {exc}", file=sys.stderr)
            print("NOT READY: the sandbox cannot be opened here (see above)", file=sys.stderr)
            return 1
        try:
            print(json.dumps(sb.describe(), indent=2))
            fixes = _reach_fixes(sb, args.python or sys.executable, args.workdir)
        finally:
            sb.close()
    for fix in fixes:
        print(f"rsi-runner: {fix}", file=sys.stderr)
    if fixes:
        print(f"NOT READY: {len(fixes)} thing(s) to fix first (above)", file=sys.stderr)
        return 1
    print("READY: this machine can run candidates in the sandbox", file=sys.stderr)
    return 0


def _reach_fixes(sb: sandbox.Sandbox, python: str, workdir: Path | None) -> list[str]:
    """What the candidate users cannot reach that `verify` needs, each with its fix:
    the interpreter (run as each user) and the work folder. The runner's own scripts
    need nothing: `verify` copies them into the work folder when they are out of reach."""
    import os
    import subprocess
    import tempfile

    from runners import reach

    fixes = []
    for side, account in sb.accounts.items():
        group = sb.group(f"check-{side}")
        try:
            cmd, env = sb.command(side, group, [python, "-c", "import json"], {"PATH": os.defpath})
            r = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, check=False)
        finally:
            sb.end(side, group)
        if r.returncode != 0:
            why = (r.stderr or r.stdout).strip().splitlines() or [f"exit code {r.returncode}"]
            stop = reach.blocked(Path(python).absolute().parent) or reach.blocked(Path(python))
            where = f" ({stop} is not searchable by others)" if stop else ""
            fixes.append(
                f"the {side} side's user {account.name} cannot run {python}{where}: {why[-1]}; "
                "give verify --python an interpreter outside a private folder "
                "(e.g. /usr/bin/python3), or chmod o+x the folders on its way"
            )
    folder = workdir or Path(tempfile.gettempdir())
    stop = reach.blocked(folder)
    if stop is not None:
        fixes.append(
            f"the candidate users cannot reach the work folder {folder}: {stop} is not "
            "searchable by others (chmod o+x it, or give verify --workdir another folder)"
        )
    return fixes


def _tasks() -> int:
    bad = 0
    for name in tasks.available():
        try:
            t = tasks.load(name)
        except tasks.TaskError as exc:
            print(f"{name}: ERROR {exc}")
            bad += 1
            continue
        print(f"{name}: {t.model} — modes {', '.join(t.benchmark.modes)}")
        share = memory.RESIDENT if t.benchmark.design == "alternate" else memory.SEQUENTIAL
        line = memory.summary(t.server.commands(), t.server.memory, share)
        print(f"    design {t.benchmark.design}; {line}")
    return 1 if bad else 0


def _verify(args: argparse.Namespace) -> int:
    from runners.verify import Options, Verifier

    try:
        task = tasks.load(args.task)
    except tasks.TaskError as exc:
        print(f"rsi-runner: {exc}", file=sys.stderr)
        return 2
    missing = [m for m in args.modes if m not in task.benchmark.modes]
    if missing:
        print(
            f"rsi-runner: task {task.name} has no {', '.join(missing)} mode "
            f"(it has {', '.join(task.benchmark.modes)})",
            file=sys.stderr,
        )
        return 2
    auto = args.rounds == "auto"
    if auto and args.max_rounds < 2:
        print("rsi-runner: --rounds auto needs --max-rounds of at least 2", file=sys.stderr)
        return 2
    design = task.benchmark.design if args.design == "auto" else args.design
    if args.design == "auto" and args.control != "none":
        design = "alternate"  # the control is asked for and needs it (falls back if no fit)
    if args.control != "none" and design != "alternate":
        print(
            f"rsi-runner: --control {args.control} needs the alternate design "
            f"(this verification's is {design}: pass --design alternate)",
            file=sys.stderr,
        )
        return 2
    vid = args.verification_id or time.strftime("local-%Y%m%dT%H%M%SZ", time.gmtime())
    opts = Options(
        repo=args.repo,
        base=args.base,
        head_repo=args.head_repo or args.repo,
        head=args.head,
        task=task,
        gpu=args.gpu,
        rounds=args.max_rounds if auto else args.rounds,
        adaptive=auto,
        threshold_pct=args.threshold_pct,
        gpu_minutes=args.gpu_minutes,
        modes=args.modes,
        out=args.out,
        verification_id=vid,
        repo_name=args.repo_name,
        head_repo_name=args.head_repo_name,
        base_ref=args.base_ref,
        head_ref=args.head_ref,
        concurrencies=args.concurrencies,
        requests=args.requests,
        warmup_requests=args.warmup_requests,
        workdir=args.workdir,
        keep_workdir=args.keep_workdir,
        run_timeout_s=args.run_timeout,
        total_timeout_s=args.total_timeout,
        gpu_idle_timeout_s=args.gpu_idle_timeout,
        on_failure=args.on_failure,
        sample_interval_s=args.sample_interval,
        prelaunch_s=max(0.0, args.prelaunch_window),
        runner_name=args.runner_name,
        runner_labels=args.runner_labels,
        isolation=args.isolation,
        candidate_users=args.candidate_users,
        benchmark_ref=args.benchmark_ref,
        cpu_placement=args.cpu_placement,
        design=design,
        design_source="option"
        if args.design != "auto"
        else ("control" if args.control != "none" else "task"),
        control=args.control,
        burst_sizing=args.burst_sizing == "auto",
    )
    if args.python:
        opts.python = args.python
    try:
        return Verifier(opts).run()
    except BundleError as exc:
        print(f"rsi-runner: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
