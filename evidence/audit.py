"""The raw-record audit: every check that decides whether the records can be trusted.

Each finding has a stable code, a severity, the runs and sample ids involved, the numbers
and one plain sentence. Any `error` makes the study `invalid` (docs/statistics.md). Checks run
per bundle (one GPU) on the per-request columns; none of them trusts the bundle's own
summaries.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import compress
from typing import cast

import numpy as np
import pandas as pd
from scipy import stats

from evidence.asr import SEEDTTS, TRANSCRIBE_DIARIZE
from evidence.bounds import finite
from evidence.control import favoured, runs_of
from evidence.inert import bound
from evidence.load import LoadedRun, Source, common_scored
from evidence.model import ControlRow, Finding, HistoryEntry, HostCpu, Severity, gpu_label
from evidence.policy import Policy
from evidence.records import FloatArray, WerRecords
from evidence.table import requests_table
from evidence.verdict import fmt_change

MAX_IDS = 10


Number = float | int | str | None


def _f(
    code: str,
    severity: Severity,
    message: str,
    src: Source,
    runs: list[str] | None = None,
    samples: list[str] | None = None,
    numbers: dict[str, Number] | None = None,
    **more: Number,
) -> Finding:
    return Finding(
        code=code,
        severity=severity,
        message=message,
        gpu=src.gpu,
        runs=runs or [],
        samples=(samples or [])[:MAX_IDS],
        numbers={**(numbers or {}), **more},
    )


def _configs(src: Source) -> dict[tuple[str, int], list[LoadedRun]]:
    out: dict[tuple[str, int], list[LoadedRun]] = defaultdict(list)
    for lr in src.runs:
        out[(lr.run.mode, lr.run.concurrency)].append(lr)
    return dict(out)


def _cfg(mode: str, conc: int) -> str:
    return f"{mode} c={conc}"


def audit(
    sources: list[Source],
    policy: Policy,
    history: list[HistoryEntry] | None = None,
    controls: Sequence[ControlRow] = (),
) -> list[Finding]:
    findings: list[Finding] = []
    findings += _across_bundles(sources)
    for src in sources:
        findings += src.findings
        findings += _control_moved(src, controls)
        findings += _run_failed(src, policy)
        findings += _environment(src)
        findings += _interleaving(src)
        findings += _too_few(src, policy)
        findings += _noisy(src, policy)
        findings += _unsteady_warmup(src)
        findings += _host_cpu(src, policy)
        if history:
            findings += _low_baseline(src, history, policy)
        for lr in src.runs:
            if lr.records is None:
                continue
            findings += _request_counts(src, lr)
            findings += _duplicates(src, lr)
            findings += _summary(src, lr)
            findings += _timing(src, lr)
            findings += _first_chunk_at_end(src, lr, policy)
        findings += _sample_sets(src)
        findings += _failed_requests(src, policy)
        findings += _length_shift(src, policy, requests_table([src], [c for c, _ in _LENGTHS]))
        findings += _accuracy_coverage(src, policy)
        findings += _accuracy(src, policy)
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: (order[f.severity], f.gpu or "", f.code))


# ------------------------------------------------------------------ structure


def _across_bundles(sources: list[Source]) -> list[Finding]:
    out: list[Finding] = []
    if len(sources) < 2:
        return out
    first = sources[0]
    gpus = Counter(s.gpu for s in sources)
    for gpu, n in gpus.items():
        if n > 1:
            out.append(
                _f(
                    "bundle-invalid",
                    "error",
                    f"{n} bundles are for {gpu}; a verification has one bundle per GPU kind",
                    first,
                    gpu_bundles=n,
                )
            )
    for s in sources[1:]:
        m, m0 = s.manifest, first.manifest
        for label, a, b in (
            ("verification", m.verification_id, m0.verification_id),
            ("repository", m.repo, m0.repo),
            ("base commit", m.base.sha, m0.base.sha),
            ("head commit", m.head.sha, m0.head.sha),
        ):
            if a != b:
                out.append(
                    _f(
                        "bundle-invalid",
                        "error",
                        f"{s.path} is for {label} {a}, "
                        f"{first.path} for {b}: bundles of different verifications "
                        "cannot be compared",
                        s,
                    )
                )
    return out


def _run_failed(src: Source, policy: Policy) -> list[Finding]:
    out: list[Finding] = []
    for lr in src.runs:
        if lr.run.status == "ok":
            continue
        tail = (lr.run.log_tail or "").strip().splitlines()
        why = lr.run.error or (
            "the schedule stopped early" if lr.run.status == "skipped" else "no reason given"
        )
        out.append(
            _f(
                "run-failed",
                "warning",
                f"Run {lr.run.id} {lr.run.status}: {why}"
                + (f" (last log line: {bound(tail[-1], 200)})" if tail else "")
                + ".",
                src,
                [lr.run.id],
                status=lr.run.status,
            )
        )
    if not src.manifest.complete:
        out.append(
            _f(
                "run-failed",
                "warning",
                "The bundle has no `complete: true`: the "
                "schedule was cut short, so some planned rounds are missing.",
                src,
            )
        )
    for (mode, conc), runs in _configs(src).items():
        for side in ("base", "head"):
            n = sum(1 for lr in runs if lr.run.side == side and lr.usable)
            if n < policy.min_failed_rounds:
                out.append(
                    _f(
                        "run-failed",
                        "error",
                        f"{_cfg(mode, conc)} is left with {n} "
                        f"usable {side} round(s); at least {policy.min_failed_rounds} "
                        "a side are needed to compare anything.",
                        src,
                        [lr.run.id for lr in runs if lr.run.side == side],
                        usable_rounds=n,
                        side=side,
                    )
                )
        out += _one_sided_failures(src, mode, conc, runs)
    return out


# Failures the runner causes or that end the schedule: no side chose them.
_NOT_THE_SIDES = frozenset({"total-time-limit", "interrupted", "runner-error"})


def _one_sided_failures(src: Source, mode: str, conc: int, runs: list[LoadedRun]) -> list[Finding]:
    """A side whose runs fail far more often than the other's can drop its own slow
    rounds (a server that crashes when it is slow loses those pairs, and is started
    again): an outside try dropped 6 of 16 head bursts this way. At least 2 failures and
    a fifth of the side's runs, against at most a third as many on the other side, is an
    error: no gain is claimed from what such a side left."""
    counts: dict[str, tuple[int, int]] = {}
    for side in ("base", "head"):
        ran = [lr for lr in runs if lr.run.side == side and lr.run.status != "skipped"]
        failed = [
            lr
            for lr in ran
            if lr.run.status == "failed" and (lr.run.failure or "") not in _NOT_THE_SIDES
        ]
        counts[side] = (len(failed), len(ran))
    out: list[Finding] = []
    for side, other in (("base", "head"), ("head", "base")):
        f, n = counts[side]
        fo, _ = counts[other]
        if f >= 2 and f >= 0.2 * n and 3 * fo <= f:
            out.append(
                _f(
                    "run-failed",
                    "error",
                    f"{_cfg(mode, conc)}: the {side} failed {f} of its {n} runs, the {other} "
                    f"{fo}. A side whose runs fail selectively can drop its slow rounds, so "
                    "no change is claimed from the runs it left.",
                    src,
                    [lr.run.id for lr in runs if lr.run.side == side and lr.run.status == "failed"][
                        :MAX_IDS
                    ],
                    side=side,
                    failed_runs=f,
                    side_runs=n,
                )
            )
    return out


def _labelled_gpu(src: Source) -> list[Finding]:
    """Each side's recorded GPU against the bundle's label, which decides which GPU its
    figures are reported for."""
    env = src.manifest.environment
    base, head = env.get("base"), env.get("head")
    out: list[Finding] = []
    recorded = [str(e["gpu_name"]) for e in (base, head) if e and e.get("gpu_name")]
    # The label is one of the name's words ("NVIDIA GH200 480GB" is a GH200).
    other = [n for n in recorded if src.gpu.upper() not in re.findall(r"[A-Z0-9]+", n.upper())]
    ran_on = sorted({gpu_label(n) for n in other})
    if ran_on:
        out.append(
            _f(
                "environment-mismatch",
                "error",
                f"The bundle is labelled {src.gpu}, but its sides recorded "
                f"{' and '.join(ran_on)}: its figures would be reported for a GPU they were "
                "not measured on.",
                src,
                fields="gpu",
            )
        )
    return out


def _environment(src: Source) -> list[Finding]:
    env = src.manifest.environment
    base, head = env.get("base"), env.get("head")
    if not base or not head:
        return _labelled_gpu(src) + (
            [
                _f(
                    "environment-mismatch",
                    "warning",
                    "The bundle does not record the "
                    "environment of both sides, so it cannot show they ran alike.",
                    src,
                )
            ]
            if src.kind == "bundle"
            else []
        )
    out = _labelled_gpu(src)
    # A key one side records and the other does not is a difference too: a fact that
    # could not be read on one side cannot show that the sides ran alike.
    hard = ("gpu_name", "gpu_count", "driver", "cuda", "image", "image_digest")
    diff = [k for k in hard if base.get(k) != head.get(k)]
    if diff:
        out.append(
            _f(
                "environment-mismatch",
                "error",
                "Base and head ran on different "
                + ", ".join(f"{k} ({_env_value(base, k)} vs {_env_value(head, k)})" for k in diff)
                + ": the difference may be the machine, not the change.",
                src,
                fields=",".join(diff),
            )
        )
    soft = [
        k
        for k in sorted(set(base) | set(head))
        if k not in hard and k != "packages" and base.get(k) != head.get(k)
    ]
    pb, ph = base.get("packages") or {}, head.get("packages") or {}
    pk = sorted(k for k in set(pb) | set(ph) if pb.get(k) != ph.get(k))
    if soft or pk:
        parts = [f"{k} ({_env_value(base, k)} vs {_env_value(head, k)})" for k in soft]
        parts += [f"{k} {_env_value(pb, k)} vs {_env_value(ph, k)}" for k in pk]
        out.append(
            _f(
                "environment-mismatch",
                "warning",
                "Base and head differ in " + ", ".join(parts) + ".",
                src,
                fields=",".join(soft + pk),
            )
        )
    return out


def _env_value(env: dict[str, object], key: str) -> object:
    v = env.get(key)
    return "not recorded" if v is None else v


def _interleaving(src: Source) -> list[Finding]:
    out: list[Finding] = []
    for (mode, conc), runs in _configs(src).items():
        sides = [lr.run.side for lr in sorted(runs, key=lambda r: r.order)]
        if "base" not in sides or "head" not in sides:
            continue
        pos = {s: [i for i, x in enumerate(sides) if x == s] for s in ("base", "head")}
        gap = abs(float(np.mean(pos["base"])) - float(np.mean(pos["head"])))
        longest = max(len(list(g)) for g in _runs_of(sides))
        if gap > 0.5 or longest > 2:
            seq = "".join("B" if s == "base" else "H" for s in sides)
            out.append(
                _f(
                    "not-interleaved",
                    "warning",
                    f"{_cfg(mode, conc)} ran {seq} (B = "
                    "base, H = head): not order-balanced, so drift on the machine can "
                    "fall on one side.",
                    src,
                    [lr.run.id for lr in runs],
                    mean_position_gap=round(gap, 3),
                    longest_streak=longest,
                )
            )
    return out


def _runs_of(seq: Sequence[str]) -> Iterator[list[str]]:
    cur: list[str] = []
    for x in seq:
        if cur and cur[-1] != x:
            yield cur
            cur = []
        cur.append(x)
    if cur:
        yield cur


def _too_few(src: Source, policy: Policy) -> list[Finding]:
    out: list[Finding] = []
    for (mode, conc), runs in _configs(src).items():
        n = {s: sum(1 for lr in runs if lr.run.side == s and lr.usable) for s in ("base", "head")}
        if min(n.values()) >= policy.min_failed_rounds and min(n.values()) < policy.min_rounds:
            out.append(
                _f(
                    "too-few-samples",
                    "warning",
                    f"{_cfg(mode, conc)} has {n['base']} "
                    f"base and {n['head']} head rounds; with fewer than "
                    f"{policy.min_rounds} a side the intervals are wide.",
                    src,
                    base_rounds=n["base"],
                    head_rounds=n["head"],
                )
            )
        sizes = [int(lr.records.success.sum()) for lr in runs if lr.records is not None]
        if sizes and min(sizes) < policy.tail_min_samples:
            out.append(
                _f(
                    "too-few-samples",
                    "warning",
                    f"{_cfg(mode, conc)} measured "
                    f"{min(sizes)} requests a round; p99 from fewer than "
                    f"{policy.tail_min_samples} is not reported as a finding.",
                    src,
                    requests_per_round=min(sizes),
                )
            )
    return out


def _noisy(src: Source, policy: Policy) -> list[Finding]:
    out: list[Finding] = []
    for (mode, conc), runs in _configs(src).items():
        for side in ("base", "head"):
            sel = [
                lr
                for lr in runs
                if lr.run.side == side and lr.usable and lr.metrics.get("throughput_qps")
            ]
            v = np.array([lr.metrics["throughput_qps"] for lr in sel], dtype=np.float64)
            if v.size < 3:
                continue
            cv = 100 * float(v.std(ddof=1) / v.mean())
            med = float(np.median(v))
            mad = float(np.median(np.abs(v - med))) * 1.4826
            outliers = [
                lr.run.id
                for lr, x in zip(sel, v, strict=True)
                if mad > 0 and abs(x - med) > 3 * mad and abs(x / med - 1) > 0.10
            ]
            if cv > policy.noisy_cv_pct or outliers:
                extra = f"; outlying round(s): {', '.join(outliers)}" if outliers else ""
                out.append(
                    _f(
                        "noisy-rounds",
                        "warning",
                        f"{side} throughput at "
                        f"{_cfg(mode, conc)} varies {cv:.1f}% between rounds (CV){extra}.",
                        src,
                        outliers or [lr.run.id for lr in sel],
                        cv_pct=round(cv, 2),
                    )
                )
    return out


def host_cpu(src: Source, policy: Policy) -> HostCpu | None:
    """The spread of the machine's own CPU speed over a bundle's runs (`host_cpu_ms`, a
    fixed Python loop the runner times before each server starts); None when fewer than
    three runs recorded it. Shared by the audit and the evidence, so both say the same."""
    got = [(side, ms) for _, side, ms in _host_cpu_ms(src)]
    if len(got) < 3:
        return None
    v = np.array([x for _, x in got], dtype=np.float64)
    cv = 100 * float(v.std(ddof=1) / v.mean())
    med = {
        side: float(np.median([x for s, x in got if s == side]))
        for side in ("base", "head")
        if any(s == side for s, _ in got)
    }
    gap = 100 * (med["head"] / med["base"] - 1) if len(med) == 2 else 0.0
    t = policy.noisy_cv_pct
    return HostCpu(
        runs=v.size,
        min_ms=float(v.min()),
        max_ms=float(v.max()),
        cv_pct=round(cv, 2),
        median_base_ms=med.get("base"),
        median_head_ms=med.get("head"),
        side_gap_pct=round(gap, 2),
        threshold_pct=t,
        steady=cv <= t and abs(gap) <= t,
    )


def _host_cpu(src: Source, policy: Policy) -> list[Finding]:
    """The host's CPU speed moving between runs, or differing between the sides: a
    CPU-bound server moves with it, and no placement on the job's cores removes that."""
    h = host_cpu(src, policy)
    if h is None or h.steady:
        return []
    sides = (
        f"; median base {h.median_base_ms:.3g} ms, head {h.median_head_ms:.3g} ms "
        f"({h.side_gap_pct:+.1f}%)"
        if h.median_base_ms is not None and h.median_head_ms is not None
        else ""
    )
    more = "pairs" if src.manifest.measured_by.analysed_paired else "rounds"
    return [
        _f(
            "host-cpu-unsteady",
            "warning",
            f"The machine's CPU changed speed between runs: a fixed Python loop timed "
            f"before each run took {h.min_ms:.3g}–{h.max_ms:.3g} ms ({h.cv_pct:.1f}% CV "
            f"over {h.runs} runs{sides}). A server bound by its CPU (eager decoding "
            "launches one kernel at a time) can spread with the machine, and only more "
            f"{more} (or a dedicated machine) narrow its interval; a GPU-bound one barely "
            "moves.",
            src,
            [rid for rid, _, _ in _host_cpu_ms(src)],
            cv_pct=h.cv_pct,
            side_gap_pct=h.side_gap_pct,
        )
    ]


