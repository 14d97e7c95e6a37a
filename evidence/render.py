"""Render an Evidence as the PR comment, the check-run summary, the PR-body section and
the self-contained HTML report.

Templates (`pr_templates/`) only render. Every decision — grouping, ordering, which rows
are shown, what is left out when a text is too long for GitHub — is a small typed function
here, so it can be tested without parsing Markdown.

GitHub refuses a comment longer than 65,536 characters and a check-run summary longer
than 65,535. Both are rendered at decreasing levels of detail until one fits; the last
resort cuts the text at a line break and closes what the cut left open. The report link
and the **Reproduce** section are rendered separately (`_tail.md.j2`) and are kept whole
at every level.
"""

from __future__ import annotations

import base64
import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from jinja2 import Environment, PackageLoader, StrictUndefined, pass_context, select_autoescape
from jinja2.runtime import Context
from markupsafe import Markup

from evidence import design, inert
from evidence.metrics import BY_NAME
from evidence.model import (
    ControlResult,
    ControlRow,
    DesignServerResult,
    Evidence,
    Finding,
    Headline,
    HostCpu,
    Measured,
    Plot,
    RoundValue,
    Severity,
    StudyRow,
)

COMMENT_MARKER = "<!-- rsi-bot:evidence -->"
SECTION_START = "<!-- rsi-bot:evidence-section:start -->"
SECTION_END = "<!-- rsi-bot:evidence-section:end -->"

COMMENT_LIMIT = 65_536  # GitHub: issue comment and PR body (bot.github.api cuts to it too)
CHECK_LIMIT = 65_535  # GitHub: check-run output summary and text
FINDINGS_PER_CODE = 3  # findings listed per code once the list must be capped
ITEMS_SHOWN = 5  # run ids / sample ids listed per finding in Markdown
CODES_SHOWN = 12  # codes named per severity in the audit summary counts

SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
_SEVERITY_TITLE = {"error": "Errors", "warning": "Warnings", "info": "Info"}
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- Jinja


def environment() -> Environment:
    """The one template environment of the project: the evidence's and the App's words
    share its filters, so a figure reads the same everywhere."""
    return _env()


