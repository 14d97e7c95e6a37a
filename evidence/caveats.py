"""Plain-language caveats: what a maintainer should know before trusting the headline."""

from __future__ import annotations

from evidence.load import Source
from evidence.model import AttributionEntry, Candidate, Finding, StudyRow
from evidence.render import fmt_interval, fmt_value


def _fmt_rows(rows: list[StudyRow]) -> list[str]:
    out = []
    for r in rows:
        mode = "streaming" if r.mode == "streaming" else r.mode
        word = "rose" if (r.delta_pct or 0) > 0 else "fell"
        interval = (
            f" {fmt_interval(r.ci_low_pct, r.ci_high_pct)}"
            if r.ci_low_pct is not None and r.ci_high_pct is not None
            else " (no interval)"
        )
        out.append(
            f"{r.gpu} {mode} {r.label} at c={r.concurrency} {word} "
            f"{abs(r.delta_pct or 0):.1f}%{interval}."
        )
    return out


def write_caveats(
    sources: list[Source],
    rows: list[StudyRow],
    findings: list[Finding],
    candidate: Candidate | None,
    attribution: list[AttributionEntry],
    missing: dict[str, str] | None = None,
) -> list[str]:
    out = [f"No evidence from {gpu}: {why}." for gpu, why in sorted((missing or {}).items())]
    for f in findings:
        if f.severity == "error":
            out.append(f"Audit error ({f.code}): {f.message}")
    # Secondary rows that regressed are a cost even when the primary figure improved.
    regress = [
        r
        for r in rows
        if not r.primary
        and r.verdict == "regressed"
        and r.metric not in ("startup_s", "peak_vram_mib")
    ]
    out += _fmt_rows(regress)
    for metric, what in (("startup_s", "Server start-up"), ("peak_vram_mib", "Peak VRAM")):
        changed = [r for r in rows if r.metric == metric and r.verdict == "regressed"]
        if changed:
            r = max(changed, key=lambda x: x.delta_pct or 0)
            unit = "s" if metric == "startup_s" else "MiB"
            out.append(
                f"{what} grew {r.delta_pct:+.1f}% on {r.gpu} ({fmt_value(r.base, unit)} → "
                f"{fmt_value(r.head, unit)})."
            )
    for f in findings:
        if f.code in ("low-baseline", "environment-mismatch") and f.severity == "warning":
            out.append(f.message)
    if any(not s.per_request for s in sources):
        out.append(
            "Part of this evidence has per-run aggregates only: no per-request audit "
            "was possible for it."
        )
    if candidate is not None:
        out += [f"Declared by the candidate: {c}" for c in candidate.caveats]
        changes = [
            c for c in candidate.default_behavior_changes if not c.lower().startswith("none")
        ]
        out += [f"Default behaviour changes: {c}" for c in changes]
    if attribution:
        prs = ", ".join(f"#{a.number} ({a.title})" for a in attribution)
        out.append(f"Not all of this range is the candidate: it also includes {prs}.")
    return out