def _control_moved(src: Source, controls: Sequence[ControlRow]) -> list[Finding]:
    """The null control (base against base) moved: improved or regressed, or its point
    estimate past the threshold. The machine treated the two slots differently by about
    that much, and a change of that size between base and head is not the code's."""
    out: list[Finding] = []
    for c in controls:
        if c.gpu != src.gpu or not c.moved:
            continue
        pairs = f", {c.pairs} pairs" if c.pairs is not None else ""
        out.append(
            _f(
                "control-moved",
                "warning",
                f"The null control (base against base{pairs}) moved {fmt_change(c)} on "
                f"{c.gpu} {_cfg(c.mode, c.concurrency)} ({c.label}, {c.verdict}): this "
                f"machine favoured {favoured(c)} by about that much during the run, so a "
                "change of that size between base and head is not evidence of the code, "
                "in either direction: a control that moved means the two slots were not "
                "alike (the machine, or something acting on one slot), not that a change "
                "beat a handicap.",
                src,
                [lr.run.id for lr in runs_of(src, c)][:MAX_IDS],
                delta_pct=c.delta_pct,
                ci_low_pct=c.ci_low_pct,
                ci_high_pct=c.ci_high_pct,
                pairs=c.pairs,
            )
        )
    return out


def _host_cpu_ms(src: Source) -> list[tuple[str, str, float]]:
    """(run id, side, milliseconds) of each run that recorded a usable `host_cpu_ms`."""
    out: list[tuple[str, str, float]] = []
    for lr in src.runs:
        ms = (lr.server or {}).get("host_cpu_ms")
        if isinstance(ms, int | float) and finite(ms) and 0 < ms < 1e6:
            out.append((lr.run.id, lr.run.side, float(ms)))
    return out