@functools.cache
def _env() -> Environment:
    """The one template environment, created on first use.

    Every template is autoescaped, so a value a template interpolates is escaped unless
    it is marked safe (`Markup`: template text, macro output, the engine's formatted
    numbers, checked URLs and what `evidence.inert` returns). `*.html.j2` escapes for
    HTML (`select_autoescape(["html"])` alone matches only names that end in `.html`,
    so `html.j2` is listed too); `*.md.j2` escapes for GitHub Markdown through
    `_finalize`, which hands every value not marked safe to `inert.text` first.
    """
    env = Environment(
        loader=PackageLoader("pr_templates", ""),
        autoescape=select_autoescape(["html", "html.j2", "md.j2"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_finalize,
    )
    env.filters.update(
        {
            "pct": _safe(fmt_pct),
            "interval": _safe(fmt_interval),
            "duration": _safe(fmt_duration),
            "num": _safe(fmt_value),
            "p": _p,
            "nr": not_recorded,
            "cell": inert.text,
            "oneline": inert.text,
            "text": inert.text,
            "name": inert.name,
            "code": inert.code,
            "block": inert.block,
            "fenced": inert.fenced,
            "plain": inert.plain,
            "short": short_sha,
            "badge": badge,
            "claim_cell": claim_cell,
            "metric_label": metric_label,
            "headline": headline_text,
            "row_delta": _safe(row_delta),
            "row_ci": _safe(row_ci),
            "row_verdict": row_verdict,
            "row_threshold": _safe(row_threshold),
            "headline_threshold": _safe(headline_threshold),
            "row_p": _safe(row_p),
            "items": _items,
            "fence": _safe(fence),
            "plot_src": plot_src,
            "anchor": anchor,
            "href": inert.href,
        }
    )
    return env


@pass_context
def _finalize(context: Context, value: Any) -> Any:
    """What `{{ value }}` writes: in a Markdown template, untrusted text made inert unless
    it is already marked safe; in an HTML template, the value without control characters
    (autoescaping then escapes it for HTML)."""
    if hasattr(value, "__html__"):
        return value
    if (context.name or "").endswith(".md.j2"):
        return inert.text(value)
    if isinstance(value, str):
        return inert.clean(value, lines=True)
    return value


def _safe(fn: Callable[..., str]) -> Callable[..., Markup]:
    """A filter of the engine's own formatting (numbers, intervals): its text is safe."""

    @functools.wraps(fn)
    def safe(*args: Any, **kwargs: Any) -> Markup:
        return Markup(fn(*args, **kwargs))

    return safe


def _p(x: float | int | str | None) -> str:
    """`fmt_p` as a filter: a number is the engine's (safe); a string came with the
    finding and is escaped like any other value."""
    return x if isinstance(x, str) else Markup(fmt_p(x))


def _items(items: list[str], n: int = ITEMS_SHOWN) -> Markup:
    """`short_list` as a filter, each item an inert name."""
    return Markup(short_list([str(inert.name(i)) for i in items], n))


def _render(template: str, **context: Any) -> str:
    return _env().get_template(template).render(**context)


def macro(template: str, name: str, /, *args: Any, **kwargs: Any) -> str:
    """What macro `name` of `template` says with `args`, without the white space around
    it: a message is a macro, so its words stay in `pr_templates/`."""
    return str(getattr(_module(template), name)(*args, **kwargs)).strip()


@functools.cache
def _module(template: str) -> Any:
    return _env().get_template(template).module


def _render_md(template: str, **context: Any) -> str:
    return tidy_markdown(_render(template, **context))


def tidy_markdown(text: str) -> str:
    """One blank line at most between blocks (code blocks kept as they are), one final
    newline. Templates stay readable without fighting Jinja's whitespace rules."""
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        fence, changed = _fence_step(fence, line)
        if not changed and fence is None and not line.strip() and (not out or not out[-1].strip()):
            continue
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + "\n"


_FENCE = re.compile(r"^ {0,3}(`{3,})[^`]*$")
_FENCE_END = re.compile(r"^ {0,3}(`{3,})\s*$")


def _fence_step(fence: str | None, line: str) -> tuple[str | None, bool]:
    """The open code fence after `line` (None outside a code block), and whether `line`
    opened or closed one. A fence closes only with at least as many backticks, as in
    CommonMark, so a shorter run inside a log or command is text."""
    if fence is None:
        m = _FENCE.match(line)
        return (m.group(1), True) if m else (None, False)
    m = _FENCE_END.match(line)
    if m and len(m.group(1)) >= len(fence):
        return None, True
    return fence, False


# ------------------------------------------------------------------------ formatting


def fmt_pct(x: float | None) -> str:
    """A relative change: "+5.2%", "-0.4%", "n/a"; never "-0.0%"."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if round(x, 1) == 0:
        return "+0.0%"
    return f"{x:+.1f}%"


def fmt_duration(seconds: float | None) -> str:
    """A span of time as people say it: "45 s", "12 min", "2.5 h"."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "n/a"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def fmt_interval(lo: float | None, hi: float | None) -> str:
    """A 95% interval of a relative change: "[+1.0%, +9.8%]", or "n/a". An interval
    that excludes 0 (improved, regressed) never prints as reaching it: a bound that would
    round to 0.0% gets more digits ("[-27.0%, -0.04%]"), or reads "-<0.0001%"."""
    if lo is None or hi is None:
        return "n/a"
    excludes = (lo > 0 and hi > 0) or (lo < 0 and hi < 0)
    return f"[{_bound(lo, excludes)}, {_bound(hi, excludes)}]"


def _bound(x: float, excludes_zero: bool) -> str:
    if not excludes_zero or not math.isfinite(x) or round(x, 1) != 0:
        return fmt_pct(x)
    for digits in (2, 3, 4):
        if round(x, digits) != 0:
            return f"{x:+.{digits}f}%"
    return ("-" if x < 0 else "+") + "<0.0001%"


def _sig3(x: float) -> str:
    """Three significant figures; thousands and more as whole numbers with separators."""
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def fmt_value(x: float | int | None, unit: str = "") -> str:
    """A measured value by its unit: "2.13 req/s", "0.120 s", "60,966 MiB", "0.0124"."""
    if x is None:
        return "n/a"
    if not math.isfinite(x):
        return str(x)
    text = f"{x:,.0f}" if unit == "MiB" else _sig3(float(x))
    return f"{text} {unit}" if unit else text


def fmt_signed(x: float | None, unit: str = "") -> str:
    """An absolute change: "+0.00083", "-1.20 s"; no change is "0"."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if x == 0:
        return "0"
    text = fmt_value(abs(x), unit)
    return ("-" if x < 0 else "+") + text


def fmt_p(x: float | int | str | None) -> str:
    """A p-value or any other number in a finding: compact, exact enough to check."""
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if isinstance(x, int):  # bool too
        return str(x)
    if not math.isfinite(x):
        return str(x)
    if x != 0 and abs(x) < 0.001:
        return f"{x:.2e}"
    return f"{x:.4g}"


def not_recorded(x: object) -> str:
    return "not recorded" if x is None or x == "" or x == [] else str(x)


def short_sha(sha: str | None) -> str:
    return "not recorded" if not sha else sha[:10]


def badge(word: str) -> str:
    """An emoji-free badge word: "IMPROVED", "NO-CHANGE", "NOT-REPRODUCED"."""
    return word.upper()


def claim_cell(status: str) -> str:
    """A GPU's claim status in a table: a dash where no claim was made on that GPU."""
    return "—" if status == "none" else status


def one_line(text: object) -> str:
    """Free text on one line, made inert for Markdown (`inert.text`)."""
    return str(inert.text(text))


def md_cell(text: object) -> str:
    """Free text in a Markdown table cell: one line, inert, pipes escaped."""
    return str(inert.text(text))


def fence(text: str) -> str:
    """A code fence longer than any run of backticks inside `text`."""
    return inert.fence_for(text)


def anchor(text: str) -> str:
    """An HTML id from free text."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def safe_href(url: str | None) -> str:
    """A link target for the report: http(s) only, so an input cannot smuggle in a
    `javascript:` URL."""
    return str(inert.href(url))


def metric_label(name: str) -> str:
    metric = BY_NAME.get(name)
    return metric.label if metric else name


def headline_text(h: Headline | None) -> str:
    """Which figure a GPU's verdict rests on: "throughput, streaming, c=4"."""
    if h is None:
        return "no primary figure"
    return f"{metric_label(h.metric)}, {h.mode}, c={h.concurrency}"


def short_list(items: list[str], n: int = ITEMS_SHOWN) -> str:
    """Items for one line: "a, b, c and 7 more"."""
    shown = ", ".join(items[:n])
    return f"{shown} and {len(items) - n} more" if len(items) > n else shown


def row_delta(r: StudyRow) -> str:
    """The change in the terms that decide the row: a rate judged against an absolute
    threshold (WER, failures) shows its absolute change, the relative one beside it;
    other figures their relative change."""
    if r.delta_abs is not None and (r.threshold_abs is not None or r.delta_pct is None):
        rel = f" ({fmt_pct(r.delta_pct)})" if r.delta_pct is not None else ""
        return fmt_signed(r.delta_abs, r.unit) + rel
    return fmt_pct(r.delta_pct)


def row_ci(r: StudyRow) -> str:
    """The 95% interval in the same terms as `row_delta`."""
    absolute = r.ci_low_abs is not None and r.ci_high_abs is not None
    if absolute and (r.threshold_abs is not None or r.ci_low_pct is None):
        return f"[{fmt_signed(r.ci_low_abs, r.unit)}, {fmt_signed(r.ci_high_abs, r.unit)}]"
    if r.ci_low_pct is not None and r.ci_high_pct is not None:
        return fmt_interval(r.ci_low_pct, r.ci_high_pct)
    return "n/a"


def row_verdict(r: StudyRow) -> str:
    """The row's verdict; a failed guard says so; an inconclusive primary row says the
    smallest change its rounds could have detected, or that the null control matched it."""
    if r.guard_failed:
        return "regressed, guard failed"
    if r.demoted_from is not None and r.demoted_by == "sequential":
        return f"inconclusive, {r.demoted_from} by its interval but not by the runner's looks"
    if r.demoted_from is not None:
        return f"inconclusive, {r.demoted_from} but no more than the null control"
    if r.primary and r.verdict == "inconclusive" and r.mde_pct is not None:
        return f"inconclusive, could detect ±{r.mde_pct:.1f}%"
    return r.verdict


def threshold_text(pct: float | None, absolute: float | None) -> str:
    """The change that counts: "±3.0%", or "±0.01 abs." for a rate judged as a difference."""
    if absolute is not None:
        return f"±{absolute:g} abs."
    if pct is not None:
        return f"±{pct:.1f}%"
    return "n/a"


def row_threshold(r: StudyRow) -> str:
    """What decides the row, written beside it: the threshold, and a guard's limit."""
    text = threshold_text(r.threshold_pct, r.threshold_abs)
    if r.guard and r.guard_pct is not None:
        text += f"; guard {r.guard_pct:g}%"
    return text


def headline_threshold(h: Headline | None) -> str:
    return "n/a" if h is None else threshold_text(h.threshold_pct, h.threshold_abs)


def row_p(r: StudyRow) -> str:
    """The row's p-value: Holm-adjusted for a primary row (it decides the verdict)."""
    if r.p_adjusted is not None:
        return f"{fmt_p(r.p_adjusted)} (Holm)"
    return fmt_p(r.p_value)


def plot_src(p: Plot) -> Markup:
    """Where a Markdown image points: the public URL, else the path beside the report."""
    return inert.href(p.url) if p.url else inert.relative(p.path)


# ------------------------------------------------------------------------- the views


def unit_of(ev: Evidence, gpu: str) -> str:
    """What one run of a GPU's bundle is: "round", or "burst" for an alternating design."""
    g = ev.gpus.get(gpu)
    return g.design.unit if g is not None and g.design is not None else "round"


@dataclass(frozen=True)
class ConfigView:
    """One GPU × mode × concurrency of the study, its rows split into shown and collapsed."""

    gpu: str
    mode: str
    concurrency: int
    n_base: int
    n_head: int
    rows: list[StudyRow]  # all, in the study's order
    key: list[StudyRow]  # shown in Markdown
    other: list[StudyRow]  # collapsed, or left out when the text must be short
    unit: str = "round"  # what one run is: "round", or "burst" for an alternating design
    pairs: int | None = None  # complete pairs compared, when the rows were paired

    @property
    def title(self) -> str:
        return f"{self.gpu} · {self.mode} · c={self.concurrency}"


def is_key_row(r: StudyRow) -> bool:
    """Rows a maintainer must see: the primary ones, the guards and anything regressed."""
    return r.primary or r.guard or r.verdict == "regressed"


def study_configs(
    rows: Iterable[StudyRow], units: Mapping[str, str] | None = None
) -> list[ConfigView]:
    """Rows grouped by configuration (GPU, mode, concurrency), in the study's own order;
    `units` names what one run of each GPU is (default: a round)."""
    groups: dict[tuple[str, str, int], list[StudyRow]] = {}
    for r in rows:
        groups.setdefault((r.gpu, r.mode, r.concurrency), []).append(r)
    return [
        ConfigView(
            gpu=gpu,
            mode=mode,
            concurrency=conc,
            n_base=max(r.n_base for r in rs),
            n_head=max(r.n_head for r in rs),
            rows=rs,
            key=[r for r in rs if is_key_row(r)],
            other=[r for r in rs if not is_key_row(r)],
            unit=(units or {}).get(gpu, "round"),
            pairs=max((r.pairs or 0 for r in rs if r.method == "paired"), default=None),
        )
        for (gpu, mode, conc), rs in groups.items()
    ]


@dataclass(frozen=True)
class CodeGroup:
    code: str
    findings: list[Finding]  # those shown
    more: int  # those left out of the list
    times: list[int] = field(default_factory=list)  # how many each shown one stands for

    @property
    def count(self) -> int:
        return sum(self.times) + self.more if self.times else len(self.findings) + self.more

    def repeats(self, i: int) -> int:
        return self.times[i] if i < len(self.times) else 1


@dataclass(frozen=True)
class SeverityGroup:
    severity: Severity
    codes: list[CodeGroup]
    more_codes: int = 0  # codes left out of the summary counts
    more_codes_count: int = 0  # findings under the codes left out

    @property
    def title(self) -> str:
        return _SEVERITY_TITLE[self.severity]

    @property
    def count(self) -> int:
        return sum(c.count for c in self.codes) + self.more_codes_count


def audit_groups(
    findings: Iterable[Finding],
    per_code: int | None = None,
    severities: Iterable[Severity] = SEVERITIES,
    codes_shown: int | None = None,
    *,
    merge: bool = False,
) -> list[SeverityGroup]:
    """Findings by severity (errors first), then by code in order of first appearance.

    `per_code` caps the findings listed under one code; `codes_shown` caps how many codes
    one severity names (for the summary counts); `merge` lists findings with the same code
    and message once, with how many they are and every GPU they came from (a comment is
    read, not searched: four identical warnings are one line).
    """
    by_sev: dict[Severity, dict[str, list[Finding]]] = {s: {} for s in severities}
    for f in findings:
        if f.severity in by_sev:
            by_sev[f.severity].setdefault(f.code, []).append(f)
    out = []
    for sev, codes in by_sev.items():
        if not codes:
            continue
        groups = []
        for code, fs in codes.items():
            shown, times = _merged(fs) if merge else (fs, [1] * len(fs))
            kept = shown[:per_code] if per_code is not None else shown
            groups.append(CodeGroup(code, kept, sum(times[len(kept) :]), times[: len(kept)]))
        more_codes, more_count = 0, 0
        if codes_shown is not None and len(groups) > codes_shown:
            left = groups[codes_shown:]
            groups = groups[:codes_shown]
            more_codes, more_count = len(left), sum(g.count for g in left)
        out.append(SeverityGroup(sev, groups, more_codes, more_count))
    return out


def _merged(fs: list[Finding]) -> tuple[list[Finding], list[int]]:
    """Findings of one code with the same message as one (GPUs, runs and samples joined,
    at most `ITEMS_SHOWN` of each), and how many each stands for."""
    by_message: dict[str, list[Finding]] = {}
    for f in fs:
        by_message.setdefault(f.message, []).append(f)
    out, times = [], []
    for same in by_message.values():
        first = same[0]
        if len(same) > 1:
            gpus = list(dict.fromkeys(f.gpu for f in same if f.gpu))
            runs = list(dict.fromkeys(r for f in same for r in f.runs))
            samples = list(dict.fromkeys(x for f in same for x in f.samples))
            first = first.model_copy(
                update={"gpu": ", ".join(gpus) or None, "runs": runs, "samples": samples}
            )
        out.append(first)
        times.append(len(same))
    return out, times


def severity_counts(findings: Iterable[Finding]) -> dict[Severity, int]:
    counts: dict[Severity, int] = dict.fromkeys(SEVERITIES, 0)
    for f in findings:
        counts[f.severity] += 1
    return counts


@dataclass(frozen=True)
class EnvRow:
    key: str
    base: str
    head: str
    differs: bool


@dataclass(frozen=True)
class EnvView:
    gpu: str
    runner: str | None
    rounds_per_side: int
    rows: list[EnvRow]
    unit: str = "round"

    @property
    def differs(self) -> list[str]:
        return [r.key for r in self.rows if r.differs]


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{key}."))
        elif isinstance(v, list | tuple):
            out[key] = ", ".join(str(x) for x in v)
        else:
            out[key] = not_recorded(v)
    return out


def environment_views(ev: Evidence) -> list[EnvView]:
    """Per GPU: every fingerprint field base against head, then start-up and peak VRAM."""
    views = []
    for gpu, g in ev.gpus.items():
        base = _flatten(g.fingerprint.get("base") or {})
        head = _flatten(g.fingerprint.get("head") or {})
        keys = list(base) + [k for k in head if k not in base]
        rows = [
            EnvRow(
                k,
                base.get(k, "not recorded"),
                head.get(k, "not recorded"),
                base.get(k) != head.get(k),
            )
            for k in keys
        ]
        rows.append(
            EnvRow(
                "server start-up (mean)",
                fmt_value(g.startup_s.get("base"), "s"),
                fmt_value(g.startup_s.get("head"), "s"),
                False,
            )
        )
        if g.gpu_minutes is not None:
            rows.append(
                EnvRow(
                    "GPU time (start-ups included)",
                    _minutes(g.gpu_minutes.base),
                    _minutes(g.gpu_minutes.head),
                    False,
                )
            )
        rows.append(
            EnvRow(
                "peak VRAM (mean)",
                fmt_value(g.peak_vram_mib.get("base"), "MiB"),
                fmt_value(g.peak_vram_mib.get("head"), "MiB"),
                False,
            )
        )
        views.append(EnvView(gpu, g.runner, g.rounds_per_side, rows, unit_of(ev, gpu)))
    return views


@dataclass(frozen=True)
class ServerView:
    """One server start of an alternating design: what it served, was given and used."""

    side: str
    rows: str
    startup: str
    memory: str  # "45% of 143,771 MiB given, 6,100 MiB used"


@dataclass(frozen=True)
class ControlRowView:
    """One configuration of a null control, formatted for the report's table."""

    config: str  # "streaming c=16"
    label: str
    count: str  # "8 pairs", or "4 base / 4 control runs" unpaired
    delta: str
    interval: str
    verdict: str
    note: str | None


@dataclass(frozen=True)
class MethodView:
    """Per GPU: which design measured the runs and what it assumes, in the engine's
    words; the runner's own words apart (quoted in the report only); and how much the
    host's CPU speed moved (`host`: only when it varied past the audit's threshold)."""

    gpu: str
    known: bool
    name: str  # the recorded name (untrusted: rendered inert)
    title: str  # the engine's name for a known design
    summary: str
    analysed: str
    assumes: str  # "X, and that Y"
    recorded: bool
    runner_summary: str | None
    runner_assumes: list[str]
    servers: list[ServerView]
    host: str | None  # "This runner's CPU speed varied 24% …" when it was unsteady
    host_steady: str | None  # a short note when it held steady (report only)
    # The null control in one line ("Null control (base against base, 8 pairs, 0.31
    # GPU-min): +0.4% [-0.6%, +1.3%] — no-change"), its rows for the report's table, and
    # the runner's own words for it (quoted in the report only). None/empty: no control.
    control: str | None = None
    control_rows: list[ControlRowView] = field(default_factory=list)
    control_runner_summary: str | None = None


def _memory(s: DesignServerResult) -> str:
    """What a server was given and used (45% of 143,771 MiB given, 6,100 MiB used),
    each part only when recorded."""
    parts = []
    if s.memory_fraction is not None:
        given = f"{100 * s.memory_fraction:.0f}%"
        if s.gpu_memory_total_mib is not None:
            given += f" of {fmt_value(s.gpu_memory_total_mib, 'MiB')}"
        parts.append(f"{given} given")
    if s.vram_mib is not None:
        parts.append(f"{fmt_value(s.vram_mib, 'MiB')} used")
    return ", ".join(parts) or "not recorded"


def _and_that(items: list[str]) -> str:
    """Assumptions as one clause: "a", "a, and that b", "a, that b, and that c"."""
    if len(items) < 2:
        return "".join(items)
    return ", that ".join(items[:-1]) + ", and that " + items[-1]


def _loop(h: HostCpu) -> str:
    """The fixed loop's range: "7.05–13.7 ms over 17 runs"."""
    span = (
        f"{h.min_ms:.3g} ms"
        if f"{h.min_ms:.3g}" == f"{h.max_ms:.3g}"
        else f"{h.min_ms:.3g}–{h.max_ms:.3g} ms"
    )
    return f"a fixed Python loop took {span} over {h.runs} runs"


def host_words(h: HostCpu | None, paired: bool) -> tuple[str | None, str | None]:
    """What the host's own CPU speed says of the evidence: (unsteady, steady) sentences,
    at most one of them; neither when no run recorded it. "Varied" is the loop's CV."""
    if h is None:
        return None, None
    if h.steady:
        return None, f"This runner's CPU speed held steady ({h.cv_pct:.1f}% CV: {_loop(h)})."
    parts = []
    b, hd = h.median_base_ms, h.median_head_ms
    one_side = bool(abs(h.side_gap_pct) > h.threshold_pct and b and hd)
    if h.cv_pct > h.threshold_pct or not one_side:
        parts.append(f"This runner's CPU speed varied {h.cv_pct:.0f}% (CV: {_loop(h)}).")
    if one_side and b and hd:
        slow, fast, ms_slow, ms_fast = (
            ("head", "base", hd, b) if hd > b else ("base", "head", b, hd)
        )
        longer = (
            f"{100 * (ms_slow / ms_fast - 1):.1f}% longer before {slow} runs than before "
            f"{fast} runs (median {ms_slow:.3g} against {ms_fast:.3g} ms"
        )
        if parts:
            parts.append(f"The loop took {longer}).")
        else:
            parts.append(
                f"This runner's CPU was slower for the {slow} runs: a fixed Python loop took "
                f"{longer}, over {h.runs} runs)."
            )
    more = "more pairs" if paired else "more rounds"
    parts.append(
        "A server bound by its CPU moves with the machine; a dedicated machine, or "
        f"{more}, would narrow its interval."
    )
    return " ".join(parts), None


def _count(r: ControlRow, unit: str) -> str:
    """What a control row compared: "8 pairs", or "4 base / 4 control rounds"."""
    if r.pairs is not None:
        return f"{r.pairs} pair{'s' if r.pairs != 1 else ''}"
    return f"{r.n_base} base / {r.n_control} control {unit}s"


def _control_change(r: ControlRow) -> str:
    if r.delta_pct is None:
        return "no figure"
    if r.ci_low_pct is None or r.ci_high_pct is None:
        return f"{fmt_pct(r.delta_pct)} (no interval)"
    return f"{fmt_pct(r.delta_pct)} {fmt_interval(r.ci_low_pct, r.ci_high_pct)}"


def control_line(c: ControlResult | None, unit: str) -> str | None:
    """A GPU's null control in one line: its cost, and each configuration's change of
    the control against base with its verdict."""
    if c is None:
        return None
    cost = f", {round(c.gpu_minutes, 2):g} GPU-min" if c.gpu_minutes is not None else ""
    if not c.rows:
        return f"Null control (base against base{cost}): no control run could be compared"
    if len(c.rows) == 1:
        r = c.rows[0]
        return (
            f"Null control (base against base, {_count(r, unit)}{cost}): "
            f"{_control_change(r)} — {r.verdict}"
        )
    parts = [
        f"{r.mode} c={r.concurrency}: {_control_change(r)} — {r.verdict} ({_count(r, unit)})"
        for r in c.rows
    ]
    return f"Null control (base against base{cost}): " + "; ".join(parts)


def _control_rows(c: ControlResult | None, unit: str) -> list[ControlRowView]:
    if c is None:
        return []
    return [
        ControlRowView(
            config=f"{r.mode} c={r.concurrency}",
            label=r.label,
            count=_count(r, unit),
            delta=fmt_pct(r.delta_pct),
            interval=fmt_interval(r.ci_low_pct, r.ci_high_pct),
            verdict=r.verdict,
            note=r.note,
        )
        for r in c.rows
    ]


def method_views(ev: Evidence) -> list[MethodView]:
    """Per GPU with a recorded design (evidence from before designs has none)."""
    out = []
    for gpu, g in ev.gpus.items():
        d = g.design
        if d is None:
            continue
        host, steady = host_words(g.host_cpu, d.paired)
        out.append(
            MethodView(
                gpu=gpu,
                known=d.known,
                name=d.name,
                title=design.title(d.name) if d.known else d.name,
                summary=d.summary,
                analysed=design.analysed(d.paired, d.unit, d.rounds),
                assumes=_and_that(d.assumes),
                recorded=d.recorded,
                runner_summary=d.runner_summary,
                runner_assumes=d.runner_assumes,
                servers=[
                    ServerView(
                        s.side,
                        ", ".join(s.rows) or "not recorded",
                        fmt_value(s.startup_s, "s"),
                        _memory(s),
                    )
                    for s in d.servers
                ],
                host=host,
                host_steady=steady,
                control=control_line(g.control, d.unit),
                control_rows=_control_rows(g.control, d.unit),
                control_runner_summary=g.control.runner_summary if g.control else None,
            )
        )
    return out


@dataclass(frozen=True)
class MeasuredView:
    """Per GPU: what its runner measured (`Measured`, the runner's text) beside the
    design and the unit of its rounds; the templates say it."""

    gpu: str
    m: Measured
    design: str | None  # the engine's name for a known design, else the recorded name
    known: bool  # a design the engine knows (an unknown name is shown as a code span)
    control: bool  # a null control ran beside the pairs
    unit: str  # "round", or "burst" for an alternating design
    rounds: int  # rounds a side that ran, when the bundle did not record the number


def measured_views(ev: Evidence) -> list[MeasuredView]:
    """Per GPU whose evidence records what was measured (not evidence from before)."""
    out = []
    for gpu, g in ev.gpus.items():
        if g.measured is None:
            continue
        d = g.design
        out.append(
            MeasuredView(
                gpu=gpu,
                m=g.measured,
                design=(design.title(d.name) if d.known else d.name) if d else None,
                known=bool(d and d.known),
                control=g.control is not None,
                unit=unit_of(ev, gpu),
                rounds=g.rounds_per_side,
            )
        )
    return out


STOP_WORDS = {
    "decided": "every primary row was improved, regressed or equivalent",
    "max-rounds": "the most rounds a side were run before a decision",
    "budget": "the GPU-minute budget was spent before a decision",
    "cut-short": "cut short by a failed run or a time limit before a decision",
}


def _minutes(x: float | None) -> str:
    return "not recorded" if x is None else f"{x:.1f} min"


@dataclass(frozen=True)
class RoundsView:
    """Per GPU: how many rounds ran and why they stopped, and the GPU time they took."""

    gpu: str
    how: str  # "5 rounds a side" or "rounds until decided (at most 10 a side)"
    stopped: str | None  # decided / max-rounds / budget / cut-short (adaptive only)
    why: str | None  # the stop reason in words
    method: str | None
    rows: list[str]  # each primary row's decision, in the runner's words
    minutes: str | None  # "12.3 GPU minutes (base 6.1, head 6.2)", start-ups included


def rounds_views(ev: Evidence) -> list[RoundsView]:
    """Only GPUs with something to say: a sequential stop or recorded GPU minutes."""
    out = []
    for gpu, g in ev.gpus.items():
        a, gm = g.adaptive, g.gpu_minutes
        if a is None and gm is None:
            continue
        minutes = None
        if gm is not None:
            minutes = (
                f"{_minutes(gm.total)} of GPU time (base {_minutes(gm.base)}, head "
                f"{_minutes(gm.head)}), server start-ups included"
            )
        if a is None:
            how = f"{g.rounds_per_side} {unit_of(ev, gpu)}s a side"
            out.append(RoundsView(gpu, how, None, None, None, [], minutes))
            continue
        cap = f"at most {a.max_rounds} a side" if a.max_rounds else "no cap"
        if a.gpu_minutes_budget:
            cap += f", {a.gpu_minutes_budget:g} GPU minutes"
        rows = [
            f"{r.row}: {r.verdict or 'undecided'}, {r.reason or ''}".rstrip(", ") for r in a.rows
        ]
        out.append(
            RoundsView(
                gpu,
                f"{unit_of(ev, gpu)}s until decided ({cap})",
                a.stopped,
                STOP_WORDS.get(a.stopped or "", "not recorded"),
                a.method,
                rows,
                minutes,
            )
        )
    return out


@dataclass(frozen=True)
class ReproView:
    """What the Reproduce section says; None is written "not recorded"."""

    command: str | None
    base_sha: str | None
    head_sha: str | None
    head_repo: str | None
    repo: str | None
    image: str | None
    image_digest: str | None
    gpus: list[str]
    runner_commit: str | None = None


@dataclass(frozen=True)
class CommitsView:
    """The two commits a verdict is about, each linked to its page where GitHub's address
    is known (from the evidence's compare link)."""

    head: str
    base: str
    head_url: str | None
    base_url: str | None


def commits_view(ev: Evidence) -> CommitsView | None:
    if not ev.head_sha or not ev.base_sha:
        return None
    compare = next((x.url for x in ev.links if x.label == "compare base...head"), None)
    root = compare.split(f"/{ev.repo}/compare/")[0] if compare and ev.repo else None
    if root is None or root == compare:
        return CommitsView(ev.head_sha, ev.base_sha, None, None)
    return CommitsView(
        ev.head_sha,
        ev.base_sha,
        f"{root}/{ev.head_repo or ev.repo}/commit/{ev.head_sha}",
        f"{root}/{ev.repo}/commit/{ev.base_sha}",
    )


def reproduce_view(ev: Evidence) -> ReproView:
    r = ev.reproduce
    if r is None:
        return ReproView(
            None, ev.base_sha, ev.head_sha, ev.head_repo, ev.repo, None, None, list(ev.gpus)
        )
    return ReproView(
        r.command,
        r.base_sha,
        r.head_sha,
        r.head_repo,
        ev.repo,
        r.image,
        r.image_digest,
        r.gpus or list(ev.gpus),
        r.runner_commit,
    )


MAX_ROUNDS = 50  # the most rounds a side one verification may run (`.github/rsi.yml`)


@dataclass(frozen=True)
class NextStep:
    """What it would take to decide an inconclusive GPU: the pairs a side that would
    bring its least sensitive undecided row's detectable change down to the threshold at
    the spread measured (the detectable change shrinks as 1/√pairs), and their GPU time."""

    gpu: str
    where: str  # mode, concurrency and metric of that row
    mde_pct: float
    threshold_pct: float
    ran: int
    need: int
    minutes: float | None  # at this run's GPU minutes a pair, start-ups included
    allowed: int | None = None  # the repository's `budget.max_rounds`, when known

    @property
    def too_many(self) -> bool:
        return self.need > MAX_ROUNDS

    @property
    def past_budget(self) -> bool:
        return self.allowed is not None and self.need > self.allowed


def _to_decide(r: StudyRow, thr: float) -> int:
    """For a row whose interval already excludes zero (a change there is, its size in
    doubt): the pairs that would shrink the interval enough to decide at its estimate,
    inside ±thr (equivalent) when it is below the threshold, past it otherwise (an
    estimate near the threshold needs many: its interval must clear a close line). An
    interval around zero is planned by the detectable change instead."""
    if r.delta_pct is None or r.ci_low_pct is None or r.ci_high_pct is None:
        return 0
    if r.ci_low_pct <= 0 <= r.ci_high_pct:
        return 0
    half = (r.ci_high_pct - r.ci_low_pct) / 2
    d = abs(r.delta_pct)
    room = thr - d if d < thr else d - thr
    if half <= 0:
        return 0
    if room <= 0:
        return MAX_ROUNDS + 1
    return math.ceil(r.n_base * (half / room) ** 2)


def next_steps(ev: Evidence) -> list[NextStep]:
    """A step for each GPU kind whose verdict is inconclusive on too wide an interval."""
    out = []
    for gpu, g in sorted(ev.gpus.items()):
        if g.verdict != "inconclusive":
            continue
        rows = [
            r
            for r in ev.study
            if r.gpu == gpu
            and r.primary
            and r.verdict == "inconclusive"
            and r.mde_pct
            and r.threshold_pct
            and r.threshold_abs is None
            and r.n_base >= 2
        ]
        if not rows:
            continue
        r = max(rows, key=lambda x: (x.mde_pct or 0) / (x.threshold_pct or 1))
        mde, thr = r.mde_pct or 0.0, r.threshold_pct or 1.0
        need = max(r.n_base + 1, math.ceil(r.n_base * (mde / thr) ** 2), _to_decide(r, thr))
        total = g.gpu_minutes.total if g.gpu_minutes else None
        per_pair = total / g.rounds_per_side if total and g.rounds_per_side else None
        where = f"{r.mode} c={r.concurrency} {metric_label(r.metric)}"
        out.append(
            NextStep(
                gpu,
                where,
                mde,
                thr,
                r.n_base,
                need,
                None if per_pair is None else per_pair * need,
                ev.max_rounds,
            )
        )
    return out


def verdict_note(ev: Evidence) -> str | None:
    """What the verdict means for the claim, when the two could be read apart."""
    if ev.verdict == "invalid":
        note = "No figure of this study counts as evidence until the audit errors are resolved"
        if ev.claim.status != "none":
            note += f"; the claim status ({ev.claim.status}) is shown for reference only"
        return note + "."
    return None


@dataclass(frozen=True)
class PlotImage:
    title: str
    name: str
    path: str
    data_uri: str | None
    problem: str | None


def plot_images(plots: Iterable[Plot], out_dir: Path) -> list[PlotImage]:
    """Plots read from `out_dir` and embedded as data URIs; a missing file gets a note.

    Only PNG files inside `out_dir` are read, so a plot path cannot pull another file
    into the report.
    """
    root = out_dir.resolve()
    out = []
    for p in plots:
        file = (out_dir / p.path).resolve()
        data_uri, problem = None, None
        if not file.is_relative_to(root):
            problem = "its path is outside the report folder"
        elif not file.is_file():
            problem = "the file is missing"
        else:
            data = file.read_bytes()
            if not data.startswith(_PNG_SIGNATURE):
                problem = "the file is not a PNG image"
            else:
                data_uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        out.append(PlotImage(p.title, p.name, p.path, data_uri, problem))
    return out


def candidate_view(ev: Evidence) -> dict[str, Any] | None:
    """The candidate's own words, with the fields the report shows always present."""
    c = ev.candidate
    if not c:
        return None
    return {
        "candidate_id": c.get("candidate_id"),
        "title": c.get("title"),
        "summary": c.get("summary") or "",
        "claim": c.get("claim"),
        "default_behavior_changes": list(c.get("default_behavior_changes") or []),
        "caveats": list(c.get("caveats") or []),
        "pull_request": c.get("pull_request"),
        "head": c.get("head") or {},
    }


def sorted_rounds(ev: Evidence) -> list[RoundValue]:
    return sorted(ev.rounds, key=lambda r: (r.gpu, r.mode, r.concurrency, r.order))


# --------------------------------------------------------------------- overflow levels


@dataclass(frozen=True)
class Detail:
    """How much a Markdown text shows; the levels go from everything to the essentials."""

    study: Literal["all", "key", "none"]  # every row / primary, guard, regressed / none
    findings: Literal["all", "capped", "summary"]  # listed / per_code each / counts only
    extras: bool = True  # compare links, plots, environment
    left_out: str | None = None  # said at the top when something was left out
    per_code: int | None = None


COMMENT_LEVELS: tuple[Detail, ...] = (
    Detail("all", "all"),
    Detail(
        "key",
        "all",
        left_out="study figures other than primary, guard and regressed rows were left out",
    ),
    Detail(
        "key",
        "capped",
        per_code=FINDINGS_PER_CODE,
        left_out="study figures other than primary, guard and regressed rows were left "
        f"out, and at most {FINDINGS_PER_CODE} findings are listed per code",
    ),
    Detail(
        "none",
        "summary",
        extras=False,
        left_out="the study tables, the finding list, compare links, plots and the "
        "environment were left out",
    ),
)

# The check summary shows primary rows only ("key"), so it has one level less.
CHECK_LEVELS: tuple[Detail, ...] = (
    Detail("key", "all"),
    Detail(
        "key",
        "capped",
        per_code=FINDINGS_PER_CODE,
        left_out=f"at most {FINDINGS_PER_CODE} findings are listed per code",
    ),
    Detail("none", "summary", left_out="the primary figures and the finding list were left out"),
)


def _fit(
    render: Callable[[Detail, bool], str],
    levels: tuple[Detail, ...],
    tail: str,
    limit: int,
    link: str | None,
) -> str:
    """The first level whose text fits `limit`; else the last level cut to fit."""
    for d in levels:
        text = render(d, True)
        if len(text) <= limit:
            return text
    return hard_trim(render(levels[-1], False), tail, limit, link)


def cut_notice(link: str | None = None) -> str:
    """The one wording of a cut: the note that ends a text cut to fit GitHub's limit,
    linking the whole text when there is a `link` (`pr_templates/cut.md.j2`)."""
    return macro("cut.md.j2", "notice", link)


def _cut_at_line(text: str, n: int) -> str:
    if len(text) <= n:
        return text
    cut = text[:n]
    nl = cut.rfind("\n")
    return cut[: nl + 1] if nl >= 0 else ""


def _closers(text: str) -> str:
    """Close a code fence or `<details>` that a cut left open."""
    out = ""
    fence: str | None = None
    for line in text.splitlines():
        fence, _ = _fence_step(fence, line)
    if fence is not None:
        out += "\n" + fence
    opened = text.count("<details>") - text.count("</details>")
    out += "\n</details>" * max(0, opened)
    return out


_ANY_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_HTML_OPEN = re.compile(r"<(details|pre|div|table|blockquote)\b", re.I)
_HTML_CLOSE = re.compile(r"</(details|pre|div|table|blockquote)\s*>", re.I)


def author_closers(text: str) -> str:
    """What closes the fence and HTML blocks the author's text leaves open, so that the
    App's section after it renders on its own (empty when nothing is open)."""
    fence: str | None = None
    depth: dict[str, int] = {}
    for line in text.splitlines():
        m = _ANY_FENCE.match(line)
        if fence is None and m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            fence = m.group(1)
            continue
        if fence is not None:
            closing = m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)
            if closing and m is not None and not m.group(2).strip():
                fence = None
            continue
        for tag in _HTML_OPEN.findall(line):
            depth[tag.lower()] = depth.get(tag.lower(), 0) + 1
        for tag in _HTML_CLOSE.findall(line):
            depth[tag.lower()] = max(0, depth.get(tag.lower(), 0) - 1)
    out = f"\n{fence}" if fence is not None else ""
    for tag in ("blockquote", "table", "div", "pre", "details"):
        out += f"\n</{tag}>" * depth.get(tag, 0)
    return out + "\n" if out else ""


def hard_trim(body: str, tail: str, limit: int, link: str | None = None) -> str:
    """`body` cut at a line break so that body, a closing note (`cut_notice`, with
    `link`) and `tail` fit `limit`."""
    note = f"\n\n{cut_notice(link)}\n\n"
    budget = limit - len(note) - len(tail)
    if budget < 0:  # the tail alone does not fit: keep what does, from its start
        return tail[:limit]
    keep = budget
    while True:
        cut = _cut_at_line(body, keep)
        kept = cut.rstrip("\n") + _closers(cut)
        if len(kept) <= budget:
            return kept + note + tail
        keep = max(0, keep - (len(kept) - budget))


# --------------------------------------------------------------------- public renderers


def units(ev: Evidence) -> dict[str, str]:
    return {gpu: unit_of(ev, gpu) for gpu in ev.gpus}


def _md_context(ev: Evidence, report_url: str | None) -> dict[str, Any]:
    return {
        "ev": ev,
        "report_url": inert.own_url(report_url),
        "marker": Markup(COMMENT_MARKER),
        "verdict_note": verdict_note(ev),
        "commits": commits_view(ev),
        "next_steps": next_steps(ev),
        "repro": reproduce_view(ev),
        "counts": severity_counts(ev.audit),
        "rounds_views": rounds_views(ev),
        "method_views": method_views(ev),
        "measured_views": measured_views(ev),
    }


def _tail(ev: Evidence, report_url: str | None) -> str:
    return _render_md("_tail.md.j2", report_url=inert.own_url(report_url), repro=reproduce_view(ev))


def render_comment(ev: Evidence, report_url: str | None, limit: int | None = None) -> str:
    """The evidence comment, at most `limit` (COMMENT_LIMIT) characters, ending with
    Reproduce; the App passes a smaller limit to leave room for its ledger."""
    ctx = _md_context(ev, report_url)
    configs = study_configs(ev.study, units(ev))
    n_other = sum(len(c.other) for c in configs)

    def render(d: Detail, with_tail: bool) -> str:
        return _render_md(
            "comment.md.j2",
            **ctx,
            detail=d,
            with_tail=with_tail,
            configs=configs,
            n_other=n_other,
            groups=audit_groups(
                ev.audit,
                d.per_code,
                codes_shown=CODES_SHOWN if d.findings == "summary" else None,
                merge=True,
            ),
            environments=environment_views(ev) if d.extras else [],
        )

    limit = limit or COMMENT_LIMIT
    return _fit(render, COMMENT_LEVELS, _tail(ev, report_url), limit, report_url)


def render_check(ev: Evidence, report_url: str | None) -> str:
    """The check-run summary, at most CHECK_LIMIT characters, ending with Reproduce."""
    ctx = _md_context(ev, report_url)
    primary = [r for r in ev.study if r.primary]

    def render(d: Detail, with_tail: bool) -> str:
        return _render_md(
            "check.md.j2",
            **ctx,
            detail=d,
            with_tail=with_tail,
            primary=primary,
            groups=audit_groups(
                ev.audit,
                d.per_code,
                severities=("error", "warning"),
                codes_shown=CODES_SHOWN if d.findings == "summary" else None,
                merge=True,
            ),
        )

    return _fit(render, CHECK_LEVELS, _tail(ev, report_url), CHECK_LIMIT, report_url)


def render_pr_section(ev: Evidence, report_url: str | None) -> str:
    """The short evidence section of the PR body, between SECTION_START and SECTION_END."""
    return _render_md(
        "pr_body.md.j2",
        **_md_context(ev, report_url),
        start=Markup(SECTION_START),
        end=Markup(SECTION_END),
    )


def replace_pr_section(body: str | None, section: str) -> str:
    """`body` with its evidence section replaced in place, or `section` appended.

    The author's text outside the markers is kept byte for byte. Replacing is idempotent.
    A start marker whose end marker was deleted is taken to run to the end of the body
    (the section is always appended last). Later duplicate sections are removed.
    """
    core = section.strip("\n")
    if core.startswith(SECTION_START) and core.endswith(SECTION_END):
        core = core[len(SECTION_START) :].lstrip("\n")
    else:
        core = f"{core}\n{SECTION_END}"
    text = body or ""
    spans = _section_spans(text)
    if not spans:
        if not text.strip():
            return f"{SECTION_START}\n{core}\n"
        sep = "\n" if text.endswith("\n") else "\n\n"
        return f"{text}{sep}{SECTION_START}{author_closers(text)}\n{core}\n"
    out, pos = [], 0
    for i, (start, end) in enumerate(spans):
        out.append(text[pos:start])
        if i == 0:
            out.append(f"{SECTION_START}{author_closers(text[:start])}\n{core}")
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _section_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    pos = 0
    while (start := text.find(SECTION_START, pos)) >= 0:
        end = text.find(SECTION_END, start + len(SECTION_START))
        stop = len(text) if end < 0 else end + len(SECTION_END)
        spans.append((start, stop))
        pos = stop
    return spans


def render_report(ev: Evidence, out_dir: Path) -> str:
    """The self-contained HTML report: every row, round and finding; plots embedded."""
    return _render(
        "report.html.j2",
        ev=ev,
        verdict_note=verdict_note(ev),
        configs=study_configs(ev.study, units(ev)),
        groups=audit_groups(ev.audit),
        counts=severity_counts(ev.audit),
        environments=environment_views(ev),
        rounds_views=rounds_views(ev),
        method_views=method_views(ev),
        measured_views=measured_views(ev),
        plots=plot_images(ev.plots, out_dir),
        rounds=sorted_rounds(ev),
        candidate=candidate_view(ev),
        repro=reproduce_view(ev),
    )
