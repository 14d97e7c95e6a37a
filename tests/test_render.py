"""Rendering: golden files for the comment, check summary, PR section and report; the
length limits at every overflow level; the PR-body section; HTML escaping.

Golden files live in tests/golden/ and are compared exactly; a mismatch names the file.
Rewrite them after an intended change with:

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_render.py
"""

from __future__ import annotations

import base64
import difflib
import math
import os
import re
from pathlib import Path

import pytest

from evidence import render
from evidence.build import Inputs, build
from evidence.model import (
    AttributionEntry,
    Candidate,
    Evidence,
    Finding,
    Plot,
    Severity,
    StudyRow,
)
from evidence.policy import Policy
from evidence.render import (
    COMMENT_MARKER,
    SECTION_END,
    SECTION_START,
    render_check,
    render_comment,
    render_pr_section,
    render_report,
    replace_pr_section,
    row_ci,
    row_delta,
)
from evidence.synth import BASE_SHA, HEAD_SHA, SynthSpec, write_bundle
from tests.bundles import INCONCLUSIVE

GOLDEN = Path(__file__).parent / "golden"
REPORT_URL = "https://rsi.example/v/v-demo01/report.html?token=t0k3n"
# A 1×1 PNG, fixed bytes so the report's data URI is the same everywhere.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


# ------------------------------------------------------------------------- helpers


