"""Build the evidence for one verification: read, audit, study, judge, explain, render.

This is the engine's one entry point (the CLI and the App both call `build` and then
`write`); it knows nothing of GitHub beyond the URL of compare links.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from evidence.audit import audit, host_cpu
from evidence.caveats import write_caveats
from evidence.control import control_result, control_rows, demote
from evidence.cost import cost_of
from evidence.design import design_result
from evidence.errors import InputError, NotOneVerification
from evidence.limits import DEFAULT, Limits
from evidence.links import links, measured_by_runner, reproduce
from evidence.load import Source, format_validation, load
from evidence.metrics import canonical
from evidence.model import (
    Adaptive,
    AdaptiveResult,
    AdaptiveRowResult,
    AttributionEntry,
    Candidate,
    ClaimSpec,
    Evidence,
    Finding,
    GpuResult,
    HistoryEntry,
    RoundValue,
)
from evidence.policy import Lead, Policy
from evidence.study import build_study
from evidence.verdict import decide, headline, judge_claim, per_gpu, void_if_invalid

T = TypeVar("T")


@dataclass
class Inputs:
    bundles: list[Path]
    candidate: Candidate | None = None
    history: list[HistoryEntry] = field(default_factory=list)
    attribution: list[AttributionEntry] = field(default_factory=list)
    # GPU kinds of the verification that produced no bundle, and why (the App's words).
    missing: dict[str, str] = field(default_factory=dict)
    policy: Policy = field(default_factory=Policy)
    github_url: str = "https://github.com"
    public_url: str | None = None
    # How much input is read at most (evidence.limits).
    limits: Limits = DEFAULT


def read_json_file(path: Path, model: type[T] | Any) -> T:
    """Validate a side file against `model`; InputError names the file and the field."""
    if path.exists() and not path.is_file():  # a FIFO would be waited on forever
        raise InputError(str(path), "not a regular file")
    try:
        raw = orjson.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise InputError(str(path), "no such file") from exc
    except orjson.JSONDecodeError as exc:
        raise InputError(str(path), f"not valid JSON ({exc})") from exc
    try:
        if isinstance(model, type) and issubclass(model, BaseModel):
            return model.model_validate(raw)  # type: ignore[return-value]
        return TypeAdapter(model).validate_python(raw)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise InputError(str(path), format_validation(exc)) from exc


def build(inputs: Inputs) -> tuple[Evidence, list[Source]]:
    if not inputs.bundles:
        raise InputError("(arguments)", "give at least one bundle")
    sources = [load(p, inputs.limits) for p in inputs.bundles]
    one_verification(sources)
    cand = inputs.candidate
    policy = inputs.policy
    claim = cand.claim if cand else None
    rows, measured = build_study(sources, policy, claim)
    pmetric = next((r.metric for r in rows if r.primary), "throughput_qps")
    controls = control_rows(sources, policy, pmetric)
    demote(rows, controls)
    findings = audit(sources, policy, inputs.history, controls)
    if claim is not None and not measured:
        findings.append(
            Finding(
                code="claim-not-measured",
                severity="warning",
                message=f"The claim's metric {claim.metric} ({claim.mode}) "
                "was not measured; request throughput was judged instead.",
            )
        )
    findings += _candidate_mismatch(cand, sources)
    lead = lead_of(policy, claim)
    verdict, reason = decide(rows, findings, lead)
    claim_result = void_if_invalid(judge_claim(rows, claim, measured), verdict)
    gpus: dict[str, GpuResult] = {}
    for src in sources:
        v, why = per_gpu(rows, findings, src.gpu, lead)
        claim_gpu = void_if_invalid(
            judge_claim([r for r in rows if r.gpu == src.gpu], claim, measured), v
        )
        gpus[src.gpu] = GpuResult(
            verdict=v,
            reason=why,
            headline=headline(rows, src.gpu, lead),
            # A claim that names another GPU has no status here.
            claim_status=claim_gpu.status
            if claim and (claim.gpu is None or claim.gpu == src.gpu)
            else "none",
            fingerprint=src.manifest.environment,
            startup_s=_side_means(src, "startup_s"),
            peak_vram_mib=_side_means(src, "peak_vram_mib"),
            runner=(src.manifest.runner or {}).get("name"),
            rounds_per_side=max(
                (r.n_base for r in rows if r.gpu == src.gpu and r.primary), default=0
            ),
            per_request_audit=src.per_request,
            adaptive=_adaptive(src.manifest.adaptive),
            gpu_minutes=src.manifest.gpu_minutes,
            design=design_result(src.manifest),
            host_cpu=host_cpu(src, policy),
            control=control_result(src, controls),
            measured=measured_by_runner(src),
            cost=cost_of(src),
        )
    m = sources[0].manifest
    ev = Evidence(
        verdict=verdict,
        reason=reason,
        verification_id=m.verification_id,
        repo=m.repo,
        task=m.task,
        base_sha=m.base.sha,
        head_sha=m.head.sha,
        head_repo=m.head.repo,
        threshold_pct=policy.threshold_pct,
        max_rounds=policy.max_rounds,
        gpus=gpus,
        audit=findings,
        study=rows,
        caveats=write_caveats(sources, rows, findings, cand, inputs.attribution, inputs.missing),
        claim=claim_result,
        rounds=_rounds(sources),
        links=links(inputs.github_url, sources),
        attribution=inputs.attribution,
        missing=inputs.missing,
        reproduce=reproduce(
            inputs.github_url, sources, max((g.rounds_per_side for g in gpus.values()), default=0)
        ),
        candidate=cand.model_dump(mode="json") if cand else None,
        inputs=[s.path for s in sources],
        per_request_audit=all(s.per_request for s in sources),
    )
    return ev, sources


def lead_of(policy: Policy, claim: ClaimSpec | None) -> Lead | None:
    """The row the verdict's words lead with: `headline:` of `.github/rsi.yml`, else the
    claim's GPU, metric, mode and concurrency, else none (the most evidence leads)."""
    if policy.lead is not None:
        return policy.lead
    if claim is None:
        return None
    return Lead(
        gpu=claim.gpu,
        metric=canonical(claim.metric),
        mode=None if claim.mode == "unspecified" else claim.mode,
        concurrency=claim.concurrency,
    )