def _unsteady_warmup(src: Source) -> list[Finding]:
    """Runs whose warm-up passes never agreed (the runner's `server.json` says so): their
    measured rounds may have caught a server still warming up."""
    out: list[Finding] = []
    for (mode, conc), runs in _configs(src).items():
        for side in ("base", "head"):
            cold = []
            for lr in runs:
                warm = (lr.server or {}).get("warmup")
                if lr.run.side == side and isinstance(warm, dict) and warm.get("steady") is False:
                    cold.append((lr.run.id, warm))
            if not cold:
                continue
            rid, warm = cold[0]
            raw = warm.get("rates")
            rates = [r for r in (raw if isinstance(raw, list) else [])[:8] if finite(r)]
            shown = " → ".join(f"{r:.3g}" for r in rates)
            pct = warm.get("steady_pct")
            within = f"{pct:g}%" if finite(pct) else "the task's margin"
            ext = warm.get("extended")
            more = (
                f", even with {ext} pass(es) past the task's `warmup_max_passes`"
                if isinstance(ext, int) and not isinstance(ext, bool) and 0 < ext < 10_000
                else ""
            )
            out.append(
                _f(
                    "warm-up-unsteady",
                    "warning",
                    f"{side} warm-up at {_cfg(mode, conc)} did not settle in "
                    f"{len(cold)} run(s): two passes in a row never agreed within "
                    f"{within}{more} (e.g. {rid}: {shown} requests/s), so those "
                    "rounds may include a server still warming up.",
                    src,
                    [r for r, _ in cold],
                    unsteady_runs=len(cold),
                )
            )
    return out


