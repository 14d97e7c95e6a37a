"""Task files (`runners/tasks/<name>.toml`): how to serve and benchmark one model.

A task says how to prepare a worktree, start the server, check its health, run the
upstream's own benchmark client per mode, optionally its accuracy (WER) script, and what
to do when something fails. Every key is checked when the file is read, so a typo or an
unknown placeholder fails before any GPU time is spent, with the file and key named.

Commands are split with `shlex.split` first and the placeholders filled in afterwards,
so a value with spaces stays one argument; they run without a shell: prepare steps and
the server in the side's worktree, the benchmark client and the accuracy step in the
trusted tree (`{bench}`: the base commit's copy, or `benchmark.trusted_ref`). A command
that starts with `sh -c` gets its script's placeholders shell-quoted. Write `{{` and
`}}` for literal braces (a shell's `${VAR}` is `${{VAR}}`).
"""

from __future__ import annotations

import hashlib
import math
import os
import shlex
import stat
import string
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runners import _toml, memory, netns, proc

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
RUNNER_ROOT = Path(__file__).resolve().parent.parent

# Placeholders and where they may be used.
RUN_PLACEHOLDERS = frozenset(
    {
        "python",
        "port",
        "worktree",
        "model",
        "out",
        "requests",
        "concurrency",
        "warmup",
        "dataset",
        "gpu",
        "side",
        "round",
        "mode",
        "rsi_root",
        "bench",
        "memory_fraction",
    }
)
PREPARE_PLACEHOLDERS = frozenset(
    {"python", "worktree", "model", "dataset", "gpu", "side", "rsi_root"}
)
DATASET_PLACEHOLDERS = PREPARE_PLACEHOLDERS - {"dataset"}
MODES = ("streaming", "non-streaming")
DESIGNS = ("sequential", "alternate")


class TaskError(ValueError):
    """A task file that cannot be used; the message names the file and the key."""


class HeadFileError(ValueError):
    """A file of a candidate's worktree that the runner will not read (not a regular
    file, a symbolic link on the way, or too big)."""


HEAD_FILE_CAP = 1 << 20  # bytes of a worktree file a variant check reads at most


