"""Overall and per-GPU verdicts and the claim status, exactly as docs/statistics.md defines them."""

from __future__ import annotations

from typing import Protocol

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
from evidence.policy import Lead


def decide(
    rows: list[StudyRow], findings: list[Finding], lead: Lead | None = None
) -> tuple[Overall, str]:
    """invalid > regressed (primary or guard) > improved > inconclusive > no-change.

    No change means every primary row is equivalent (its interval inside ± the
    threshold); a primary row whose interval is too wide, or whose change the null
    control matched (`StudyRow.demoted_from`), makes the study inconclusive. Guards only
    lower the verdict. The words cite the `lead` row (the claim's, or `headline:`) when it
    is among the rows that decide the verdict, so that they hold still from commit to
    commit; else the deciding row with the most evidence.
    """
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        codes = sorted({f.code for f in errors})
        return "invalid", f"the raw-record audit found errors ({', '.join(codes)})"
    reg = [r for r in rows if r.primary and r.verdict == "regressed"]
    if reg:
        r = _pick(reg, lead)
        return "regressed", f"{_where(r)}: {r_label(r)} regressed {_fmt(r.delta_pct)}"
    guards = [r for r in rows if r.guard_failed]
    if guards:
        g = guards[0]
        return "regressed", (
            f"{_where(g)}: guard {g.label} {'rose' if g.better == 'lower' else 'fell'} "
            f"{g.delta_pct:+.1f}%, past its threshold"
        )
    imp = [r for r in rows if r.primary and r.verdict == "improved"]
    if imp:
        # The row with the most evidence, as the headline: not the largest point
        # estimate, which is usually the noisiest setting's.
        best = _pick(imp, lead)
        return "improved", f"{_where(best)}: {r_label(best)} {_fmt(best.delta_pct)}"
    prim = [r for r in rows if r.primary]
    if not prim:
        return "inconclusive", "no primary figure could be compared"
    wide = [r for r in prim if r.verdict != "no-change"]
    demoted = [r for r in wide if r.demoted_from is not None]
    if demoted:
        r = _pick(demoted, lead)
        why = (
            "the runner's sequential test, which allows for its looks after every pair, "
            "stopped without deciding it"
            if r.demoted_by == "sequential"
            else "the null control (base against base) moved as much there"
        )
        return "inconclusive", (
            f"{_where(r)}: {r_label(r)} {fmt_change(r)} would read {r.demoted_from}, but {why}"
        )
    if wide:
        r = _pick(wide, lead)
        # What this row could have detected: the least sensitive row's figure would
        # overstate what the run can tell, and another row's would not be this one's.
        tail = f"; the run could have detected about ±{r.mde_pct:.1f}%" if r.mde_pct else ""
        n = f" (and {len(wide) - 1} more primary figure{'s' if len(wide) > 2 else ''})"
        return "inconclusive", (
            f"{_where(r)}: {r_label(r)} {fmt_change(r)} is too wide to tell a change of "
            f"{threshold_text(r)} from none{n if len(wide) > 1 else ''}{tail}"
        )
    r = _pick(prim, lead) if lead else prim[0]
    return "no-change", (
        f"every primary figure is within {threshold_text(r)} (equivalent), its 95% interval "
        "inside the threshold"
    )


def threshold_text(r: StudyRow) -> str:
    """The threshold that decides a row: "±3.0%", or "±0.01 absolute" for a rate."""
    if r.threshold_abs is not None:
        return f"±{r.threshold_abs:g} absolute"
    if r.threshold_pct is not None:
        return f"±{r.threshold_pct:.1f}%"
    return "the threshold"


class _Change(Protocol):
    """A change with its 95% interval: a study row or a null control's row."""

    @property
    def delta_pct(self) -> float | None: ...
    @property
    def ci_low_pct(self) -> float | None: ...
    @property
    def ci_high_pct(self) -> float | None: ...


def fmt_change(r: _Change) -> str:
    """The change and its 95% interval: "+4.1% [+2.0%, +6.2%]"."""
    if r.delta_pct is None:
        return "(no figure)"
    if r.ci_low_pct is None or r.ci_high_pct is None:
        return f"{r.delta_pct:+.1f}% (no interval)"
    return f"{r.delta_pct:+.1f}% [{r.ci_low_pct:+.1f}%, {r.ci_high_pct:+.1f}%]"


def _width(r: StudyRow) -> float:
    if r.ci_low_pct is None or r.ci_high_pct is None:
        return float("inf")
    return r.ci_high_pct - r.ci_low_pct


def _most_evidence(rows: list[StudyRow]) -> StudyRow:
    """The row with the most evidence: the narrowest interval, then the most rounds."""
    return min(rows, key=lambda r: (_width(r), -(r.n_base + r.n_head)))


def _pick(rows: list[StudyRow], lead: Lead | None) -> StudyRow:
    """The lead's row among `rows` when there is one, else the one with most evidence."""
    led = [r for r in rows if lead and lead.matches(r.gpu, r.metric, r.mode, r.concurrency)]
    return _most_evidence(led or rows)