def assert_golden(name: str, actual: str) -> None:
    """Compare `actual` with tests/golden/<name> exactly; UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(actual.encode("utf-8"))
        return
    if not path.exists():
        pytest.fail(f"golden file {path} is missing; create it with UPDATE_GOLDEN=1")
    expected = path.read_bytes().decode("utf-8")
    if actual != expected:
        diff = "".join(
            list(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    actual.splitlines(keepends=True),
                    fromfile=f"golden/{name}",
                    tofile="rendered",
                )
            )[:80]
        )
        pytest.fail(
            f"rendered output differs from golden file {path} "
            f"(UPDATE_GOLDEN=1 rewrites it):\n{diff}",
            pytrace=False,
        )


def candidate() -> Candidate:
    return Candidate.model_validate(
        {
            "candidate_id": "cosyvoice3-idle-threads-r14",
            "task": "cosyvoice3",
            "repo": "sgl-project/sglang-omni",
            "base_sha": BASE_SHA,
            "head": {
                "repo": "openrsi-bot/sglang-omni",
                "ref": "rsi/cosyvoice3-idle-threads",
                "sha": HEAD_SHA,
            },
            "title": "CosyVoice3: idle encoder threads sleep instead of spinning",
            "summary": "Idle encoder threads now wait on a condition variable.\n\n"
            "- frees CPU for the scheduler\n- no change to outputs",
            "claim": {
                "metric": "throughput_qps",
                "mode": "streaming",
                "gpu": "H200",
                "delta_pct": 8.0,
            },
            "gpus": ["H200"],
            "default_behavior_changes": ["encoder_idle_wait_ms defaults to 2 (was: busy wait)"],
            "caveats": ["Measured with 8 CPU cores per GPU."],
        }
    )


def make_evidence(root: Path, spec: SynthSpec, attribution: bool = False) -> Evidence:
    """Real pipeline, then the parts that depend on the machine made fixed."""
    bundle = write_bundle(root / "bundle", spec)
    attr = (
        [
            AttributionEntry(
                number=812,
                title="Scheduler: batch prefill requests",
                url="https://github.com/sgl-project/sglang-omni/pull/812",
                merged_at="2026-05-02T10:00:00Z",
            )
        ]
        if attribution
        else []
    )
    ev, _ = build(Inputs(bundles=[bundle], candidate=candidate(), attribution=attr))
    ev.inputs = ["bundle-h200"]
    ev.plots = [
        Plot(name="rounds", title="Throughput per round", path="plots/rounds.png"),
        Plot(
            name="latency",
            title="Latency CDF, base and head",
            path="plots/latency.png",
            url="https://rsi.example/v/v-demo01/plots/latency.png?token=t0k3n",
        ),
    ]
    return ev


SPECS = {
    "improved": SynthSpec(speedup=0.08, rounds=3, requests=40, concurrencies=(4,), seed=1),
    "invalid": SynthSpec(head_audio_scale=0.8, rounds=3, requests=40, concurrencies=(4,), seed=1),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Evidence]:
    out = {}
    for name, spec in SPECS.items():
        root = tmp_path_factory.mktemp(name)
        out[name] = make_evidence(root, spec, attribution=name == "improved")
    return out


@pytest.fixture
def improved(built: dict[str, Evidence]) -> Evidence:
    return built["improved"].model_copy(deep=True)


def report_dir(tmp_path: Path) -> Path:
    """An output folder with one of the two plots present."""
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "rounds.png").write_bytes(PNG)
    return tmp_path


# ------------------------------------------------------------------------- the cases


def test_pipeline_gives_the_cases_we_render(built: dict[str, Evidence]) -> None:
    a, b = built["improved"], built["invalid"]
    assert a.verdict == "improved"
    assert a.claim.status == "confirmed"
    assert b.verdict == "invalid"
    assert {f.code for f in b.audit if f.severity == "error"} == {"output-length-shift"}


@pytest.mark.parametrize("case", list(SPECS))
@pytest.mark.parametrize("kind", ["comment", "check", "pr_section", "report"])
def test_golden(built: dict[str, Evidence], case: str, kind: str, tmp_path: Path) -> None:
    ev = built[case].model_copy(deep=True)
    url = REPORT_URL if case == "improved" else None
    if kind == "comment":
        text, name = render_comment(ev, url), f"{case}_comment.md"
    elif kind == "check":
        text, name = render_check(ev, url), f"{case}_check.md"
    elif kind == "pr_section":
        text, name = render_pr_section(ev, url), f"{case}_pr_section.md"
    else:
        text, name = render_report(ev, report_dir(tmp_path)), f"{case}_report.html"
    assert str(tmp_path) not in text
    assert "/tmp/" not in text
    assert_golden(name, text)


# ---------------------------------------------------------------------- the comment


def test_comment_begins_with_marker_verdict_and_claim(improved: Evidence) -> None:
    text = render_comment(improved, REPORT_URL)
    lines = text.splitlines()
    assert lines[0] == COMMENT_MARKER
    head = "\n".join(lines[:12])
    assert "`IMPROVED`" in head
    assert improved.claim.message in head
    assert "| H200 | `IMPROVED` | throughput, streaming, c=4 | +11.7% |" in head
    sections = [ln for ln in lines if ln.startswith("### ")]
    assert sections == [
        "### Serving study",
        "### What was measured",
        "### How it was measured",
        "### Raw-record audit",
        "### Caveats",
        "### Compare links",
        "### Other changes in this range",
        "### Plots",
        "### Environment",
        "### Reproduce",
    ]
    assert "![Throughput per round](plots/rounds.png)" in text
    assert "could detect" not in text  # the only primary row improved


def test_a_guard_headline_says_it_decided_the_verdict(improved: Evidence) -> None:
    """REGRESSED beside a guard's row: the row is named as the guard that decided it."""
    ev = improved.model_copy(deep=True)
    h = ev.gpus["H200"].headline
    assert h is not None
    ev.gpus["H200"].verdict = "regressed"
    h.mode, h.delta_pct, h.ci_low_pct, h.ci_high_pct = "non-streaming", -14.0, -20.0, -8.0
    h.verdict, h.guard = "regressed", True
    row = "| H200 | `REGRESSED` | throughput, non-streaming, c=4 (a guard, failed: it decided"
    assert row in render_comment(ev, None)


def test_inconclusive_primary_row_says_what_it_could_detect(improved: Evidence) -> None:
    row = next(r for r in improved.study if r.primary)
    row.verdict, row.mde_pct = "inconclusive", 4.25
    assert "| ±3.0% | inconclusive, could detect ±4.2% |" in render_comment(improved, None)
    row.verdict = "no-change"  # equivalent: nothing left to detect
    assert "| ±3.0% | no-change |" in render_comment(improved, None)