_FINGERPRINT_KEYS = ("gpu_name", "gpu_count", "driver", "cuda", "image_digest")


def _same_fingerprint(a: dict[str, object], b: dict[str, object]) -> bool:
    keys = [k for k in _FINGERPRINT_KEYS if k in a and k in b]
    return bool(keys) and all(a[k] == b[k] for k in keys)


def _low_baseline(src: Source, history: list[HistoryEntry], policy: Policy) -> list[Finding]:
    from evidence.metrics import BY_NAME

    out: list[Finding] = []
    fp = src.manifest.environment.get("base") or {}
    for (mode, conc), runs in _configs(src).items():
        for metric in ("throughput_qps", "audio_ttfp_p95_s", "latency_p95_s"):
            hist = np.array(
                [
                    h.value
                    for h in history
                    if h.task == src.manifest.task
                    and h.gpu == src.gpu
                    and h.mode == mode
                    and h.concurrency == conc
                    and h.metric == metric
                    and _same_fingerprint(h.fingerprint, fp)
                ]
            )
            base = [lr.metrics.get(metric) for lr in runs if lr.run.side == "base" and lr.usable]
            vals = np.array([b for b in base if b is not None], dtype=np.float64)
            if hist.size < policy.history_min_points or vals.size == 0:
                continue
            q1, q3 = np.percentile(hist, [25, 75])
            kept = hist[(hist >= q1 - 1.5 * (q3 - q1)) & (hist <= q3 + 1.5 * (q3 - q1))]
            mean, sd = float(kept.mean()), float(kept.std(ddof=1)) if kept.size > 1 else 0.0
            now = float(vals.mean())
            rel = now / mean - 1
            worse = -rel if BY_NAME[metric].better == "higher" else rel
            z = abs(now - mean) / sd if sd > 0 else float("inf")
            if worse * 100 > policy.history_pct and z > policy.history_z:
                out.append(
                    _f(
                        "low-baseline",
                        "warning",
                        f"Base {BY_NAME[metric].label} at "
                        f"{_cfg(mode, conc)} is {now:.4g}, {abs(rel) * 100:.1f}% worse "
                        f"than the {kept.size} earlier measurements of main on this "
                        f"machine fingerprint (mean {mean:.4g}): a gain over a slow "
                        "base may not be a gain over main.",
                        src,
                        metric=metric,
                        base=round(now, 6),
                        history_mean=round(mean, 6),
                        z=round(z, 2) if np.isfinite(z) else None,
                    )
                )
    return out


# ------------------------------------------------------------------ per run


def _request_counts(src: Source, lr: LoadedRun) -> list[Finding]:
    assert lr.records is not None
    want, got = lr.run.requests, lr.records.n
    if want is None or want == got:
        return []
    return [
        _f(
            "request-count-mismatch",
            "error",
            f"Run {lr.run.id} should have measured {want} requests but its records hold {got}.",
            src,
            [lr.run.id],
            expected=want,
            found=got,
        )
    ]


def _duplicates(src: Source, lr: LoadedRun) -> list[Finding]:
    assert lr.records is not None
    dup = [i for i, n in Counter(lr.records.ids).items() if n > 1]
    if not dup:
        return []
    return [
        _f(
            "duplicate-request-id",
            "error",
            f"Run {lr.run.id} records {len(dup)} "
            "request id(s) more than once, so some requests were counted twice or "
            "others are missing.",
            src,
            [lr.run.id],
            dup,
            duplicated=len(dup),
        )
    ]


