"""Overall and per-GPU verdicts and the claim status, exactly as statistics.md defines them."""

from __future__ import annotations

from evidence.metrics import BY_NAME, canonical
from evidence.model import (
    ClaimResult,
    ClaimRowResult,
    ClaimSpec,
    ClaimStatus,
    Finding,
    Headline,
    Overall,
    StudyRow,
)


def decide(rows: list[StudyRow], findings: list[Finding]) -> tuple[Overall, str]:
    """invalid > regressed (primary or guard) > improved > no-change; guards only lower."""
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        codes = sorted({f.code for f in errors})
        return "invalid", f"the raw-record audit found errors ({', '.join(codes)})"
    reg = [r for r in rows if r.primary and r.verdict == "regressed"]
    if reg:
        return "regressed", f"{_where(reg[0])}: {r_label(reg[0])} regressed"
    guards = [r for r in rows if r.guard_failed]
    if guards:
        g = guards[0]
        return "regressed", (
            f"{_where(g)}: guard {g.label} {'rose' if g.better == 'lower' else 'fell'} "
            f"{g.delta_pct:+.1f}%, past its threshold"
        )
    imp = [r for r in rows if r.primary and r.verdict == "improved"]
    if imp:
        best = max(imp, key=lambda r: abs(r.delta_pct or 0))
        return "improved", f"{_where(best)}: {r_label(best)} {best.delta_pct:+.1f}%"
    prim = [r for r in rows if r.primary]
    if not prim:
        return "no-change", "no primary figure could be compared"
    mde = [r.mde_pct for r in prim if r.mde_pct is not None]
    tail = f"; the run could have detected about ±{min(mde):.1f}%" if mde else ""
    return "no-change", f"no primary figure moved past the threshold{tail}"


def _where(r: StudyRow) -> str:
    return f"{r.gpu} {r.mode} c={r.concurrency}"


def r_label(r: StudyRow) -> str:
    return r.label


def per_gpu(rows: list[StudyRow], findings: list[Finding], gpu: str) -> tuple[Overall, str]:
    return decide([r for r in rows if r.gpu == gpu], [f for f in findings if f.gpu in (gpu, None)])


def headline(rows: list[StudyRow], gpu: str) -> Headline | None:
    """The primary row a maintainer should read first: the largest significant move."""
    prim = [r for r in rows if r.gpu == gpu and r.primary]
    if not prim:
        return None
    ranked = sorted(prim, key=lambda r: (r.verdict == "no-change", -abs(r.delta_pct or 0)))
    r = ranked[0]
    return Headline(
        metric=r.metric,
        mode=r.mode,
        concurrency=r.concurrency,
        delta_pct=r.delta_pct,
        ci_low_pct=r.ci_low_pct,
        ci_high_pct=r.ci_high_pct,
        verdict=r.verdict,
    )


def _row_status(r: StudyRow, claimed: float) -> ClaimStatus:
    if r.verdict != "improved" or r.ci_low_pct is None or r.ci_high_pct is None:
        return "not-reproduced"
    if r.ci_low_pct <= claimed <= r.ci_high_pct:
        return "confirmed"
    # Interval wholly on the worse side of the claim: the gain is real but smaller.
    worse = r.ci_high_pct < claimed if r.better == "higher" else r.ci_low_pct > claimed
    return "weakened" if worse else "confirmed"


def judge_claim(rows: list[StudyRow], claim: ClaimSpec | None, measured: bool) -> ClaimResult:
    if claim is None:
        return ClaimResult(
            status="none",
            message="No claim was made; the study judges request throughput everywhere.",
        )
    metric = canonical(claim.metric)
    label = BY_NAME[metric].label if metric in BY_NAME else metric
    base = ClaimResult(
        status="not-reproduced",
        message="",
        metric=metric,
        mode=claim.mode,
        gpu=claim.gpu,
        claimed_delta_pct=claim.delta_pct,
    )
    if not measured:
        base.message = (
            f"The claim ({label} {claim.delta_pct:+.1f}%, {claim.mode}) was not "
            "measured by this verification, so it is not reproduced."
        )
        return base
    sel = [
        r
        for r in rows
        if r.metric == metric
        and r.primary
        and (claim.concurrency is None or r.concurrency == claim.concurrency)
    ]
    on_gpu = [r for r in sel if claim.gpu and r.gpu == claim.gpu]
    sel = on_gpu or sel
    base.rows = [
        ClaimRowResult(
            gpu=r.gpu,
            concurrency=r.concurrency,
            status=_row_status(r, claim.delta_pct),
            delta_pct=r.delta_pct,
            ci_low_pct=r.ci_low_pct,
            ci_high_pct=r.ci_high_pct,
        )
        for r in sel
    ]
    statuses = {c.status for c in base.rows}
    if statuses and statuses <= {"confirmed"}:
        base.status = "confirmed"
    elif statuses & {"confirmed", "weakened"}:
        base.status = "weakened"
    where = (
        f" on {claim.gpu}"
        if on_gpu
        else (
            f" (claimed on {claim.gpu}, measured on {', '.join(sorted({r.gpu for r in sel}))})"
            if claim.gpu
            else ""
        )
    )
    ranges = "; ".join(
        f"c={c.concurrency} {c.gpu}: {_fmt(c.delta_pct)} [{_fmt(c.ci_low_pct)}, "
        f"{_fmt(c.ci_high_pct)}] {c.status}"
        for c in base.rows
    )
    verb = {"confirmed": "holds", "weakened": "is weakened", "not-reproduced": "is not reproduced"}[
        base.status
    ]
    base.message = (
        f"The claim of {label} {claim.delta_pct:+.1f}% ({claim.mode}) {verb}{where}: {ranges}."
    )
    return base


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1f}%"


def void_if_invalid(result: ClaimResult, verdict: Overall) -> ClaimResult:
    """No claim holds on records that fail the audit: the measurement is kept, as context."""
    if verdict != "invalid" or result.status not in ("confirmed", "weakened"):
        return result
    return result.model_copy(
        update={
            "status": "not-reproduced",
            "message": "The study is invalid (the raw-record audit found errors), so the claim "
            f"is not reproduced. For reference only: {result.message}",
        }
    )