def test_reproduce_says_not_recorded(improved: Evidence) -> None:
    assert improved.reproduce is not None
    improved.reproduce.image = None
    improved.reproduce.image_digest = None
    text = render_comment(improved, None)
    tail = text[text.index("### Reproduce") :]
    assert "- Image: not recorded" in tail
    assert "- Image digest: not recorded" in tail
    improved.reproduce = None
    tail = render_comment(improved, None).split("### Reproduce")[1]
    assert "Command: not recorded." in tail
    assert f"Base commit: {BASE_SHA}" in tail


# ------------------------------------------------------------------ overflow levels


def giant(ev: Evidence, concurrencies: int, findings: int, caveats: int = 0) -> Evidence:
    """`ev` with its study copied over many concurrencies and many findings added."""
    ev = ev.model_copy(deep=True)
    ev.study = [
        r.model_copy(update={"concurrency": c})
        for c in range(1, concurrencies + 1)
        for r in ev.study
    ]
    codes: list[tuple[str, Severity]] = [
        ("output-length-shift", "error"),
        ("noisy-rounds", "warning"),
        ("too-few-samples", "warning"),
        ("first-chunk-late", "info"),
        ("environment-mismatch", "warning"),
        ("throttled", "info"),
    ]
    ev.audit = [
        Finding(
            code=codes[i % 6][0],
            severity=codes[i % 6][1],
            gpu="H200",
            message=f"Finding {i}: head produced shorter audio for sample set "
            f"{i} at streaming c={i % 64}; " + "details " * 12,
            runs=[f"r{k}-head-stream-c4" for k in range(8)],
            samples=[f"common_voice_en_{10119832 + k}" for k in range(12)],
            numbers={"shift_pct": -20.0 - i / 100, "p": 1e-9},
        )
        for i in range(findings)
    ]
    ev.caveats = ev.caveats + [
        f"Caveat {i}: " + "the base side was measured earlier. " * 4 for i in range(caveats)
    ]
    return ev


def ends_with_reproduce(text: str, ev: Evidence) -> bool:
    assert ev.reproduce is not None
    tail = text[text.rindex("### Reproduce") :]
    return (
        ev.reproduce.command in tail
        and tail.rstrip().endswith("- GPU: H200")
        and "### " not in tail[3:]
    )


def test_giant_comment_and_check_fit(improved: Evidence) -> None:
    ev = giant(improved, concurrencies=400, findings=3000)
    assert len(ev.study) == 10_000
    comment = render_comment(ev, REPORT_URL)
    check = render_check(ev, REPORT_URL)
    assert len(comment) <= 65_536
    assert len(check) <= 65_535
    for text in (comment, check):
        assert f"Full report: {REPORT_URL}" in text
        assert ends_with_reproduce(text, ev)
    assert comment.startswith(COMMENT_MARKER + "\n")


def test_giant_caveats_force_a_hard_trim(improved: Evidence) -> None:
    ev = giant(improved, concurrencies=10, findings=10, caveats=5000)
    for text, limit in (
        (render_comment(ev, REPORT_URL), 65_536),
        (render_check(ev, REPORT_URL), 65_535),
    ):
        assert len(text) <= limit
        assert ends_with_reproduce(text, ev)
        assert f"Full report: {REPORT_URL}" in text
    comment = render_comment(ev, REPORT_URL)
    assert f"… cut to fit GitHub's limit; [the full text]({REPORT_URL})." in comment
    assert comment.count("<details>") == comment.count("</details>")


