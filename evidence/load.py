"""Turn each input (a bundle, or a per-run-only study) into one `Source`.

Reading never stops at the first bad file: a run whose file is missing or malformed
becomes a `bundle-invalid` finding (the `InputError` of `read_run_file`, naming the file
and the field) and the rest is kept. Only input that cannot be read at all (not an
archive, no manifest, a manifest that is not `rsi-bundle/1`) stops the load with
`InputError`, and so does input beyond the bounds of `evidence.limits` (`BoundError`:
an archive too big, JSON too deep, too many runs, a number outside its physical range).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import orjson
from pydantic import ValidationError

from evidence import integrity
from evidence.asr import ASR_FORMATS, RunSummary, parse_accuracy, parse_records, parse_summary
from evidence.bundle import MANIFEST, Bundle
from evidence.errors import BoundError, InputError
from evidence.limits import (
    DEFAULT,
    MAX_COUNT,
    MAX_SECONDS,
    MIN_WALL_S,
    PHYSICAL,
    Limits,
    check_column,
    check_number,
    check_server,
)
from evidence.model import Commit, Control, Finding, Manifest, Run, gpu_label
from evidence.records import (
    BeyondBounds,
    RecordError,
    RunRecords,
    WerRecords,
    collection_paused,
    parse_server,
    parse_speed,
)
from evidence.rounds import accuracy_metrics, run_metrics

T = TypeVar("T")


@dataclass
class LoadedRun:
    run: Run
    order: int
    records: RunRecords | None = None
    wer: WerRecords | None = None
    server: dict[str, Any] | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        """An `ok` run whose figures could be computed."""
        return self.run.status == "ok" and any(v is not None for v in self.metrics.values())


@dataclass
class Source:
    path: str
    kind: Literal["bundle", "per-run"]
    manifest: Manifest
    gpu: str
    runs: list[LoadedRun]
    findings: list[Finding] = field(default_factory=list)
    # The null control's runs (`control.runs`), read like `runs` but kept apart: they never
    # enter the study's rows or the base/head audits. `control` is None when none ran or
    # it was malformed (then a `bundle-invalid` finding says why).
    control: Control | None = None
    control_runs: list[LoadedRun] = field(default_factory=list)

    @property
    def per_request(self) -> bool:
        return self.kind == "bundle"


def format_validation(exc: ValidationError, prefix: str = "") -> str:
    """Up to five of a validation's errors, each with its field (`prefix` before it)."""
    parts = []
    for err in exc.errors()[:5]:
        loc = prefix + (".".join(str(x) for x in err["loc"]) or "(root)")
        parts.append(f"{loc}: {err['msg']}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def load(path: Path, limits: Limits = DEFAULT) -> Source:
    if not path.exists():
        raise InputError(str(path), "no such file or folder")
    if not (path.is_file() or path.is_dir()):  # a FIFO would be waited on forever
        raise InputError(str(path), "not a regular file or folder")
    if path.is_file() and path.suffix == ".json":
        return load_per_run_study(path, limits)
    with Bundle(path, limits) as bundle:
        return _load_bundle(bundle, str(path))


def read_manifest(bundle: Bundle, where: str) -> dict[str, Any]:
    """The bundle's one manifest as a JSON object, not yet validated: what the engine
    reads, and what the App checks a bundle's identity against (the same function, so the
    two can never read different manifests). InputError when it cannot be read;
    BoundError when it is too big, too deep or lists more runs than `limits.max_runs`."""
    at = f"{where}/{MANIFEST}"
    try:
        data = bundle.read(MANIFEST)
    except BoundError as exc:
        raise BoundError(at, exc.problem) from exc
    except (ValueError, OSError) as exc:
        raise InputError(at, f"unreadable ({exc})") from exc
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):
            raise BoundError(at, f"JSON nested deeper than the reader allows ({exc})") from exc
        raise InputError(at, f"not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise InputError(at, "not a JSON object")
    runs = doc.get("runs")
    most = bundle.limits.max_runs
    if isinstance(runs, list) and len(runs) > most:
        raise BoundError(at, f"{len(runs)} runs, more than {most}")
    control = doc.get("control")
    ctl_runs = control.get("runs") if isinstance(control, dict) else None
    if isinstance(ctl_runs, list) and len(ctl_runs) > most:
        raise BoundError(at, f"control.runs: {len(ctl_runs)} runs, more than {most}")
    return doc


def _load_bundle(bundle: Bundle, where: str) -> Source:
    doc = read_manifest(bundle, where)
    try:
        manifest = Manifest.model_validate(doc)
    except ValidationError as exc:
        raise InputError(f"{where}/{MANIFEST}", format_validation(exc)) from exc
    _check_runs(f"{where}/{MANIFEST}", manifest.runs)
    gpu = gpu_label(manifest.gpu)
    src = Source(where, "bundle", manifest, gpu, [])
    budget = _Budget(bundle.limits.max_values)
    seen: set[str] = set()
    for order, run in enumerate(manifest.runs):
        if run.id in seen:
            src.findings.append(
                _invalid(
                    gpu,
                    run.id,
                    f"run id {run.id!r} appears twice in the manifest; only the first is used",
                )
            )
            continue
        seen.add(run.id)
        src.runs.append(_load_run(bundle, where, gpu, run, order, src.findings, budget))
    _load_control(bundle, where, src, budget)
    src.findings += _unreported(src)
    _accuracy_over_common_samples(src)
    extra = [lr.run for lr in src.control_runs]
    src.findings += integrity.check(bundle.sha256, manifest, gpu, extra)
    return src


def _load_control(bundle: Bundle, where: str, src: Source, budget: _Budget) -> None:
    """The null control's runs, read with the same loader and bounds as `runs`. A control
    of the wrong shape, or whose runs name a real run's files (it would measure nothing of
    its own), is one `bundle-invalid` finding naming the field, and no control is read;
    the real runs are judged all the same."""
    raw = src.manifest.control
    if raw is None:
        return
    at = f"{where}/{MANIFEST}"
    gpu = src.gpu
    try:
        control = Control.model_validate(raw)
    except ValidationError as exc:
        why = (
            format_validation(exc, "control.")
            if isinstance(raw, dict)
            else "control: must be an object with `kind` and `runs`"
        )
        src.findings.append(_invalid(gpu, None, f"{at}: the null control is malformed: {why}"))
        return
    owner = _files_owned([lr.run for lr in src.runs])
    problem = _shared_file(_first_of_each(control.runs), owner)
    if problem is not None:
        src.findings.append(
            _invalid(gpu, None, f"{at}: the null control is not read: control.runs: {problem}")
        )
        return
    _check_numbers(at, control.runs, "control.runs")
    src.control = control
    seen = {lr.run.id for lr in src.runs}
    for order, run in enumerate(control.runs):
        if run.id in seen:
            src.findings.append(
                _invalid(
                    gpu,
                    run.id,
                    f"control run id {run.id!r} appears twice in the manifest (or is a real "
                    "run's); only the first is used",
                )
            )
            continue
        seen.add(run.id)
        src.control_runs.append(_load_run(bundle, where, gpu, run, order, src.findings, budget))


def _first_of_each(runs: list[Run]) -> list[Run]:
    """Runs with a repeated id left out (a repeated id is reported, and skipped, alone)."""
    ids: set[str] = set()
    out = []
    for run in runs:
        if run.id not in ids:
            ids.add(run.id)
            out.append(run)
    return out


def _names(run: Run) -> list[str]:
    f = run.files
    names = (f.speed, f.records, f.wer, f.server)
    return list(dict.fromkeys(posixpath.normpath(x) for x in names if x))


def _files_owned(runs: list[Run]) -> dict[str, str]:
    """Each file the runs name, by the id of the run naming it."""
    return {rel: run.id for run in runs for rel in _names(run)}


def _shared_file(runs: list[Run], owner: dict[str, str]) -> str | None:
    """The first file two runs name (`owner`: files already taken, by run id), or None."""
    taken = dict(owner)
    for run in runs:
        for rel in _names(run):
            if rel in taken:
                return f"runs {taken[rel]!r} and {run.id!r} both name {rel}"
            taken[rel] = run.id
    return None


def _check_runs(at: str, runs: list[Run]) -> None:
    """The manifest's numbers are within physical ranges, and each run names files of
    its own: runs sharing one file would make the work grow with runs × file size (600
    runs naming one 20,000-row file took minutes and gigabytes) and measure nothing new."""
    problem = _shared_file(_first_of_each(runs), {})
    if problem is not None:
        raise InputError(at, problem)
    _check_numbers(at, runs, "runs")


def _check_numbers(at: str, runs: list[Run], name: str) -> None:
    for i, run in enumerate(runs):
        check_number(at, f"{name}[{i}].wall_clock_s", run.wall_clock_s, MIN_WALL_S, MAX_SECONDS)
        check_number(at, f"{name}[{i}].round", run.round, 1, 1e6)
        check_number(at, f"{name}[{i}].concurrency", run.concurrency, 1, 1e6)
        check_number(at, f"{name}[{i}].requests", run.requests, 0, MAX_COUNT)
        check_number(at, f"{name}[{i}].warmup_requests", run.warmup_requests, 0, MAX_COUNT)


def _check_parsed(at: dict[str, str], lr: LoadedRun) -> None:
    """A run's parsed figures are within physical ranges; BoundError names the file."""
    if lr.records is not None:
        where = at.get("records") or at.get("speed") or "?"
        for name, (lo, hi) in PHYSICAL.items():
            check_column(where, name, lr.records.cols[name], lo, hi)
        check_column(where, "inter_chunk_s", lr.records.gaps, 0.0, MAX_SECONDS)
        check_number(where, "duration", lr.records.duration_s, MIN_WALL_S, MAX_SECONDS)
    if lr.wer is not None:
        where = at.get("wer") or at.get("records") or "?"
        check_column(where, "wer", lr.wer.wer, 0.0, 1e3)
        check_column(where, "errors", lr.wer.errors_count, 0.0, MAX_COUNT)
    if lr.server is not None:
        check_server(at.get("server") or "?", lr.server)


@dataclass
class _Budget:
    """The per-request numbers a bundle's run files have given so far, held to
    `limits.max_values`: a head can make its lists as long as it likes by streaming many
    tiny chunks, and 800 runs of such lists once held 3.1 GB."""

    most: int
    used: int = 0

    def charge(self, where: str, what: str, values: int) -> None:
        self.used += values
        if self.used > self.most:
            raise BoundError(
                where,
                f"{what} bring the bundle's per-request values to {self.used}, "
                f"more than {self.most}",
            )


def _check_values(at: dict[str, str], lr: LoadedRun, limits: Limits, budget: _Budget) -> None:
    """No request's list of gaps is longer than `limits.max_list_values`, and the
    bundle's per-request numbers stay within its budget; BoundError names the file and
    the field."""
    rec = lr.records
    if rec is not None:
        where = at.get("records") or at.get("speed") or "?"
        field = rec.list_field
        if rec.lengths.size and int(rec.lengths.max()) > limits.max_list_values:
            i = int(rec.lengths.argmax())
            raise BoundError(
                where,
                f"field {field!r} of request {rec.ids[i][:200]!r} holds {rec.lengths[i]} "
                f"values, more than {limits.max_list_values}",
            )
        lists = int(rec.lengths.sum())
        budget.charge(where, f"field {field!r}: {rec.n} requests and {lists} gaps", rec.values)
    if lr.wer is not None:
        where = at.get("wer") or at.get("records") or "?"
        budget.charge(where, f"field 'per_sample': {len(lr.wer.ids)} samples", lr.wer.values)


def _invalid(gpu: str, run_id: str | None, message: str) -> Finding:
    runs = [run_id] if run_id is not None else []
    return Finding(code="bundle-invalid", severity="error", message=message, gpu=gpu, runs=runs)


def read_run_file(
    bundle: Bundle, where: str, rel: str, kind: str, parse: Callable[[bytes], T]
) -> T:
    """One of a run's files, parsed. FileNotFoundError when it is absent; InputError,
    naming the file (and the field at fault), when it cannot be read or parsed."""
    try:
        data = bundle.read(rel)
    except FileNotFoundError:
        raise
    except BoundError as exc:
        raise BoundError(f"{where}/{rel}", exc.problem) from exc
    except (ValueError, OSError) as exc:
        raise InputError(f"{where}/{rel}", str(exc)) from exc
    try:
        with collection_paused():
            return parse(data)
    except BeyondBounds as exc:
        raise BoundError(f"{where}/{rel}", str(exc)) from exc
    except RecordError as exc:
        raise InputError(f"{where}/{rel}", f"not a readable {kind} file: {exc}") from exc


def _load_run(
    bundle: Bundle,
    where: str,
    gpu: str,
    run: Run,
    order: int,
    findings: list[Finding],
    budget: _Budget,
) -> LoadedRun:
    lr = LoadedRun(run=run, order=order)
    if run.status != "ok":
        return lr
    f = run.files
    if f.speed is None:
        findings.append(_invalid(gpu, run.id, f"run {run.id} is `ok` but names no speed file"))
    # With its rows in `records`, the speed file is only the benchmark's summary.
    parsers: dict[str, Callable[[bytes], Any]] = {
        "speed": parse_summary if f.records else parse_speed,
        "records": parse_records,
        "wer": parse_accuracy,
        "server": parse_server,
    }
    wanted = {"speed": f.speed, "records": f.records, "wer": f.wer, "server": f.server}
    got: dict[str, Any] = {}
    for kind, rel in wanted.items():
        if rel is None:
            continue
        try:
            got[kind] = read_run_file(bundle, where, rel, kind, parsers[kind])
        except FileNotFoundError:
            findings.append(
                _invalid(
                    gpu,
                    run.id,
                    f"run {run.id} is `ok` but its {kind} file {rel} is missing from {where}",
                )
            )
        except BoundError:
            raise
        except InputError as exc:
            findings.append(_invalid(gpu, run.id, str(exc)))
    derived_wer: WerRecords | None = None
    if f.records:
        if "records" in got:
            lr.records, derived_wer = got["records"]
            summary: RunSummary | None = got.get("speed")
            if summary is not None and lr.records is not None:
                lr.records.summary, lr.records.duration_s = summary.pick(run.concurrency)
    else:
        lr.records = got.get("speed")
    lr.wer = got.get("wer") or derived_wer
    lr.server = got.get("server")
    at = {k: f"{where}/{v}" for k, v in wanted.items() if v}
    _check_parsed(at, lr)
    _check_values(at, lr, bundle.limits, budget)
    lr.metrics = run_metrics(lr.records, run.wall_clock_s, lr.server, lr.wer)
    if lr.records is not None:
        lr.records = lr.records.without_gaps()
    return lr


def common_scored(runs: list[LoadedRun]) -> set[str] | None:
    """The samples that every `ok` run of both sides scored in its accuracy output: the
    only ones whose error rates are compared. None unless both sides have one."""
    sets: dict[str, list[set[str]]] = {"base": [], "head": []}
    for lr in runs:
        if lr.wer is not None and lr.run.status == "ok":
            sets[lr.run.side].append(lr.wer.scored())
    if not sets["base"] or not sets["head"]:
        return None
    return set.intersection(*sets["base"], *sets["head"])


def _accuracy_over_common_samples(src: Source) -> None:
    """Each run's WER (CER) over the samples both sides scored, so that a sample one side
    failed to transcribe moves neither side's figure; the audit counts the failures."""
    by_config: dict[tuple[str, int], list[LoadedRun]] = {}
    for lr in src.runs:
        by_config.setdefault((lr.run.mode, lr.run.concurrency), []).append(lr)
    for runs in by_config.values():
        keep = common_scored(runs)
        if keep is None:
            continue
        for lr in runs:
            w = lr.wer
            if w is None or lr.run.status != "ok":
                continue
            if len(keep) < int((w.success & np.isfinite(w.wer)).sum()):
                lr.metrics.update(accuracy_metrics(w.restrict(keep)))


def _unreported(src: Source) -> list[Finding]:
    """Say which figures the ASR records do not carry: missing, not zero."""
    out = []
    for fmt in ASR_FORMATS:
        runs = [lr for lr in src.runs if lr.records is not None and lr.records.fmt == fmt]
        recs = [lr.records for lr in runs if lr.records is not None]
        if not recs:
            continue
        never = [name for name in recs[0].unreported() if all(name in r.unreported() for r in recs)]
        words = ", ".join(never) if never else "nothing"
        out.append(
            Finding(
                code="fields-not-reported",
                severity="info",
                gpu=src.gpu,
                runs=[lr.run.id for lr in runs][:10],
                message=f"{len(recs)} run(s) read from {fmt} records report no {words}: "
                "those figures are missing, not zero. An ASR request generates no audio, "
                "so its first-output time is text_ttft_s (streaming only).",
            )
        )
    return out


# ------------------------------------------------------------ per-run-only studies

_SIDES = {"base": "base", "baseline": "base", "candidate": "head", "head": "head"}
_PER_RUN_METRICS = ("throughput_qps", "latency_mean_s", "rtf_mean", "audio_throughput_s_per_s")


def load_per_run_study(path: Path, limits: Limits = DEFAULT) -> Source:
    """A study with per-run aggregates only, like SGLang-Omni's `results-summary.json`."""
    size = path.stat().st_size
    if size > limits.max_json_bytes:
        raise BoundError(str(path), f"{size} bytes, more than {limits.max_json_bytes} to read")
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):
            raise BoundError(str(path), f"JSON nested too deeply ({exc})") from exc
        raise InputError(str(path), f"not valid JSON ({exc})") from exc
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list) or not runs:
        raise InputError(str(path), "not a bundle and not a per-run study (no `runs` list)")
    if len(runs) > limits.max_runs:
        raise BoundError(str(path), f"{len(runs)} runs, more than {limits.max_runs}")
    contract = _sibling_contract(path)
    bench = contract.get("benchmark", {}) if contract else {}
    mode = "unspecified"
    if isinstance(bench.get("stream"), bool):
        mode = "streaming" if bench["stream"] else "non-streaming"
    repo = _repo_from(
        doc.get("pull_request") or (contract or {}).get("source", {}).get("repository", "")
    )
    gpu = gpu_label(str(doc.get("hardware") or "unknown"))
    loaded: list[LoadedRun] = []
    for order, row in enumerate(runs):
        try:
            side = _SIDES[str(row["revision"]).lower()]
            conc = int(row["concurrency"])
            rnd = int(row["round"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(
                str(path), f"runs[{order}] lacks revision/concurrency/round ({exc})"
            ) from exc
        try:
            run = Run.model_validate(
                {
                    "id": f"{side}-c{conc}-r{rnd}",
                    "side": side,
                    "round": rnd,
                    "mode": mode,
                    "concurrency": conc,
                    "requests": doc.get("samples_per_run"),
                    "status": "ok",
                    "physical_gpu_id": row.get("physical_gpu_id"),
                }
            )
        except ValidationError as exc:
            raise InputError(str(path), f"runs[{order}]: {format_validation(exc)}") from exc
        metrics: dict[str, float | None] = {
            k: (float(row[k]) if isinstance(row.get(k), int | float) else None)
            for k in _PER_RUN_METRICS
        }
        for k, v in metrics.items():
            check_number(str(path), f"runs[{order}].{k}", v, 0.0, MAX_COUNT)
        if isinstance(row.get("latency_mean_s"), int | float):
            metrics["latency_mean_s"] = float(row["latency_mean_s"])
        loaded.append(LoadedRun(run=run, order=order, metrics=metrics))
    manifest = Manifest.model_validate(
        {
            "schema": "rsi-bundle/1",
            "verification_id": str(doc.get("run_id") or path.stem),
            "repo": repo,
            "task": str(bench.get("model") or "unknown"),
            "base": Commit(sha=str(doc.get("base_commit") or "")),
            "head": Commit(sha=str(doc.get("candidate_commit") or "")),
            "gpu": gpu,
            "environment": _per_run_environment(contract),
            "runs": [lr.run.model_dump(by_alias=True) for lr in loaded],
            "complete": str(doc.get("status", "")).upper() == "COMPLETE",
        }
    )
    src = Source(str(path), "per-run", manifest, gpu, loaded)
    src.findings.append(
        Finding(
            code="no-per-request-records",
            severity="info",
            gpu=gpu,
            message="This study has per-run aggregates only, so no per-request audit was "
            "possible: counts, timings, output lengths and sample sets are unchecked.",
        )
    )
    return src


def _sibling_contract(path: Path) -> dict[str, Any] | None:
    """`<x>.results-summary.json` → `<x>.contract.json`, or `contract.json` beside it."""
    name = path.name
    candidates = [
        path.with_name(name.replace("results-summary", "contract")),
        path.with_name("contract.json"),
    ]
    for c in candidates:
        if c != path and c.is_file():
            try:
                doc = orjson.loads(c.read_bytes())
            except orjson.JSONDecodeError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def _per_run_environment(contract: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    if not contract:
        return {}
    rt = contract.get("runtime", {})
    hw = contract.get("hardware", {})
    env = {
        "gpu_name": hw.get("gpu_model"),
        "image": rt.get("image"),
        "image_digest": rt.get("image_id"),
    }
    return {"base": dict(env), "head": dict(env)}


def _repo_from(url: str) -> str:
    m = re.search(r"github\.com/([\w.-]+/[\w.-]+)", url)
    return m.group(1) if m else "unknown/unknown"