# (summary field, recomputed metric, rounding half-step of the summary)
_OMNI_SUMMARY = (
    ("latency_mean_s", "latency_mean_s", 5e-4),
    ("latency_median_s", "latency_median_s", 5e-4),
    ("latency_p95_s", "latency_p95_s", 5e-4),
    ("latency_p99_s", "latency_p99_s", 5e-4),
    ("rtf_mean", "rtf_mean", 5e-5),
    ("audio_ttfp_median_s", "audio_ttfp_median_s", 5e-5),
    ("audio_ttfp_p95_s", "audio_ttfp_p95_s", 5e-5),
    ("inter_chunk_p95_s", "inter_chunk_p95_s", 5e-5),
    ("text_ttft_median_s", "text_ttft_median_s", 5e-5),
    ("text_ttft_p95_s", "text_ttft_p95_s", 5e-5),
)
# benchmark_asr_seedtts' repeat summary: its own figures are unrounded (float noise
# only) ...
_SEEDTTS_EXACT = (
    ("throughput_samples_per_s", "throughput_qps"),
    ("latency_mean_s", "latency_mean_s"),
    ("latency_median_s", "latency_median_s"),
    ("latency_p95_s", "latency_p95_s"),
    ("latency_p99_s", "latency_p99_s"),
    ("rtf_mean", "rtf_mean"),
    ("corpus_wer", "wer_corpus"),
)
# ... those taken from `compute_speed_metrics` are rounded (and counted over transcribed
# requests, so they are compared only when every request was also scored).
_SEEDTTS_ROUNDED = (
    ("rtfx", "audio_throughput_s_per_s", 5e-4),
    ("text_ttft_median_s", "text_ttft_median_s", 5e-5),
    ("text_ttft_p95_s", "text_ttft_p95_s", 5e-5),
    ("inter_chunk_p95_s", "inter_chunk_p95_s", 5e-5),
)
_RECORD_ROUNDING = 1e-4  # per-request values are themselves rounded to 4 decimals


def _summary(src: Source, lr: LoadedRun) -> list[Finding]:
    rec = lr.records
    assert rec is not None
    s = rec.summary
    if not s:
        return []
    bad: dict[str, Number] = {}
    n_ok, n = int(rec.success.sum()), rec.n
    if rec.fmt == SEEDTTS:
        bad = _seedtts_summary(lr, s, n_ok, n)
    elif rec.fmt in ("sglang-omni", TRANSCRIBE_DIARIZE):
        counts = {"total_requests": n, "completed_requests": n_ok, "failed_requests": n - n_ok}
        for k, v in counts.items():
            if k in s and s[k] != v:
                bad[k] = f"{s[k]} vs {v}"
        wall = lr.run.wall_clock_s
        for key, metric in (
            ("throughput_qps", "throughput_qps"),
            ("audio_throughput_s_per_s", "audio_throughput_s_per_s"),
        ):
            mine, theirs = lr.metrics.get(metric), s.get(key)
            if (
                wall
                and isinstance(theirs, int | float)
                and mine is not None
                and abs(theirs - mine) > 5e-4 + mine * 1e-3
            ):
                bad[key] = f"{theirs} vs {mine:.4f}"
        for key, metric, half in _OMNI_SUMMARY:
            mine, theirs = lr.metrics.get(metric), s.get(key)
            if (
                isinstance(theirs, int | float)
                and mine is not None
                and abs(theirs - mine) > half + _RECORD_ROUNDING + 1e-9
            ):
                bad[key] = f"{theirs} vs {mine:.4f}"
    else:
        if isinstance(s.get("completed"), int) and s["completed"] != n_ok:
            bad["completed"] = f"{s['completed']} vs {n_ok}"
        if isinstance(s.get("failed"), int) and s["failed"] != n - n_ok:
            bad["failed"] = f"{s['failed']} vs {n - n_ok}"
        ttft = rec.cols["text_ttft_s"][rec.success] * 1000
        for key, fn in (("mean_ttft_ms", np.mean), ("median_ttft_ms", np.median)):
            theirs = s.get(key)
            if (
                isinstance(theirs, int | float)
                and ttft.size
                and abs(theirs - float(fn(ttft))) > 1e-6 * max(1.0, abs(theirs)) + 1e-3
            ):
                bad[key] = f"{theirs} vs {float(fn(ttft)):.4f}"
        dur, thr = s.get("duration"), s.get("request_throughput")
        if (
            isinstance(dur, int | float)
            and isinstance(thr, int | float)
            and dur > 0
            and abs(thr - n_ok / dur) > 1e-6 * max(1.0, thr)
        ):
            bad["request_throughput"] = f"{thr} vs {n_ok / dur:.4f}"
    out = []
    if bad:
        out.append(
            _f(
                "summary-mismatch",
                "error",
                f"Run {lr.run.id}'s own summary disagrees "
                "with its per-request records beyond rounding: "
                + ", ".join(f"{k} {v}" for k, v in bad.items())
                + " (summary vs recomputed).",
                src,
                [lr.run.id],
                numbers=bad,
            )
        )
    if lr.wer is not None and lr.wer.summary:
        out += _wer_summary(src, lr)
    return out


def _seedtts_summary(lr: LoadedRun, s: dict[str, object], n_ok: int, n: int) -> dict[str, Number]:
    bad: dict[str, Number] = {}
    for k, v in (("total", n), ("evaluated", n_ok), ("skipped", n - n_ok)):
        theirs = s.get(k)
        if isinstance(theirs, int) and theirs != v:
            bad[k] = f"{theirs} vs {v}"
    checks = [(key, metric, 1e-9) for key, metric in _SEEDTTS_EXACT]
    if n_ok == n:
        checks += list(_SEEDTTS_ROUNDED)
    for key, metric, half in checks:
        mine, theirs = lr.metrics.get(metric), s.get(key)
        if metric == "throughput_qps" and not lr.run.wall_clock_s:
            continue
        if (
            isinstance(theirs, int | float)
            and not isinstance(theirs, bool)
            and mine is not None
            and abs(theirs - mine) > half + 1e-6 * max(1.0, abs(mine))
        ):
            bad[key] = f"{theirs} vs {mine:.6g}"
    return bad


def _wer_summary(src: Source, lr: LoadedRun) -> list[Finding]:
    w = lr.wer
    assert w is not None
    assert w.summary is not None
    s = w.summary
    bad: dict[str, Number] = {}
    ok = int(w.success.sum())
    for k, v in (("total_samples", len(w.ids)), ("evaluated", ok)):
        if isinstance(s.get(k), int) and s[k] != v:
            bad[k] = f"{s[k]} vs {v}"
    mean = float(np.nanmean(w.wer[w.success])) if ok else None
    corpus = w.corpus()
    for k, mine in (
        ("wer_mean", mean),
        ("wer_per_sample_mean", mean),
        ("wer_corpus", corpus),
        ("corpus_wer", corpus),
    ):
        theirs = s.get(k)
        if w.measure != "wer" or mine is None or not isinstance(theirs, int | float):
            continue
        if abs(theirs - mine) > 1e-3:
            bad[k] = f"{theirs} vs {mine:.4f}"
    if not bad:
        return []
    return [
        _f(
            "summary-mismatch",
            "error",
            f"Run {lr.run.id}'s {w.measure.upper()} summary disagrees with its "
            "per-sample rows: "
            + ", ".join(f"{k} {v}" for k, v in bad.items())
            + " (summary vs recomputed).",
            src,
            [lr.run.id],
            numbers=bad,
        )
    ]