def head_file(tree: Path, rel: str, read: bool = True) -> bytes | None:
    """`rel` under `tree`, read without following a link and without blocking: its bytes
    (or b"" when not `read`), None when it does not exist; HeadFileError for a symlink,
    a FIFO, a device, a folder, or more than HEAD_FILE_CAP bytes."""
    parts = [x for x in Path(rel).parts if x not in ("", ".")]
    if not parts or ".." in parts or Path(rel).is_absolute():
        raise HeadFileError(f"{rel}: not a path inside the worktree")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fds: list[int] = []
    try:
        try:
            fds.append(os.open(tree, flags | os.O_DIRECTORY))
            for part in parts[:-1]:
                fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
            st = os.stat(parts[-1], dir_fd=fds[-1], follow_symlinks=False)
        except FileNotFoundError:
            return None
        except (NotADirectoryError, OSError) as exc:  # ELOOP: a link on the way
            raise HeadFileError(f"{rel}: {exc.strerror or exc}") from exc
        if not stat.S_ISREG(st.st_mode):
            raise HeadFileError(f"{rel}: not a regular file")
        if not read:
            return b""
        if st.st_size > HEAD_FILE_CAP:
            raise HeadFileError(f"{rel}: {st.st_size} bytes, more than {HEAD_FILE_CAP}")
        fd = os.open(parts[-1], flags, dir_fd=fds[-1])
        fds.append(fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the stat
            raise HeadFileError(f"{rel}: not a regular file")
        chunks: list[bytes] = []
        left = HEAD_FILE_CAP
        while left > 0 and (chunk := os.read(fd, left)):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        for fd in fds:
            os.close(fd)


@dataclass(frozen=True)
class Variant:
    """A server command for trees that have a file (`when_exists`) or a file holding a
    text (`when_contains`, e.g. a config-schema key): an old base and a new head can
    both start. Paths are relative to the side's worktree."""

    command: str
    when_exists: str | None = None
    when_contains: tuple[str, str] | None = None  # (file, text)

    def matches(self, tree: Path) -> bool:
        """Whether the side's worktree holds the file (or the text in it). The runner is
        root and the worktree is the candidate's: a FIFO there would hang it, a symlink
        point it anywhere, `/dev/zero` fill its memory. So the path is walked without
        following links, the file must be a regular one and is read up to a cap;
        anything else is `HeadFileError`, naming the file."""
        if self.when_exists is not None:
            return head_file(tree, self.when_exists, read=False) is not None
        assert self.when_contains is not None
        path, text = self.when_contains
        data = head_file(tree, path)
        return data is not None and text in data.decode("utf-8", errors="replace")

    def describe(self) -> dict[str, Any]:
        if self.when_exists is not None:
            return {"when_exists": self.when_exists}
        assert self.when_contains is not None
        return {"when_contains": {"file": self.when_contains[0], "text": self.when_contains[1]}}


@dataclass(frozen=True)
class Server:
    command: str
    health: str
    startup_timeout_s: float = 900.0
    env: dict[str, str] = field(default_factory=dict)
    stop_grace_s: float = 30.0
    variants: tuple[Variant, ...] = ()
    memory: memory.Memory = field(default_factory=memory.Memory)

    def commands(self) -> list[tuple[str, str]]:
        """(key, template) of every command the server may be started with."""
        return [("command", self.command)] + [
            (f"variants[{i}].command", v.command) for i, v in enumerate(self.variants)
        ]

    def choose(self, tree: Path) -> tuple[str, dict[str, Any]]:
        """The command template for a side's worktree: the first variant whose condition
        holds there, else `command`; and what to record about the choice."""
        for i, v in enumerate(self.variants):
            if v.matches(tree):
                return v.command, {"variant": i, **v.describe(), "command": v.command}
        return self.command, {"variant": None, "command": self.command}


@dataclass(frozen=True)
class Benchmark:
    concurrencies: tuple[int, ...]
    requests: int
    modes: dict[str, str]  # mode -> command
    warmup_requests: int = 0
    # Warm up until steady: repeat the warm-up pass (at most this many) until two in a row
    # agree on throughput within `warmup_steady_pct`; 1 is a single fixed pass.
    warmup_max_passes: int = 1
    warmup_steady_pct: float = 5.0
    timeout_s: float = 1800.0
    output: str = "{out}/speed_results.json"
    dataset: str | None = None
    # For benchmarks that do not write SGLang-Omni's speed_results.json (the ASR ones):
    records: str | None = None  # the per-request rows, when `output` has none
    accuracy_output: str | None = None  # per-sample accuracy the benchmark wrote itself
    keep: tuple[str, ...] = ()  # more of its files to keep (globs under {out})
    # The client and the accuracy step run from a trusted tree (the base commit, or this
    # ref of the upstream repository); `scripts` are the paths that make up the client, so
    # a head that changes them is reported as measured with the trusted copy.
    trusted_ref: str | None = None
    scripts: tuple[str, ...] = ("benchmarks",)
    # How base and head are measured when the runner is not told (`--design auto`):
    # `alternate` (both servers resident on one GPU, runners/resident.py) for a task whose
    # server fits twice; `sequential` (a server start a side and round) otherwise.
    design: str = "sequential"


@dataclass(frozen=True)
class Accuracy:
    command: str
    output: str = "{out}/wer_results.json"
    every_round: bool = False
    timeout_s: float | None = None
    after_server_stop: bool = False  # for scripts that start their own (ASR) server


@dataclass(frozen=True)
class Candidate:
    """What candidate code may reach beyond its own loopback and allowlisted environment:
    `hosts` (`host:port`, through a proxy the runner runs) and `inherit` (more of the
    runner's variables by name; never one that looks like a credential)."""

    hosts: tuple[str, ...] = ()
    inherit: tuple[str, ...] = ()


@dataclass(frozen=True)
class Policy:
    on_failure: str = "continue"
    run_timeout_s: float = 3600.0
    total_timeout_s: float = 21600.0
    gpu_idle_timeout_s: float = 600.0


@dataclass(frozen=True)
class Task:
    name: str
    model: str
    server: Server
    benchmark: Benchmark
    description: str = ""
    unconfirmed: tuple[str, ...] = ()
    prepare: tuple[str, ...] = ()
    prepare_timeout_s: float = 3600.0
    accuracy: Accuracy | None = None
    policy: Policy = field(default_factory=Policy)
    candidate: Candidate = field(default_factory=Candidate)
    primary_metric: str = "throughput_qps"
    report_metrics: tuple[str, ...] = ()
    guards: dict[str, float] = field(default_factory=dict)
    path: str | None = None
    sha256: str | None = None

    def summary(self) -> dict[str, Any]:
        """What the manifest records about the task (templates, not rendered commands)."""
        return {
            "name": self.name,
            "file": self.path,
            "sha256": self.sha256,
            "description": self.description,
            "model": self.model,
            "unconfirmed": list(self.unconfirmed),
            "prepare": list(self.prepare),
            "server": {
                "command": self.server.command,
                "health": self.server.health,
                "env": dict(self.server.env),
                "startup_timeout_s": self.server.startup_timeout_s,
                "variants": [{**v.describe(), "command": v.command} for v in self.server.variants],
                "memory": self.server.memory.describe(),
            },
            "commands": dict(self.benchmark.modes),
            "outputs": {
                "output": self.benchmark.output,
                "records": self.benchmark.records,
                "accuracy_output": self.benchmark.accuracy_output,
                "keep": list(self.benchmark.keep),
                "trusted_ref": self.benchmark.trusted_ref,
                "scripts": list(self.benchmark.scripts),
            },
            "accuracy": None
            if self.accuracy is None
            else {
                "command": self.accuracy.command,
                "every_round": self.accuracy.every_round,
                "after_server_stop": self.accuracy.after_server_stop,
            },
            "policy": {
                "on_failure": self.policy.on_failure,
                "run_timeout_s": self.policy.run_timeout_s,
                "total_timeout_s": self.policy.total_timeout_s,
                "gpu_idle_timeout_s": self.policy.gpu_idle_timeout_s,
            },
            "metrics": {"primary": self.primary_metric, "report": list(self.report_metrics)},
            "guards": dict(self.guards),
            "candidate": {
                "hosts": list(self.candidate.hosts),
                "inherit": list(self.candidate.inherit),
            },
        }


# ------------------------------------------------------------------------ loading


def available() -> list[str]:
    return sorted(p.stem for p in TASKS_DIR.glob("*.toml"))


def resolve(name_or_path: str) -> Path:
    """A task name (`cosyvoice3`) or the path of a TOML file."""
    p = Path(name_or_path)
    if name_or_path.endswith(".toml") or os.sep in name_or_path:
        if not p.is_file():
            raise TaskError(f"task file {name_or_path} does not exist")
        return p
    cand = TASKS_DIR / f"{name_or_path}.toml"
    if not cand.is_file():
        names = ", ".join(available()) or "none"
        raise TaskError(f"no task named {name_or_path!r} (known: {names})")
    return cand


def load(name_or_path: str) -> Task:
    path = resolve(name_or_path)
    data = path.read_bytes()
    try:
        doc = _toml.loads(data.decode("utf-8"))
    except (_toml.TOMLError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path}: not valid TOML: {exc}") from exc
    task = parse(doc, str(path))
    return replace(task, path=str(path), sha256=hashlib.sha256(data).hexdigest())


class _Doc:
    """Typed access to one table of the TOML document, with errors that name the key."""

    def __init__(self, where: str, table: Mapping[str, Any], prefix: str = "") -> None:
        self.where = where
        self.t = table
        self.prefix = prefix

    def key(self, k: str) -> str:
        return f"{self.prefix}{k}"

    def err(self, k: str, msg: str) -> TaskError:
        return TaskError(f"{self.where}: `{self.key(k)}` {msg}")

    def allow(self, keys: set[str]) -> None:
        extra = sorted(set(self.t) - keys)
        if extra:
            raise TaskError(
                f"{self.where}: unknown key(s) "
                + ", ".join(f"`{self.key(k)}`" for k in extra)
                + f" (allowed here: {', '.join(sorted(keys))})"
            )

    def sub(self, k: str, required: bool = False) -> _Doc | None:
        v = self.t.get(k)
        if v is None:
            if required:
                raise self.err(k, "is missing (a table)")
            return None
        if not isinstance(v, dict):
            raise self.err(k, "must be a table")
        return _Doc(self.where, v, f"{self.key(k)}.")

    def str_(self, k: str, default: str | None = None, required: bool = False) -> str:
        v = self.t.get(k)
        if v is None:
            if required or default is None:
                raise self.err(k, "is missing")
            return default
        if not isinstance(v, str) or (required and not v.strip()):
            raise self.err(k, "must be a non-empty string")
        return v

    def opt_str(self, k: str) -> str | None:
        v = self.t.get(k)
        if v is not None and not isinstance(v, str):
            raise self.err(k, "must be a string")
        return v

    def num(self, k: str, default: float, minimum: float = 0.0) -> float:
        v = self.t.get(k, default)
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        if not ok or not math.isfinite(v) or v <= minimum:
            raise self.err(k, f"must be a finite number greater than {minimum:g}")
        return float(v)

    def int_(self, k: str, default: int | None = None, minimum: int = 1) -> int:
        v = self.t.get(k, default)
        if v is None:
            raise self.err(k, "is missing")
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.err(k, f"must be an integer ≥ {minimum}")
        return v

    def bool_(self, k: str, default: bool) -> bool:
        v = self.t.get(k, default)
        if not isinstance(v, bool):
            raise self.err(k, "must be true or false")
        return v

    def strs(self, k: str) -> tuple[str, ...]:
        v = self.t.get(k, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.err(k, "must be a list of strings")
        return tuple(v)


def parse(doc: Mapping[str, Any], where: str = "task") -> Task:
    """Validate a task document (already read from TOML) into a `Task`."""
    top = _Doc(where, doc)
    top.allow(
        {
            "name",
            "description",
            "model",
            "unconfirmed",
            "prepare",
            "server",
            "benchmark",
            "accuracy",
            "policy",
            "metrics",
            "guards",
            "candidate",
        }
    )
    name = top.str_("name", required=True)
    model = top.str_("model", required=True)

    prep = top.sub("prepare")
    prepare: tuple[str, ...] = ()
    prepare_timeout = 3600.0
    if prep is not None:
        prep.allow({"commands", "timeout_s"})
        prepare = prep.strs("commands")
        prepare_timeout = prep.num("timeout_s", 3600.0)
        for i, cmd in enumerate(prepare):
            _check_command(prep, f"commands[{i}]", cmd, PREPARE_PLACEHOLDERS)

    srv = top.sub("server", required=True)
    assert srv is not None
    srv.allow(
        {"command", "health", "startup_timeout_s", "env", "stop_grace_s", "variants", "memory"}
    )
    mem = _memory(srv)
    allowed = RUN_PLACEHOLDERS | mem.placeholders()
    env_doc = srv.t.get("env", {})
    if not isinstance(env_doc, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env_doc.items()
    ):
        raise srv.err("env", "must be a table of strings")
    for k, v in env_doc.items():
        _check_template(srv, f"env.{k}", v, allowed)
    server = Server(
        command=srv.str_("command", required=True),
        health=srv.str_("health", required=True),
        startup_timeout_s=srv.num("startup_timeout_s", 900.0),
        env=dict(env_doc),
        stop_grace_s=srv.num("stop_grace_s", 30.0),
        variants=_variants(srv, allowed),
        memory=mem,
    )
    _check_command(srv, "command", server.command, allowed)
    _check_template(srv, "health", server.health, RUN_PLACEHOLDERS)
    if not server.health.startswith(("http://", "https://", "tcp://")):
        raise srv.err("health", "must be an http://, https:// or tcp:// address")

    b = top.sub("benchmark", required=True)
    assert b is not None
    b.allow(
        {
            "concurrencies",
            "requests",
            "warmup_requests",
            "warmup_max_passes",
            "warmup_steady_pct",
            "timeout_s",
            "output",
            "records",
            "accuracy_output",
            "keep",
            "dataset",
            "modes",
            "trusted_ref",
            "scripts",
            "design",
        }
    )
    design = b.str_("design", "sequential")
    if design not in DESIGNS:
        raise b.err("design", f"must be one of {', '.join(DESIGNS)}")
    conc = b.t.get("concurrencies")
    if (
        not isinstance(conc, list)
        or not conc
        or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in conc)
    ):
        raise b.err("concurrencies", "must be a non-empty list of positive integers")
    modes_doc = b.sub("modes", required=True)
    assert modes_doc is not None
    modes_doc.allow(set(MODES))
    modes: dict[str, str] = {}
    for mode in MODES:
        m = modes_doc.sub(mode)
        if m is None:
            continue
        m.allow({"command"})
        modes[mode] = m.str_("command", required=True)
        _check_command(m, "command", modes[mode], RUN_PLACEHOLDERS)
    if not modes:
        raise TaskError(f"{where}: [benchmark.modes] needs a streaming or non-streaming table")
    output = b.str_("output", "{out}/speed_results.json")
    _check_template(b, "output", output, RUN_PLACEHOLDERS)
    extra: dict[str, str | None] = {}
    for k in ("records", "accuracy_output"):
        extra[k] = b.opt_str(k)
        if extra[k] is not None:
            _check_out_path(b, k, str(extra[k]), glob=False)
            if extra[k] == output:
                raise b.err(k, "must name another file than `output`")
    keep = b.strs("keep")
    for i, pattern in enumerate(keep):
        _check_out_path(b, f"keep[{i}]", pattern, glob=True)
    dataset = b.opt_str("dataset")
    if dataset is not None:
        _check_template(b, "dataset", dataset, DATASET_PLACEHOLDERS)
    bench = Benchmark(
        concurrencies=tuple(conc),
        requests=b.int_("requests"),
        modes=modes,
        warmup_requests=b.int_("warmup_requests", 0, minimum=0),
        warmup_max_passes=b.int_("warmup_max_passes", 1, minimum=1),
        warmup_steady_pct=b.num("warmup_steady_pct", 5.0),
        timeout_s=b.num("timeout_s", 1800.0),
        output=output,
        dataset=dataset,
        records=extra["records"],
        accuracy_output=extra["accuracy_output"],
        keep=keep,
        trusted_ref=b.opt_str("trusted_ref"),
        scripts=b.strs("scripts") if "scripts" in b.t else ("benchmarks",),
        design=design,
    )
    if design == "alternate":
        _check_shared(srv, server)

    acc: Accuracy | None = None
    a = top.sub("accuracy")
    if a is not None:
        a.allow({"command", "output", "every_round", "timeout_s", "after_server_stop"})
        acc = Accuracy(
            command=a.str_("command", required=True),
            output=a.str_("output", "{out}/wer_results.json"),
            every_round=a.bool_("every_round", False),
            timeout_s=a.num("timeout_s", bench.timeout_s),
            after_server_stop=a.bool_("after_server_stop", False),
        )
        _check_command(a, "command", acc.command, RUN_PLACEHOLDERS)
        _check_template(a, "output", acc.output, RUN_PLACEHOLDERS)
        if bench.accuracy_output is not None:
            raise TaskError(
                f"{where}: [accuracy] and `benchmark.accuracy_output` both give the "
                "accuracy file; keep one"
            )

    pol = Policy()
    p = top.sub("policy")
    if p is not None:
        p.allow({"on_failure", "run_timeout_s", "total_timeout_s", "gpu_idle_timeout_s"})
        on_failure = p.str_("on_failure", "continue")
        if on_failure not in ("continue", "stop"):
            raise p.err("on_failure", 'must be "continue" or "stop"')
        pol = Policy(
            on_failure=on_failure,
            run_timeout_s=p.num("run_timeout_s", 3600.0),
            total_timeout_s=p.num("total_timeout_s", 21600.0),
            gpu_idle_timeout_s=p.num("gpu_idle_timeout_s", 600.0),
        )

    primary: str = "throughput_qps"
    report: tuple[str, ...] = ()
    met = top.sub("metrics")
    if met is not None:
        met.allow({"primary", "report"})
        primary = met.str_("primary", "throughput_qps")
        report = met.strs("report")

    guards: dict[str, float] = {}
    g = top.sub("guards")
    if g is not None:
        for k, v in g.t.items():
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise g.err(k, "must be a number")
            guards[k] = float(v)

    return Task(
        candidate=_candidate(top),
        name=name,
        model=model,
        server=server,
        benchmark=bench,
        description=top.str_("description", ""),
        unconfirmed=top.strs("unconfirmed"),
        prepare=prepare,
        prepare_timeout_s=prepare_timeout,
        accuracy=acc,
        policy=pol,
        primary_metric=primary,
        report_metrics=report,
        guards=guards,
    )


def _candidate(top: _Doc) -> Candidate:
    """`[candidate]`: hosts the candidates may reach, variables they may inherit."""
    c = top.sub("candidate")
    if c is None:
        return Candidate()
    c.allow({"hosts", "inherit"})
    hosts = c.strs("hosts")
    for i, h in enumerate(hosts):
        if not netns.valid_host(h):
            raise c.err(f"hosts[{i}]", "must be host:port (a name or address, port 1-65535)")
    inherit = c.strs("inherit")
    for i, name in enumerate(inherit):
        if not name.isidentifier():
            raise c.err(f"inherit[{i}]", "must be a variable name")
        if proc.secret_like(name):
            raise c.err(f"inherit[{i}]", f"names a credential-like variable ({name}): never")
    return Candidate(hosts=hosts, inherit=inherit)


def _variants(srv: _Doc, allowed: frozenset[str]) -> tuple[Variant, ...]:
    """`[[server.variants]]`: each a `command` and one condition on the worktree."""
    raw = srv.t.get("variants", [])
    if not isinstance(raw, list):
        raise srv.err("variants", "must be an array of tables ([[server.variants]])")
    out: list[Variant] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise srv.err(f"variants[{i}]", "must be a table")
        d = _Doc(srv.where, item, srv.key(f"variants[{i}]."))
        d.allow({"command", "when_exists", "when_contains"})
        command = d.str_("command", required=True)
        _check_command(d, "command", command, allowed)
        exists = d.opt_str("when_exists")
        contains_doc = d.sub("when_contains")
        if (exists is None) == (contains_doc is None):
            raise d.err("when_exists", "or `when_contains` is needed, and only one of them")
        if exists is not None:
            _check_tree_path(d, "when_exists", exists)
            out.append(Variant(command=command, when_exists=exists))
            continue
        assert contains_doc is not None
        contains_doc.allow({"file", "text"})
        path = contains_doc.str_("file", required=True)
        _check_tree_path(contains_doc, "file", path)
        text = contains_doc.str_("text", required=True)
        out.append(Variant(command=command, when_contains=(path, text)))
    return tuple(out)


def _memory(srv: _Doc) -> memory.Memory:
    """`[server.memory]`: how the server's GPU stages split its share (runners/memory.py)."""
    m = srv.sub("memory")
    if m is None:
        return memory.Memory()
    m.allow({"shares", "other_gib", "unmanaged"})
    shares = m.t.get("shares", {})
    if not isinstance(shares, dict):
        raise m.err("shares", "must be a table of stage = share")
    other = m.t.get("other_gib", 0.0)
    problem = memory.check(shares, other)
    if problem is not None:
        key, _, msg = problem.partition(" ")
        raise m.err(key.rstrip(":"), msg)
    return memory.Memory(
        shares={str(k): float(v) for k, v in shares.items()},
        other_gib=float(other),
        unmanaged=m.opt_str("unmanaged"),
    )


def _check_shared(srv: _Doc, server: Server) -> None:
    """A task run `alternate` must give each of its two servers its share of the GPU: a
    memory flag fixed to a number would give the second the first one's share of a GPU
    it no longer has; a command with no such flag must say why it needs none."""
    for key, command in server.commands():
        fixed = memory.unshared(command, server.memory)
        if fixed:
            raise srv.err(
                key,
                f"sets GPU memory with {', '.join(fixed)}: a task run `alternate` starts two "
                "servers on one GPU, so each memory flag must take the server's share — "
                "{mem_fraction_static} for SGLang's --mem-fraction-static, {memory_fraction} "
                "or {memory_fraction_<stage>} for a budget of the whole GPU (runners/memory.py)",
            )
        used = bool(memory.flags(command)) or bool(
            placeholders(command) & server.memory.placeholders()
        )
        if not used and server.memory.unmanaged is None:
            raise srv.err(
                key,
                "sets no GPU memory share, and the task runs `alternate` (two servers on one "
                "GPU): pass the server's share ({mem_fraction_static} or {memory_fraction}), "
                "or say in [server.memory] unmanaged why this server needs none",
            )


def _check_tree_path(d: _Doc, key: str, path: str) -> None:
    """A path inside the side's worktree: relative, no `..`, no placeholders."""
    if not path.strip() or path.startswith(("/", "~")) or "\\" in path:
        raise d.err(key, "must be a relative path inside the worktree")
    if ".." in path.split("/") or "{" in path or "}" in path:
        raise d.err(key, "must stay inside the worktree (no `..`, no placeholders)")


def placeholders(template: str) -> set[str]:
    """The `{names}` a template uses (`{{` and `}}` are literal braces)."""
    out: set[str] = set()
    for _, fname, spec, conv in string.Formatter().parse(template):
        if fname is None:
            continue
        if not fname.isidentifier() or spec or conv:
            raise ValueError(f"{{{fname}}} is not a plain placeholder")
        out.add(fname)
    return out


def _check_template(d: _Doc, key: str, template: str, allowed: frozenset[str]) -> None:
    try:
        used = placeholders(template)
    except ValueError as exc:
        raise d.err(
            key, f"is not a valid template ({exc}); write {{{{ and }}}} for braces"
        ) from exc
    bad = sorted(used - allowed)
    if bad:
        raise d.err(
            key,
            "uses unknown placeholder(s) "
            + ", ".join(f"{{{b}}}" for b in bad)
            + f" (known here: {', '.join(sorted(allowed))}; write {{{{ and }}}} for braces)",
        )


_GLOB = frozenset("*?[")


def _check_out_path(d: _Doc, key: str, template: str, glob: bool) -> None:
    """A path the runner copies from the run's scratch folder into the bundle, at the
    same path under the run's folder: so it must lie under `{out}`."""
    _check_template(d, key, template, RUN_PLACEHOLDERS)
    rest = template.removeprefix("{out}/")
    if rest == template or not rest:
        raise d.err(key, "must be a path under {out}/ (it is kept at that path in the bundle)")
    if ".." in rest.split("/") or "{out}" in rest:
        raise d.err(key, "must stay under {out}/ (no `..`)")
    if not glob and _GLOB & set(rest):
        raise d.err(key, "names one file: no glob characters (use `keep` for patterns)")


def _check_command(d: _Doc, key: str, command: str, allowed: frozenset[str]) -> None:
    _check_template(d, key, command, allowed)
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise d.err(key, f"cannot be split into arguments ({exc})") from exc
    if not argv:
        raise d.err(key, "is empty")


# ------------------------------------------------------------------------ rendering


def render(template: str, values: Mapping[str, object]) -> str:
    return template.format_map({k: str(v) for k, v in values.items()})


def render_command(template: str, values: Mapping[str, object]) -> list[str]:
    """argv for a command template: split first, then fill each argument in."""
    tokens = shlex.split(template)
    if len(tokens) >= 3 and tokens[0] == "sh" and tokens[1] == "-c":
        quoted = {k: shlex.quote(str(v)) for k, v in values.items()}
        return ["sh", "-c", tokens[2].format_map(quoted), *[render(t, values) for t in tokens[3:]]]
    return [render(t, values) for t in tokens]