def one_verification(sources: list[Source]) -> None:
    """Bundles of different verifications, or two for one GPU kind, are not evidence of
    anything: NotOneVerification names the bundles and what differs."""
    seen: dict[str, str] = {}
    for s in sources:
        key = s.gpu.upper()
        if key in seen:
            raise NotOneVerification(
                s.path,
                f"a second bundle for GPU {s.gpu} (the first is {seen[key]}); "
                "a verification has one bundle per GPU kind",
            )
        seen[key] = s.path
    first = sources[0]
    m0 = first.manifest
    for s in sources[1:]:
        m = s.manifest
        for label, a, b in (
            ("verification", m.verification_id, m0.verification_id),
            ("repository", m.repo, m0.repo),
            ("base commit", m.base.sha, m0.base.sha),
            ("head commit", m.head.sha, m0.head.sha),
        ):
            if a != b:
                raise NotOneVerification(
                    s.path,
                    f"is for {label} {a}, {first.path} for {b}: bundles of different "
                    "verifications cannot be compared",
                )


def _adaptive(a: Adaptive | None) -> AdaptiveResult | None:
    """What the evidence says of the runner's sequential decision."""
    if a is None:
        return None
    return AdaptiveResult(
        method=a.method,
        stopped=a.stopped,
        threshold_pct=a.threshold_pct,
        max_rounds=a.max_rounds,
        gpu_minutes_budget=a.gpu_minutes_budget,
        rows=[
            AdaptiveRowResult(
                row=name, verdict=r.verdict, stopped=r.stopped, rounds=r.rounds, reason=r.reason
            )
            for name, r in a.rows.items()
        ],
    )


def _side_means(src: Source, metric: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for side in ("base", "head"):
        v = [lr.metrics.get(metric) for lr in src.runs if lr.run.side == side and lr.usable]
        vals = [x for x in v if x is not None]
        out[side] = sum(vals) / len(vals) if vals else None
    return out


def _rounds(sources: list[Source]) -> list[RoundValue]:
    return [
        RoundValue(
            gpu=s.gpu,
            mode=lr.run.mode,
            concurrency=lr.run.concurrency,
            side=lr.run.side,
            round=lr.run.round,
            order=lr.order,
            run_id=lr.run.id,
            throughput_qps=lr.metrics.get("throughput_qps"),
            status=lr.run.status,
        )
        for s in sources
        for lr in s.runs
    ]


def _candidate_mismatch(cand: Candidate | None, sources: list[Source]) -> list[Finding]:
    """The candidate must be the one the bundles measured (same repo and commits)."""
    if cand is None:
        return []
    out = []
    for s in sources:
        m = s.manifest
        if s.kind != "bundle":
            continue
        wrong = [
            (k, a, b)
            for k, a, b in (
                ("repo", cand.repo, m.repo),
                ("base", cand.base_sha, m.base.sha),
                ("head", cand.head.sha, m.head.sha),
            )
            if a != b
        ]
        if wrong:
            out.append(
                Finding(
                    code="bundle-invalid",
                    severity="error",
                    gpu=s.gpu,
                    message=f"{s.path} measured a different change than the "
                    "candidate: "
                    + ", ".join(f"{k} {b} (candidate: {a})" for k, a, b in wrong)
                    + ".",
                )
            )
    return out


def write(
    ev: Evidence,
    sources: list[Source],
    out: Path,
    public_url: str | None,
    *,
    plot_url: Callable[[str], str] | None = None,
    report_url: str | None = None,
) -> None:
    """Write evidence.json, evidence.md, check.md, pr-body.md, report.html and plots/.

    Links default to `public_url` (where DIR is served); the App passes `plot_url` and
    `report_url` instead, to hand out signed URLs.
    """
    from evidence.plots import make_plots
    from evidence.render import render_check, render_comment, render_pr_section, render_report

    out.mkdir(parents=True, exist_ok=True)
    cand = (
        Candidate.model_validate(ev.candidate, context={"stored": True}) if ev.candidate else None
    )
    ev.plots = make_plots(ev, sources, cand, out, public_url)
    if plot_url is not None:
        for plot in ev.plots:
            plot.url = plot_url(plot.name)
    if report_url is None and public_url:
        report_url = f"{public_url.rstrip('/')}/report.html"
    (out / "evidence.md").write_text(render_comment(ev, report_url), encoding="utf-8")
    (out / "check.md").write_text(render_check(ev, report_url), encoding="utf-8")
    (out / "pr-body.md").write_text(render_pr_section(ev, report_url), encoding="utf-8")
    (out / "report.html").write_text(render_report(ev, out), encoding="utf-8")
    (out / "evidence.json").write_bytes(
        orjson.dumps(
            ev.model_dump(mode="json", by_alias=True),
            option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY,
        )
    )