def _timing(src: Source, lr: LoadedRun) -> list[Finding]:
    rec = lr.records
    assert rec is not None
    c = rec.cols
    ok = rec.success
    problems: list[str] = []
    samples: list[str] = []
    ids = np.array(rec.ids, dtype=object)
    neg = np.zeros(rec.n, dtype=bool)
    for k in ("latency_s", "engine_latency_s", "audio_ttfp_s", "text_ttft_s", "inter_chunk_min_s"):
        neg |= np.nan_to_num(c[k], nan=0.0) < 0
    if neg.any():
        problems.append(f"{int(neg.sum())} request(s) with negative times")
        samples += list(ids[neg])
    tol = 2 * _RECORD_ROUNDING
    lat = c["latency_s"]
    for k, what in (("audio_ttfp_s", "first audio"), ("text_ttft_s", "first text")):
        late = ok & (c[k] > lat + tol)
        if late.any():
            problems.append(f"{int(late.sum())} request(s) whose {what} came after the end")
            samples += list(ids[late])
    wall = lr.run.wall_clock_s
    lat_ok = lat[ok & ~np.isnan(lat)]
    if wall and lat_ok.size:
        longest = float(lat_ok.max())
        if longest > wall + 1e-3 + tol:
            problems.append(
                f"a request took {longest:.3f}s but the run's wall clock is {wall:.3f}s"
            )
            samples += list(ids[ok & (lat == longest)])
        total = float(lat_ok.sum())
        cap = lr.run.concurrency * wall
        if total > cap * (1 + 1e-3) + tol * lat_ok.size:
            problems.append(
                f"the latencies add up to {total:.2f}s, more than concurrency × "
                f"wall clock = {cap:.2f}s"
            )
    if not problems:
        return []
    return [
        _f(
            "timing-inconsistent",
            "error",
            f"Run {lr.run.id}: " + "; ".join(problems) + " — these records cannot all be true.",
            src,
            [lr.run.id],
            samples,
        )
    ]


def _first_chunk_at_end(src: Source, lr: LoadedRun, policy: Policy) -> list[Finding]:
    rec = lr.records
    assert rec is not None
    if lr.run.mode != "streaming":
        return []
    lat, ttfp = rec.cols["latency_s"], rec.cols["audio_ttfp_s"]
    late = rec.success & (ttfp >= policy.first_chunk_at_end_frac * lat) & (lat > 0)
    if not late.any():
        return []
    ids = [i for i, x in zip(rec.ids, late, strict=True) if x]
    i0 = int(np.argmax(late))
    return [
        _f(
            "first-chunk-at-end",
            "warning",
            f"Run {lr.run.id}: {len(ids)} streamed "
            f"request(s) got their first audio in the last "
            f"{100 * (1 - policy.first_chunk_at_end_frac):.0f}% of the request (e.g. "
            f"{ids[0]}: first audio at {ttfp[i0]:.3f}s of {lat[i0]:.3f}s), which is not "
            "streaming.",
            src,
            [lr.run.id],
            ids,
            count=len(ids),
        )
    ]


# ------------------------------------------------------------------ across sides


def _side_ids(runs: list[LoadedRun], side: str) -> set[str]:
    return {
        i for lr in runs if lr.run.side == side and lr.records is not None for i in lr.records.ids
    }


def _sample_sets(src: Source) -> list[Finding]:
    out: list[Finding] = []
    for (mode, conc), runs in _configs(src).items():
        b, h = _side_ids(runs, "base"), _side_ids(runs, "head")
        if not b or not h or b == h:
            continue
        only_b, only_h = sorted(b - h), sorted(h - b)
        out.append(
            _f(
                "sample-set-mismatch",
                "error",
                f"{_cfg(mode, conc)}: base and head "
                f"measured different samples ({len(only_b)} only in base, {len(only_h)} "
                "only in head), so they did not do the same work.",
                src,
                [lr.run.id for lr in runs],
                only_b[:5] + only_h[:5],
                only_base=len(only_b),
                only_head=len(only_h),
            )
        )
    return out


def _past_guard(
    code: str,
    src: Source,
    policy: Policy,
    side: str,
    bad: int,
    total: int,
    said: tuple[str, str],
    runs: list[str],
    samples: list[str],
    counts: dict[str, Number],
) -> Finding:
    """`bad` of a side's `total` requests (or transcriptions) gone wrong: an error past
    the failure-rate guard, a warning within it. The message is `said` with the rate and
    the guard between its two parts ("1.20%, guard 5.00%")."""
    rate = bad / total
    sev: Severity = "error" if rate > policy.failure_rate_max else "warning"
    guard = f"{100 * rate:.2f}%, guard {100 * policy.failure_rate_max:.2f}%"
    return _f(
        code,
        sev,
        f"{said[0]}{guard}{said[1]}",
        src,
        runs,
        samples,
        counts,
        total=total,
        rate=round(rate, 6),
        side=side,
    )