def test_comment_levels_in_order(improved: Evidence, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lower the limit just below each level's length: the next level must come out."""
    ev = giant(improved, concurrencies=6, findings=40)
    monkeypatch.setattr(render, "COMMENT_LIMIT", 10**9)
    full = render_comment(ev, REPORT_URL)
    assert "other figures</summary>" in full
    assert "more `" not in full
    assert full.count("- `output-length-shift`") == 7

    monkeypatch.setattr(render, "COMMENT_LIMIT", len(full) - 1)
    key_only = render_comment(ev, REPORT_URL)
    assert len(key_only) < len(full)
    assert "other figures</summary>" not in key_only
    n_other = sum(not render.is_key_row(r) for r in ev.study)
    assert n_other == 120
    assert f"the {n_other} other figures are in the full report" in key_only
    assert "| **throughput** (primary) |" in key_only
    assert "| latency p95 (guard) |" in key_only
    assert key_only.count("- `output-length-shift`") == 7
    assert "This text was shortened" in key_only

    monkeypatch.setattr(render, "COMMENT_LIMIT", len(key_only) - 1)
    capped = render_comment(ev, REPORT_URL)
    assert len(capped) < len(key_only)
    assert "| **throughput** (primary) |" in capped
    assert capped.count("- `output-length-shift`") == 3
    assert "- ... and 4 more `output-length-shift` findings" in capped
    assert "at most 3 findings are listed per code" in capped

    monkeypatch.setattr(render, "COMMENT_LIMIT", len(capped) - 1)
    summary = render_comment(ev, REPORT_URL)
    assert len(summary) < len(capped)
    assert "### Serving study" not in summary
    assert "### Environment" not in summary
    assert "- Errors: 7 (`output-length-shift` ×7)" in summary
    assert "- Info: 13 (`first-chunk-late` ×7, `throttled` ×6)" in summary
    assert "### Caveats" in summary
    assert "`IMPROVED`" in summary

    monkeypatch.setattr(render, "COMMENT_LIMIT", len(summary) - 1)
    cut = render_comment(ev, REPORT_URL)
    assert len(cut) <= len(summary) - 1
    assert "cut to fit GitHub's limit" in cut

    for text in (full, key_only, capped, summary, cut):
        assert text.startswith(COMMENT_MARKER)
        assert ends_with_reproduce(text, ev)
        assert f"Full report: {REPORT_URL}" in text


def test_check_levels_in_order(improved: Evidence, monkeypatch: pytest.MonkeyPatch) -> None:
    ev = giant(improved, concurrencies=6, findings=40)
    monkeypatch.setattr(render, "CHECK_LIMIT", 10**9)
    full = render_check(ev, REPORT_URL)
    assert "### Primary figures" in full
    assert "first-chunk-late" not in full  # info findings are only counted
    monkeypatch.setattr(render, "CHECK_LIMIT", len(full) - 1)
    capped = render_check(ev, REPORT_URL)
    assert "- ... and 4 more `output-length-shift` findings" in capped
    assert "### Primary figures" in capped
    monkeypatch.setattr(render, "CHECK_LIMIT", len(capped) - 1)
    summary = render_check(ev, REPORT_URL)
    assert "### Primary figures" not in summary
    assert "- Warnings: " in summary
    monkeypatch.setattr(render, "CHECK_LIMIT", len(summary) - 1)
    cut = render_check(ev, REPORT_URL)
    assert len(cut) < len(summary)
    for text in (full, capped, summary, cut):
        head = f"[`{ev.head_sha[:10]}`]"
        assert text.startswith(f"## `IMPROVED` for head {head}")
        assert text.split("\n", 1)[0].endswith("): " + ev.reason)
        assert ends_with_reproduce(text, ev)


def test_limit_smaller_than_the_tail_is_still_kept(
    improved: Evidence,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(render, "COMMENT_LIMIT", 200)
    assert len(render_comment(improved, REPORT_URL)) <= 200


def test_hard_trim_closes_what_the_cut_left_open() -> None:
    body = "intro\n<details><summary>x</summary>\n\n```\n" + "line\n" * 500 + "```\n</details>\n"
    text = render.hard_trim(body, "\n### Reproduce\n", 400)
    assert len(text) <= 400
    kept = text.split("… cut to fit")[0]
    assert kept.count("```") % 2 == 0
    assert kept.count("<details>") == kept.count("</details>")
    assert text.endswith("\n### Reproduce\n")


def test_audit_groups_cap_findings_and_codes() -> None:
    findings = [
        Finding(code=f"code-{i % 20}", severity="warning" if i % 2 else "error", message=str(i))
        for i in range(100)
    ]
    groups = render.audit_groups(findings, per_code=2, codes_shown=4)
    assert [g.severity for g in groups] == ["error", "warning"]
    errors = groups[0]
    assert errors.count == 50
    assert [c.code for c in errors.codes] == ["code-0", "code-2", "code-4", "code-6"]
    assert [(len(c.findings), c.more) for c in errors.codes] == [(2, 3)] * 4
    assert (errors.more_codes, errors.more_codes_count) == (6, 30)
    assert render.audit_groups(findings, severities=("warning",))[0].count == 50


# ---------------------------------------------------------------------- PR section


def test_pr_section_is_wrapped(improved: Evidence) -> None:
    section = render_pr_section(improved, REPORT_URL)
    assert section.startswith(SECTION_START + "\n")
    assert section.endswith(SECTION_END + "\n")
    assert "### Reproduce" in section
    assert f"Full report: {REPORT_URL}" in section


def test_replace_pr_section_appends_after_author_text(improved: Evidence) -> None:
    section = render_pr_section(improved, REPORT_URL)
    author = "Fixes #41.\r\n\r\nIdle threads now sleep.   "
    body = replace_pr_section(author, section)
    assert body.startswith(author)
    assert body == author + "\n\n" + section
    assert replace_pr_section(None, section) == section
    assert replace_pr_section("", section) == section


def test_replace_pr_section_replaces_in_place_and_is_idempotent(improved: Evidence) -> None:
    old = f"{SECTION_START}\nold evidence\n{SECTION_END}"
    before, after = "Intro by the author.\n\n", "\n\nA note the author added below.\n"
    body = before + old + after
    new = render_pr_section(improved, REPORT_URL)
    once = replace_pr_section(body, new)
    assert once == before + new.rstrip("\n") + after
    assert "old evidence" not in once
    assert replace_pr_section(once, new) == once
    other = render_pr_section(improved, None)
    assert replace_pr_section(once, other) == before + other.rstrip("\n") + after


def test_replace_pr_section_repairs_broken_and_duplicate_sections() -> None:
    section = f"{SECTION_START}\nnew\n{SECTION_END}\n"
    broken = f"Author.\n\n{SECTION_START}\nhalf a section"
    assert replace_pr_section(broken, section) == f"Author.\n\n{SECTION_START}\nnew\n{SECTION_END}"
    twice = f"A\n{SECTION_START}\n1\n{SECTION_END}\nB\n{SECTION_START}\n2\n{SECTION_END}\nC"
    assert replace_pr_section(twice, section) == (f"A\n{SECTION_START}\nnew\n{SECTION_END}\nB\n\nC")
    assert replace_pr_section("Author.", "bare text") == (
        f"Author.\n\n{SECTION_START}\nbare text\n{SECTION_END}\n"
    )


# -------------------------------------------------------------------------- report


def test_report_escapes_html(improved: Evidence, tmp_path: Path) -> None:
    improved.audit.append(
        Finding(
            code="bundle-invalid",
            severity="error",
            gpu="H200",
            message="<script>alert(1)</script> & <b>bold</b>",
            numbers={"note": "<img src=x onerror=alert(2)>"},
        )
    )
    assert improved.candidate is not None
    improved.candidate["title"] = "<iframe src=//evil.example>"
    improved.attribution = [AttributionEntry(number=1, title="x", url="javascript:alert(3)")]
    html = render_report(improved, tmp_path)
    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "<iframe" not in html
    assert "javascript:" not in html
    # Markdown: free text cannot open a tag either (GitHub sanitizes, but an unclosed
    # <details> in a message would swallow the rest of the comment).
    comment = render_comment(improved, None)
    assert "&lt;script&gt;alert(1)&lt;/script&gt; & &lt;b&gt;bold&lt;/b&gt;" in comment
    assert "<script" not in comment
    assert "<b>" not in comment


def test_report_is_self_contained(improved: Evidence, tmp_path: Path) -> None:
    improved.plots.append(Plot(name="outside", title="Outside", path="../secret.png"))
    (tmp_path / "secret.png").write_bytes(PNG)
    out = tmp_path / "out"
    out.mkdir()
    html = render_report(improved, report_dir(out))
    assert "(plots/latency.png) is not shown: the file is missing." in html
    assert "(../secret.png) is not shown: its path is outside the report folder." in html
    png_uri = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert re.findall(r'src="([^"]*)"', html) == [png_uri]
    assert "<link" not in html
    assert "@import" not in html
    assert "url(" not in html
    # Everything, not a selection: every study row, round and finding.
    assert html.count("<tr") >= len(improved.study) + len(improved.rounds)
    for f in improved.audit:
        assert f.message in html
    assert "Scheduler: batch prefill requests" in html
    assert "CosyVoice3: idle encoder threads sleep instead of spinning" in html


# ---------------------------------------------------------------------- formatting


def test_formatting() -> None:
    assert render.fmt_pct(5.24) == "+5.2%"
    assert render.fmt_pct(-0.04) == "+0.0%"
    assert render.fmt_pct(None) == "n/a"
    assert render.fmt_interval(1.0, 9.8) == "[+1.0%, +9.8%]"
    assert render.fmt_interval(None, 9.8) == "n/a"
    assert render.fmt_value(2.132581, "req/s") == "2.13 req/s"
    assert render.fmt_value(0.12008, "s") == "0.120 s"
    assert render.fmt_value(60965.8, "MiB") == "60,966 MiB"
    assert render.fmt_value(0.0123933, "") == "0.0124"
    assert render.fmt_value(38.6166, "s") == "38.6 s"
    assert render.fmt_value(None, "s") == "n/a"
    assert render.fmt_signed(-0.00098, "") == "-0.000980"
    assert render.fence("a ``` b") == "````"
    assert render.md_cell("a | b\nc") == "a &#124; b c"


def test_an_interval_that_excludes_zero_never_prints_as_reaching_it() -> None:
    """An interval "[-27.0%, +0.0%]" beside improved read as a contradiction: a bound of an interval
    that excludes 0 gets the digits it needs to stay on its side."""
    assert render.fmt_interval(-27.0, -0.04) == "[-27.0%, -0.04%]"
    assert render.fmt_interval(0.004, 3.0) == "[+0.004%, +3.0%]"
    assert render.fmt_interval(0.00000002, 3.0) == "[+<0.0001%, +3.0%]"
    assert render.fmt_interval(-3.0, -0.00000002) == "[-3.0%, -<0.0001%]"
    # An interval across 0 reaches it honestly; most bounds keep one decimal.
    assert render.fmt_interval(-0.04, 5.0) == "[+0.0%, +5.0%]"
    assert render.fmt_interval(1.04, 9.8) == "[+1.0%, +9.8%]"


def test_a_caveat_on_peak_vram_reads_whole_mib() -> None:
    """A caveat once read "6.099e+04 MiB": VRAM reads as the environment table writes it."""
    from evidence.caveats import write_caveats

    def grown(metric: str, label: str, unit: str, base: float, head: float) -> StudyRow:
        return StudyRow(
            gpu="H200",
            mode="streaming",
            concurrency=4,
            metric=metric,
            label=label,
            unit=unit,
            better="lower",
            base=base,
            head=head,
            n_base=5,
            n_head=5,
            delta_pct=4.0,
            ci_low_pct=1.0,
            ci_high_pct=7.0,
            verdict="regressed",
        )

    vram = grown("peak_vram_mib", "peak VRAM", "MiB", 60990.4, 63429.8)
    startup = grown("startup_s", "start-up", "s", 38.61, 40.15)
    said = write_caveats([], [vram, startup], [], None, [])
    assert "Server start-up grew +4.0% on H200 (38.6 s → 40.1 s)." in said
    assert "Peak VRAM grew +4.0% on H200 (60,990 MiB → 63,430 MiB)." in said
    assert not any("e+0" in line for line in said)


def test_a_rate_judged_by_an_absolute_threshold_shows_its_absolute_change() -> None:
    """WER +11.5% [+0.3%, +22.7%] beside "±0.01 abs." and "no-change" read as a
    contradiction: the row shows the difference its threshold judges."""
    wer = StudyRow(
        gpu="H100",
        mode="non-streaming",
        concurrency=16,
        metric="wer_mean",
        label="WER",
        unit="",
        better="lower",
        base=0.0124,
        head=0.0138,
        n_base=5,
        n_head=5,
        delta_pct=11.5,
        ci_low_pct=0.3,
        ci_high_pct=22.7,
        delta_abs=0.00143,
        ci_low_abs=0.00003,
        ci_high_abs=0.0025,
        verdict="no-change",
        threshold_abs=0.01,
    )
    assert (row_delta(wer), row_ci(wer)) == ("+0.00143 (+11.5%)", "[+0.0000300, +0.00250]")
    speed = wer.model_copy(update={"threshold_abs": None, "threshold_pct": 3.0})
    assert (row_delta(speed), row_ci(speed)) == ("+11.5%", "[+0.3%, +22.7%]")


def test_an_inconclusive_gpu_ends_with_the_pairs_and_minutes_that_would_decide_it(
    tmp_path: Path,
) -> None:
    """The pairs that bring the least sensitive undecided row's detectable change to the
    threshold (it shrinks as 1/√pairs), their GPU minutes at this run's rate, and the
    command; past what one verification may run, what else would help."""
    spec = INCONCLUSIVE
    ev, _ = build(Inputs(bundles=[write_bundle(tmp_path / "b", spec)]))
    assert ev.verdict == "inconclusive"
    [step] = render.next_steps(ev)
    assert step.gpu == "H200"
    assert step.need >= math.ceil(step.ran * (step.mde_pct / step.threshold_pct) ** 2)
    g = ev.gpus["H200"]
    assert g.gpu_minutes is not None
    assert g.gpu_minutes.total is not None
    assert step.minutes == pytest.approx(g.gpu_minutes.total / g.rounds_per_side * step.need)
    said = f"`/rsi reverify h200 rounds={step.need}`"
    for text in (
        render.render_comment(ev, REPORT_URL),
        render.render_check(ev, REPORT_URL),
        render.render_pr_section(ev, REPORT_URL),
    ):
        assert "**Next step on H200:**" in text
        assert said in text
    noisy = SynthSpec(**{**spec.__dict__, "round_cv": 0.08, "gpu_minutes": False})
    ev2, _ = build(Inputs(bundles=[write_bundle(tmp_path / "c", noisy)]))
    [far] = render.next_steps(ev2)
    assert far.too_many
    text = render.render_comment(ev2, REPORT_URL)
    assert "more than one verification may run (at most 50 a side)" in text
    assert "/rsi reverify" not in text.split("**Next step on H200:**")[1].split("\n")[0]
    decided, _ = build(Inputs(bundles=[write_bundle(tmp_path / "d", SynthSpec(speedup=0.15))]))
    assert render.next_steps(decided) == []
    # The repository's budget allows fewer rounds than it needs: raise it first.
    capped, _ = build(
        Inputs(bundles=[write_bundle(tmp_path / "e", spec)], policy=Policy(max_rounds=10))
    )
    [step] = render.next_steps(capped)
    assert step.past_budget
    text = render.render_comment(capped, REPORT_URL)
    assert f"raise `budget.max_rounds` in `.github/rsi.yml` from 10 to {step.need}" in text
    # An estimate near the threshold needs its interval to clear a close line.
    near = capped.model_copy(
        update={
            "study": [
                r.model_copy(update={"delta_pct": 2.6, "ci_low_pct": 1.0, "ci_high_pct": 4.2})
                if r.primary
                else r
                for r in capped.study
            ]
        }
    )
    [close] = render.next_steps(near)
    assert close.need > step.need


def test_identical_findings_are_one_line_with_their_count_and_plots_fold(
    tmp_path: Path,
) -> None:
    ev, _ = build(Inputs(bundles=[write_bundle(tmp_path / "b", SynthSpec(speedup=0.15))]))
    same = "p99 latency from fewer than 100 samples: read it as a rough figure"
    audit = [
        Finding(code="too-few-samples", severity="warning", message=same, gpu=g, runs=[f"r{i}"])
        for i, g in enumerate(["H100", "H100", "H200", "H200"])
    ]
    audit.append(Finding(code="too-few-samples", severity="warning", message="other", gpu="H200"))
    ev = ev.model_copy(update={"audit": audit})
    comment = render.render_comment(ev, REPORT_URL)
    lines = [x for x in comment.split("\n") if x.startswith("- `too-few-samples`")]
    assert len(lines) == 2
    assert lines[0].startswith("- `too-few-samples` ×4 (H100, H200): ")
    assert "r0, r1, r2, r3" in lines[0].replace("`", "")
    assert "**Warnings (5)**" in comment
    assert "- `too-few-samples` ×4" in render.render_check(ev, REPORT_URL)
    # The full report lists each one.
    [group] = render.audit_groups(ev.audit)
    assert group.codes[0].count == 5
    assert len(group.codes[0].findings) == 5