def _where(r: StudyRow) -> str:
    return f"{r.gpu} {r.mode} c={r.concurrency}"


def r_label(r: StudyRow) -> str:
    return r.label


def per_gpu(
    rows: list[StudyRow], findings: list[Finding], gpu: str, lead: Lead | None = None
) -> tuple[Overall, str]:
    return decide(
        [r for r in rows if r.gpu == gpu], [f for f in findings if f.gpu in (gpu, None)], lead
    )


# The verdict a GPU's rows add up to, worst first (as `decide` ranks them).
_RANK = ("regressed", "improved", "inconclusive", "no-change")


def headline(rows: list[StudyRow], gpu: str, lead: Lead | None = None) -> Headline | None:
    """The primary row a maintainer should read first: among the rows of the verdict they
    add up to, the one with the most evidence (narrowest interval, then most rounds), not
    the largest point estimate, which is often the noisiest setting's; the `lead`'s row
    when it is one of them. When a failed guard decided the verdict (no primary row
    regressed), the guard's row."""
    prim = [r for r in rows if r.gpu == gpu and r.primary]
    if not prim:
        return None
    verdict = next(v for v in _RANK if any(r.verdict == v for r in prim))
    r = _pick([r for r in prim if r.verdict == verdict], lead)
    guards = [g for g in rows if g.gpu == gpu and g.guard_failed]
    if verdict != "regressed" and guards:
        # A guard decided the verdict (as in `decide`): its row is what the verdict
        # rests on, not a primary row whose figure would contradict it.
        r = guards[0]
    return Headline(
        guard=r.guard_failed,
        metric=r.metric,
        mode=r.mode,
        concurrency=r.concurrency,
        delta_pct=r.delta_pct,
        ci_low_pct=r.ci_low_pct,
        ci_high_pct=r.ci_high_pct,
        verdict=r.verdict,
        threshold_pct=r.threshold_pct,
        threshold_abs=r.threshold_abs,
    )


def _row_status(r: StudyRow, claimed: float) -> ClaimStatus:
    if r.verdict == "inconclusive":
        return "inconclusive"
    if r.verdict != "improved" or r.ci_low_pct is None or r.ci_high_pct is None:
        return "not-reproduced"
    if r.ci_low_pct <= claimed <= r.ci_high_pct:
        return "confirmed"
    # Interval wholly on the worse side of the claim: the gain is real but smaller.
    worse = r.ci_high_pct < claimed if r.better == "higher" else r.ci_low_pct > claimed
    return "weakened" if worse else "confirmed"


_VERB: dict[ClaimStatus, str] = {
    "confirmed": "holds",
    "weakened": "is weakened",
    "not-reproduced": "is not reproduced",
    "inconclusive": "can be neither confirmed nor ruled out",
    "none": "",
}
_ROW_WORDS: dict[ClaimStatus, str] = {
    "confirmed": "confirms it",
    "weakened": "falls short of it",
    "not-reproduced": "does not reproduce it",
    "inconclusive": "is too wide to tell",
    "none": "",
}


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
    if claim.gpu:
        # Judged on the GPU it names: another GPU's figure neither holds nor weakens it.
        sel = [r for r in sel if r.gpu == claim.gpu]
        if not sel:
            at = f" at c={claim.concurrency}" if claim.concurrency is not None else ""
            base.message = (
                f"The claim of {label} {claim.delta_pct:+.1f}% ({claim.mode}) on "
                f"{claim.gpu}{at} is not reproduced: this verification did not measure it there."
            )
            return base
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
    elif "inconclusive" in statuses:
        base.status = "inconclusive"
    measured_on = sorted({r.gpu for r in sel})
    if claim.gpu:
        where = f" on {claim.gpu}"
    else:
        where = f" on {measured_on[0]}" if len(measured_on) == 1 else ""
    one_gpu = len(measured_on) == 1
    mixed = len(statuses) > 1
    parts = [
        f"{_fmt(c.delta_pct)} [{_fmt(c.ci_low_pct)}, {_fmt(c.ci_high_pct)}] at "
        f"c={c.concurrency}"
        + ("" if one_gpu else f" on {c.gpu}")
        + (f", which {_ROW_WORDS[c.status]}" if mixed else "")
        for c in base.rows
    ]
    measured_text = f": measured {_and(parts)}" if parts else ": no row was measured"
    base.message = (
        f"The claim of {label} {claim.delta_pct:+.1f}% ({claim.mode}) "
        f"{_VERB[base.status]}{where}{measured_text}."
    )
    return base


def _and(parts: list[str]) -> str:
    """Parts joined: "a and b"; "a; b; and c" (parts hold commas)."""
    if len(parts) <= 2:
        return " and ".join(parts)
    return "; ".join(parts[:-1]) + "; and " + parts[-1]


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