def _failed_requests(src: Source, policy: Policy) -> list[Finding]:
    out: list[Finding] = []
    for (mode, conc), runs in _configs(src).items():
        for side in ("base", "head"):
            recs = [
                (lr.run.id, lr.records)
                for lr in runs
                if lr.run.side == side and lr.records is not None
            ]
            failed = sum(int((~rec.success).sum()) for _, rec in recs)
            if not failed:
                continue
            total = sum(rec.n for _, rec in recs)
            errs = {i: e for _, rec in recs for i, e in rec.errors.items()}
            common = Counter(errs.values()).most_common(1)[0][0] if errs else "unknown"
            cfg = _cfg(mode, conc)
            out.append(
                _past_guard(
                    "failed-requests",
                    src,
                    policy,
                    side,
                    failed,
                    total,
                    (
                        f"{failed} of {total} {side} requests failed at {cfg} (",
                        f"); most common error: {common[:200]}.",
                    ),
                    [run_id for run_id, _ in recs],
                    sorted(errs),
                    {"failed": failed},
                )
            )
    return out


_LENGTHS = (
    ("audio_duration_s", "audio seconds"),
    ("completion_tokens", "output tokens"),
    ("audio_chunk_count", "audio chunks"),
)


def _length_unreported(src: Source, ok: pd.DataFrame, col: str, what: str) -> list[Finding]:
    """A length one side reports and the other does not, per configuration: the head
    reports its own lengths (tokens come from its server), and one that reports none
    would otherwise escape the check that it does not do less."""
    by = [ok["mode"], ok["concurrency"], ok["side"]]
    # Reported on most requests: one length a run would otherwise do (the check of
    # shifts needs lengths on the same samples of both sides).
    has = ((ok[col] > 0).groupby(by, observed=True).mean() >= 0.5).unstack("side")
    out: list[Finding] = []
    for key, row in has.iterrows():
        mode, conc = cast(tuple[str, int], key)
        b, h = row.get("base"), row.get("head")
        if b is None or h is None or pd.isna(b) or pd.isna(h) or bool(b) == bool(h):
            continue  # a side with no successful request here, or both alike
        quiet = "head" if b else "base"
        out.append(
            _f(
                "output-length-unreported",
                "error",
                f"{_cfg(mode, conc)}: {quiet} reports no {what} where "
                f"{'base' if quiet == 'head' else 'head'} does, so whether the head "
                "produces as much output cannot be checked.",
                src,
                measure=col,
                side=quiet,
            )
        )
    return out


def _length_shift(src: Source, policy: Policy, table: pd.DataFrame) -> list[Finding]:
    """Per sample id, head's output length against base's, each averaged over rounds."""
    out: list[Finding] = []
    if table.empty:
        return out
    keys = ["mode", "concurrency", "request_id", "side"]
    ok = table.loc[table["is_success"].astype(bool), [*keys, *(c for c, _ in _LENGTHS)]]
    # Sample ids numbered in their sorted order: grouped by these numbers the groups come
    # out in the order the ids would give, and the ids are hashed once, not per measure
    # (and by a dict, which reuses each string's hash, not by pandas).
    rid = ok["request_id"].to_numpy(dtype=object)
    at = {i: k for k, i in enumerate(sorted(set(rid)))}
    ok["request_id"] = np.fromiter(map(at.__getitem__, rid), dtype=np.intp, count=len(rid))
    for col, what in _LENGTHS:
        out += _length_unreported(src, ok, col, what)
        sel = ok[ok[col] > 0]
        if sel.empty:
            continue
        means = sel.groupby(keys, observed=True)[col].mean().unstack("side")
        if "base" not in means or "head" not in means:
            continue
        means = means.dropna()
        worst: tuple[float, str, float, int] | None = None
        configs: list[str] = []
        for key, grp in means.groupby(level=["mode", "concurrency"], observed=True):
            mode, conc = cast(tuple[str, int], key)
            if len(grp) < 5:
                continue
            r = np.log(grp["head"].to_numpy() / grp["base"].to_numpy())
            if not np.any(r != 0):
                continue
            shift = float(np.expm1(np.mean(r)))
            p = float(stats.wilcoxon(r).pvalue)
            if abs(shift) * 100 > policy.length_shift_pct and p < policy.length_shift_p:
                configs.append(_cfg(mode, conc))
                if worst is None or abs(shift) > abs(worst[0]):
                    worst = (shift, _cfg(mode, conc), p, len(grp))
        if worst is not None:
            shift, cfg, p, n = worst
            word = "shorter" if shift < 0 else "longer"
            others = ", ".join(c for c in configs if c != cfg) or "no other configuration"
            out.append(
                _f(
                    "output-length-shift",
                    "error",
                    f"Head produces {word} output for the same samples: {what} "
                    f"{100 * shift:+.1f}% at {cfg} over {n} sample ids (Wilcoxon p = {p:.2g}; "
                    f"also at {others}). A change that does less is not faster.",
                    src,
                    measure=col,
                    shift_pct=round(100 * shift, 3),
                    p=p,
                    samples_compared=n,
                )
            )
    return out


def _scores_any(w: WerRecords) -> bool:
    return bool(np.any(w.success & np.isfinite(w.wer)))


def _accuracy_coverage(src: Source, policy: Policy) -> list[Finding]:
    """Transcriptions failed or missing from the accuracy outputs, per side; and sides
    whose accuracy outputs cover different samples.

    A failed row is one not scored (`is_success` false, or no rate); a missing one is a
    request of the run's speed records that its accuracy file does not name. Rows read
    from the request records themselves (the ASR benchmarks) are the requests, which
    `failed-requests` already counts.
    """
    out: list[Finding] = []
    for (mode, conc), runs in _configs(src).items():
        sel = [lr for lr in runs if lr.wer is not None and lr.run.status == "ok"]
        if not sel:
            continue
        # A side with outputs but not one scored rate (every row null, as an ASR head
        # can write) has nothing to compare either.
        sides = {lr.run.side for lr in sel if lr.wer is not None and _scores_any(lr.wer)}
        if len(sides) == 1:
            # Without it the accuracy guard has nothing to compare: a head whose accuracy
            # run failed, or that wrote no accuracy file, must not pass as accurate.
            (has,) = sides
            lacks = "head" if has == "base" else "base"
            out.append(
                _f(
                    "accuracy-missing",
                    "error",
                    f"{_cfg(mode, conc)}: {has} has accuracy outputs but {lacks} has none "
                    "from a run that finished, so the accuracy guard cannot compare them.",
                    src,
                    [lr.run.id for lr in runs if lr.run.side == lacks],
                    side=lacks,
                )
            )
            continue
        covered: dict[str, set[str]] = {"base": set(), "head": set()}
        for side in ("base", "head"):
            mine = [lr for lr in sel if lr.run.side == side]
            total = failed = missing = 0
            examples: list[str] = []
            for lr in mine:
                w = lr.wer
                assert w is not None
                covered[side].update(w.ids)
                lost: list[str] = []
                if lr.records is not None and lr.records.ids != w.ids:
                    in_file, asked = set(w.ids), set(lr.records.ids)
                    lost = sorted(asked - in_file) if asked & in_file else []
                    covered[side].update(lost)
                if lr.run.files.wer is None:
                    continue
                scored = w.success & np.isfinite(w.wer)
                bad = list(compress(w.ids, (~scored).tolist()))
                total += len(w.ids) + len(lost)
                failed += len(bad)
                missing += len(lost)
                examples += (bad + lost)[: MAX_IDS - len(examples)]
            if not failed + missing:
                continue
            measure = (mine[0].wer.measure if mine[0].wer else "wer").upper()
            cfg = _cfg(mode, conc)
            out.append(
                _past_guard(
                    "accuracy-failed",
                    src,
                    policy,
                    side,
                    failed + missing,
                    total,
                    (
                        f"{failed + missing} of {total} {side} transcriptions at {cfg} were "
                        f"not scored ({failed} failed, {missing} missing from the accuracy "
                        "file; ",
                        f"); {measure} is compared over the samples both sides scored.",
                    ),
                    [lr.run.id for lr in mine],
                    examples,
                    {"failed": failed, "missing": missing},
                )
            )
        b, h = covered["base"], covered["head"]
        speed_differs = _side_ids(runs, "base") != _side_ids(runs, "head")
        if b and h and b != h and not speed_differs:  # else sample-set-mismatch says it
            only_b, only_h = sorted(b - h), sorted(h - b)
            out.append(
                _f(
                    "accuracy-sample-set-mismatch",
                    "error",
                    f"{_cfg(mode, conc)}: the accuracy outputs of base and head cover "
                    f"different samples ({len(only_b)} only in base, {len(only_h)} only in "
                    "head), so their error rates do not measure the same work.",
                    src,
                    [lr.run.id for lr in sel],
                    only_b[:5] + only_h[:5],
                    only_base=len(only_b),
                    only_head=len(only_h),
                )
            )
    return out


@dataclass
class _SideRates:
    mean: float  # over every scored rate of the side
    at: dict[str, int]  # sample id -> its place in `means`
    means: FloatArray  # each sample's mean over its rounds

    def of(self, samples: list[str]) -> FloatArray:
        return self.means[np.fromiter(map(self.at.__getitem__, samples), np.intp, len(samples))]


def _scored_rates(runs: list[LoadedRun], side: str, keep: set[str] | None) -> _SideRates | None:
    """One side's scored rates (transcribed, not NaN, in `keep`), keyed once by sample:
    the mean of them all, and each sample's mean over its rounds. Samples are taken in
    the order first seen and each one's rates in run order, so that every sum adds in
    the order a loop over the samples would."""
    ids: list[list[str]] = []
    rates: list[FloatArray] = []
    for lr in runs:
        w = lr.wer
        if w is None or lr.run.status != "ok" or lr.run.side != side:
            continue
        ok = w.success & ~np.isnan(w.wer)
        # `keep` is within this run's scored samples, so as many rows as `keep` are it.
        if keep is not None and int(ok.sum()) != len(keep):
            ok &= np.fromiter(map(keep.__contains__, w.ids), dtype=np.bool_, count=len(w.ids))
        ids.append(list(compress(w.ids, ok.tolist())))
        rates.append(w.wer[ok])
    if not sum(len(x) for x in ids):
        return None
    every = [i for part in ids for i in part]
    at = {i: k for k, i in enumerate(dict.fromkeys(every))}  # in the order first seen
    codes = np.fromiter(map(at.__getitem__, every), dtype=np.intp, count=len(every))
    values = np.concatenate(rates)[np.argsort(codes, kind="stable")]
    counts = np.bincount(codes, minlength=len(at))
    starts = np.cumsum(counts) - counts
    means = np.empty(len(at))
    # Samples with as many rates as each other side by side, one row each: a row's sum
    # is then what np.mean of that sample's own list sums (reduceat sums differently).
    for c in np.unique(counts).tolist():
        these = np.flatnonzero(counts == c)
        means[these] = values[starts[these, None] + np.arange(c)].sum(axis=1) / c
    return _SideRates(float(np.mean(values)), at, means)


def _accuracy(src: Source, policy: Policy) -> list[Finding]:
    """A WER (CER) rise past the guard, over the samples both sides scored."""
    out: list[Finding] = []
    for (mode, conc), runs in _configs(src).items():
        keep = common_scored(runs)
        measure = "WER"
        for lr in runs:
            if lr.wer is not None and lr.run.status == "ok":
                measure = lr.wer.measure.upper()
        base = _scored_rates(runs, "base", keep)
        head = _scored_rates(runs, "head", keep)
        if base is None or head is None:
            continue
        bm, hm = base.mean, head.mean
        common = sorted(base.at.keys() & head.at.keys())
        p = None
        if len(common) >= 10:
            d = head.of(common) - base.of(common)
            if np.any(d != 0):
                p = float(stats.wilcoxon(d, alternative="greater").pvalue)
        if hm - bm > policy.wer_increase_max and (p is None or p < policy.alpha):
            out.append(
                _f(
                    "accuracy-regression",
                    "error",
                    f"{measure} rose from {100 * bm:.2f}% to "
                    f"{100 * hm:.2f}% at {_cfg(mode, conc)} ({100 * (hm - bm):+.2f} pp; "
                    f"guard {100 * policy.wer_increase_max:.2f} pp"
                    + (f", paired p = {p:.2g}" if p is not None else "")
                    + ").",
                    src,
                    [lr.run.id for lr in runs],
                    base_wer=round(bm, 6),
                    head_wer=round(hm, 6),
                    p=p,
                )
            )
    return out
