"""Untrusted words are inert: strings an attacker controls (a bundle's manifest and
records, a candidate, a runner) go through every text the App writes — the evidence
comment, the check-run summary and title, the PR body — and the HTML report, and none
of them renders live.

Each Markdown text is parsed with a CommonMark parser (tables, strikethrough, bare-URL
autolinks) and must hold no link, image or HTML of the attacker's, no mention or issue
reference GitHub would act on, no heading the templates do not write, and no control
character; every hostile value must still be there to read, as text. The HTML report must
hold no element or attribute of the attacker's.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from bot import messages
from bot.models import RunnerJob, Verification
from bot.verification import reasons as R
from bot.verification.effects import fit_pr_body
from bot.verification.machine import JobState, State
from bot.verification.reasons import Reason
from evidence import inert
from evidence.build import Inputs, build
from evidence.links import compare_url
from evidence.model import AttributionEntry, Candidate, Evidence
from evidence.render import (
    COMMENT_MARKER,
    SECTION_END,
    SECTION_START,
    render_check,
    render_comment,
    render_pr_section,
    render_report,
    replace_pr_section,
)
from evidence.synth import BASE_SHA, HEAD_SHA
from tests.bundles import clean_bundle, edit_manifest, edit_run, run_ids

REPORT_URL = "https://rsi.example/v/v-demo01/report.html?token=t0k3n"
EVIL = "evil.io"  # the attacker's host: no link may point there

# What an attacker writes wherever a string goes. Each is tagged (H0:, H1:, …) so the
# test can tell it reached the text.
HOSTILE = [
    "@acme/security-team @octocat please look",
    f"[click me](https://{EVIL}/x) and ![pixel](https://{EVIL}/p.png) and [ref][r]",
    f"bare https://{EVIL}/a and <https://{EVIL}/b> and www.{EVIL} and bob@{EVIL}",
    "</details></summary></td></table><details open><summary>fake verdict",
    "<!-- hide everything after this",
    f"--> closed <img src=https://{EVIL}/i.png onerror=alert(1)>",
    "<script>alert(1)</script><b>bold</b><a href=javascript:alert(2)>x</a>",
    "``code`` ` ``` ~~~ break out",
    "a | b | c",
    "line one\n# H1 injected\n- list item\n\n| x | y |\n| - | - |\n",
    "fixes #1 and GH-2 and octo/repo#3",
    "$\\Huge{IMPROVED}$ **bold** _em_",
    f"[r]: https://{EVIL}/ref",
    "{{ 7*7 }} {% raw %} ${x}",
    "rtl \u202eevil\u202c and \u2066isolate\u2069",
]
TAGGED = [f"H{i}:{s}" for i, s in enumerate(HOSTILE)]
ALL = " ".join(TAGGED)
CONTROL = "nul\x00byte\x07bell\x1b[31m\x7fdel\x85nel\u2028ls"
LONG = "A" * 5_000

# What GitHub would act on, in text it shows (after character references are decoded).
ASKED = "maintainer-mia"  # who asked: the App's replies mention them on purpose
MENTION = re.compile(rf"(?<![A-Za-z0-9`])@(?!{ASKED}\b)[A-Za-z0-9]")
REFERENCE = re.compile(r"(?<![A-Za-z0-9&])#\d|\bGH-\d", re.IGNORECASE)
AUTOLINK = re.compile(rf"(?i)(://|www\.|@){re.escape(EVIL)}")
CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

MD = MarkdownIt("commonmark", {"linkify": True}).enable(["table", "strikethrough", "linkify"])
MD.linkify.set({"fuzzy_link": False, "fuzzy_email": False})

OUR_COMMENTS = {COMMENT_MARKER, SECTION_START, SECTION_END}


# ----------------------------------------------------------------------- the inputs


def hostile_candidate() -> Candidate:
    return Candidate.model_validate(
        {
            "candidate_id": "cand-" + HOSTILE[0] + HOSTILE[7],
            "task": "cosyvoice3",
            "repo": "sgl-project/sglang-omni",
            "base_sha": BASE_SHA,
            "head": {
                "repo": "openrsi-bot/sglang-omni",
                "ref": "rsi/x",
                "sha": HEAD_SHA,
            },
            "title": ("T " + HOSTILE[0] + " " + HOSTILE[10] + " " + HOSTILE[3])[:256],
            "summary": "\n".join(TAGGED) + "\n" + CONTROL,
            "claim": {"metric": "throughput_qps", "mode": "streaming", "delta_pct": 8.0},
            "gpus": ["H200"],
            "default_behavior_changes": TAGGED[:8],
            "caveats": [*TAGGED, CONTROL, LONG],
        }
    )


def hostile_evidence(root: Path) -> Evidence:
    """A bundle whose every free-text field an attacker wrote, through the real pipeline."""
    bundle = clean_bundle(
        root / "bundle", modes=("streaming",), concurrencies=(4,), rounds=3, requests=30
    )
    head_runs = run_ids(bundle, side="head")

    def rename_sample(rows: list[dict[str, object]], run: dict[str, object]) -> None:
        rows[0]["id"] = TAGGED[1] + TAGGED[0]  # a sample only the head has

    edit_run(bundle, head_runs[0], rename_sample)

    def manifest(doc: dict[str, object]) -> None:
        doc["task"] = TAGGED[0] + TAGGED[7]
        doc["runner"] = {"name": TAGGED[3] + TAGGED[0], "labels": TAGGED[:3]}
        env: dict[str, dict[str, object]] = doc["environment"]  # type: ignore[assignment]
        for side in ("base", "head"):
            e = env[side]
            e["image"] = TAGGED[2] + TAGGED[7]
            for i, s in enumerate(TAGGED):
                e[f"K{i}{s}"] = f"{side} {s}"
        runs: list[dict[str, object]] = doc["runs"]  # type: ignore[assignment]
        failed = next(r for r in runs if r["id"] == head_runs[-1])
        failed["status"] = "failed"
        failed["error"] = ALL
        failed["log_tail"] = "starting\n" + TAGGED[4] + TAGGED[3] + TAGGED[1]
        # A design the engine does not know, every word of it the attacker's.
        doc["design"] = {
            "name": TAGGED[5] + TAGGED[0] + LONG,
            "paired": True,
            "unit": TAGGED[6],
            "summary": ALL + CONTROL,
            "assumes": [ALL, TAGGED[9] + LONG],
            "servers": {"base": [{"rows": [ALL], "memory_fraction": 0.5}]},
        }

    edit_manifest(bundle, manifest)
    ev, _ = build(Inputs(bundles=[bundle], candidate=hostile_candidate()))
    # Other PRs merged in the range: their titles are other people's words.
    ev.attribution = [
        AttributionEntry(number=5, title=ALL, url="https://github.com/sgl-project/x/pull/5")
    ]
    # What a runner that never reported sends back, as the App words it.
    ev.missing["H100"] = messages.reason_plain(
        Reason(R.BUNDLE_REJECTED, {"gpu": "H100", "problem": ALL + CONTROL + LONG})
    )
    return ev


def hostile_verification(state: State) -> Verification:
    v = Verification(
        id=f"v-hostile-{state.value}",
        created_at=datetime(2026, 1, 5, 9, 30, tzinfo=UTC),
        repo="sgl-project/sglang-omni",
        task=TAGGED[0],
        base_sha=BASE_SHA,
        head_sha=HEAD_SHA if state == State.PUBLISHED else "5" * 40,
        head_repo="openrsi-bot/sglang-omni",
        head_ref="rsi/x",
        gpus=["H100", "H200"],
        rounds=3,
        modes=["streaming"],
        candidate={},
        trigger="/rsi reverify by @maintainer-mia",
        state=state.value,
        verdict="improved" if state == State.PUBLISHED else None,
        reason=ALL if state == State.PUBLISHED else None,
        end_reason=Reason(R.STEP_FAILED, {"attempts": 3, "step": TAGGED[7], "error": ALL}).to_json()
        if state != State.PUBLISHED
        else None,
    )
    v.jobs = [
        RunnerJob(
            gpu="H100",
            state=JobState.FAILED.value,
            html_url=f"javascript:alert(1)//{EVIL}",
            end_reason=Reason(R.BUNDLE_REJECTED, {"gpu": "H100", "problem": ALL}).to_json(),
        ),
        RunnerJob(
            gpu="H200",
            state=JobState.FAILED.value,
            end_reason=Reason(
                R.RUN_FAILED, {"gpu": "H200", "conclusion": TAGGED[7], "url": None}
            ).to_json(),
        ),
    ]
    return v


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> Evidence:
    return hostile_evidence(tmp_path_factory.mktemp("hostile"))


def renderings(ev: Evidence) -> tuple[dict[str, str], dict[str, str]]:
    """Every Markdown text the App writes with these words in it, and every plain one."""
    cand = hostile_candidate()
    section = render_pr_section(ev, REPORT_URL)
    url = compare_url("https://github.com", cand.repo, BASE_SHA, HEAD_SHA, cand.head.repo)
    opening = fit_pr_body(messages.pr_opening(cand, url, section))
    published = hostile_verification(State.PUBLISHED)
    failed = hostile_verification(State.FAILED)
    title_p, check_p = messages.check_published(published, render_check(ev, REPORT_URL))
    title_f, check_f = messages.check_ended(failed)
    comment = messages.evidence_comment(
        [failed, published],
        current=published.id,
        evidence=render_comment(ev, REPORT_URL),
        good=published,
        main_moved=0,
        base_ref="main",
        ledger_budget=20_000,
    )
    markdown = {
        "evidence comment": render_comment(ev, REPORT_URL),
        "comment with ledger": comment,
        "check summary": check_p,
        "check summary (ended)": check_f,
        "PR body section": fit_pr_body(replace_pr_section("Author's words.", section)),
        "PR body as opened": opening,
        "status reply": messages.status_reply(failed, ASKED, 300.0, False),
    }
    plain = {
        "check title": title_p,
        "check title (ended)": title_f,
        "PR title": messages.pr_title(cand),
    }
    return markdown, plain


# ----------------------------------------------------------------------- the checks


def walk(tokens: list[Token]) -> Iterator[Token]:
    for t in tokens:
        yield t
        if t.children:
            yield from walk(t.children)


class Tags(HTMLParser):
    """Elements, attributes and comments in a piece of HTML."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.comments: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        self.tags.append(("/" + tag, []))

    def handle_comment(self, data: str) -> None:
        self.comments.append(f"<!--{data}-->")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse_html(text: str) -> Tags:
    p = Tags()
    p.feed(text)
    p.close()
    return p


def problems(where: str, text: str) -> list[str]:
    """What in a Markdown text GitHub would render live, or should never be there."""
    out = []
    if CONTROLS.search(text):
        out.append(f"{where}: a control character: {CONTROLS.search(text)!r}")
    if "A" * (inert.LOG_LIMIT + 1) in text:
        out.append(f"{where}: a value longer than any bound")
    shown: list[str] = []  # text GitHub shows, character references decoded
    in_link = 0  # link text is the App's own (its target is checked)
    for t in walk(MD.parse(text)):
        in_link += {"link_open": 1, "link_close": -1}.get(t.type, 0)
        href = str(t.attrs.get("href"))
        if t.type == "link_open" and (EVIL in href or not href.startswith(("https://", "#"))):
            out.append(f"{where}: a link to {href}")
        elif t.type == "image" and EVIL in str(t.attrs.get("src")):
            out.append(f"{where}: an image from {t.attrs['src']}")
        elif t.type == "html_inline":
            out.append(f"{where}: inline HTML {t.content!r}")
        elif t.type == "html_block":
            tags = parse_html(t.content)
            bad = [tag for tag, _ in tags.tags if tag.strip("/") not in ("details", "summary")]
            bad += [c for c in tags.comments if c not in OUR_COMMENTS]
            if bad or any(attrs for _, attrs in tags.tags):
                out.append(f"{where}: HTML of the input's: {bad} in {t.content[:120]!r}")
            shown += tags.text
        elif t.type == "heading_open" and t.tag == "h1":
            out.append(f"{where}: a heading the templates do not write")
        elif t.type == "text" and not in_link:  # GitHub links nothing inside code
            shown.append(t.content)
    for s in shown:
        for name, rx in (("mention", MENTION), ("reference", REFERENCE), ("autolink", AUTOLINK)):
            if m := rx.search(s):
                out.append(f"{where}: a live {name} {s[max(0, m.start() - 20) : m.end() + 20]!r}")
    return out


def visible(text: str) -> str:
    """The text a reader sees, roughly: character references decoded, no zero-width
    spaces."""
    return html.unescape(text).replace(inert.ZWSP, "")


def test_hostile_words_render_as_text_everywhere(evidence: Evidence) -> None:
    texts, plain = renderings(evidence)
    found = [p for where, text in texts.items() for p in problems(where, text)]
    assert not found, "\n".join(found)
    # Still there to read, and nothing after them was swallowed.
    for where in ("evidence comment", "comment with ledger", "PR body as opened"):
        seen = visible(texts[where])
        for s in ("@acme/security-team", "</details>", "<!-- hide", "<script>", "{{ 7*7 }}"):
            assert s in seen, f"{where}: {s!r} is not shown"
    for where in ("evidence comment", "check summary", "PR body section", "PR body as opened"):
        tokens = MD.parse(texts[where])
        headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
        assert "Reproduce" in headings, f"{where}: the Reproduce section was swallowed"
    assert texts["PR body section"].rstrip().endswith(SECTION_END)
    # The attacker's design is named, as text, and analysed as nothing it claims.
    assert "H5:" in visible(texts["evidence comment"]).split("How it was measured")[1]
    assert "not a design this engine knows" in texts["check summary"]
    # A pipe stays inside its table cell.
    cells = [
        visible(t.content) for t in walk(MD.parse(texts["evidence comment"])) if t.type == "inline"
    ]
    assert "K8H8:a | b | c" in [c.strip("*") for c in cells]
    # Plain-text places (titles) hold no Markdown or references of the input's.
    for where, title in plain.items():
        assert "\n" not in title, where
        assert not CONTROLS.search(title), where
        assert not MENTION.search(title), where
        assert not REFERENCE.search(title), where
        assert not AUTOLINK.search(title), where
        assert "&#" not in title, f"{where}: character references in plain text"


def test_the_report_page_holds_no_element_of_the_inputs(evidence: Evidence, tmp_path: Path) -> None:
    page = render_report(evidence, tmp_path)
    parsed = parse_html(page)
    names = {tag.strip("/") for tag, _ in parsed.tags}
    assert not names & {"script", "iframe", "details", "summary", "b"}, names
    for tag, attrs in parsed.tags:
        for k, v in attrs:
            assert not k.startswith("on"), (tag, k, v)
            if tag == "img":
                assert k != "src" or str(v).startswith("data:image/png;base64,"), (tag, k)
            if k in ("href", "src"):
                assert EVIL not in str(v), (tag, k, v)
                assert "javascript:" not in str(v).lower(), (tag, k, v)
    assert not parsed.comments
    assert not CONTROLS.search(page)
    text = "".join(parsed.text)
    for s in ("<script>alert(1)</script>", "</details>", "<!-- hide", "@acme/security-team"):
        assert s in text, f"{s!r} is not shown on the report page"


# ----------------------------------------------------------------------- the helpers


def test_code_spans_and_fences_cannot_be_closed_early() -> None:
    assert inert.code("a`b") == "``a`b``"
    assert inert.code("`x``") == "``` `x`` ```"
    assert inert.code("a | b") == "a &#124; b"  # a pipe would split a table row
    block = inert.fenced("x\n````\n```` y\n", "sh")
    assert block.startswith("`````sh\n")
    assert block.endswith("\n`````")
    tokens = MD.parse(str(block))
    assert [t.type for t in tokens] == ["fence"]
    assert "```` y" in tokens[0].content


def test_values_are_bounded_and_lose_control_characters() -> None:
    assert inert.text("x" * 5_000) == "x" * (inert.TEXT_LIMIT - 1) + "…"
    assert inert.name("n" * 300) == "n" * (inert.NAME_LIMIT - 1) + "…"
    assert len(inert.fenced("L" * 9_000)) < inert.LOG_LIMIT + 20
    assert inert.text("a\x00b\u202ec\n# d") == "abc # d"
    assert inert.text("\ud800lone") == "lone"


def test_ordinary_words_stay_as_they_are() -> None:
    for s in (
        "throughput, streaming, c=4 +5.2% [+1.0%, +9.8%] improved",
        "CUDA_VISIBLE_DEVICES",
        "lmsysorg/sglang-omni:dev",
        "Measured with 8 CPU cores per GPU.",
        "encoder_idle_wait_ms defaults to 2 (was: busy wait)",
    ):
        assert inert.text(s) == s


def test_urls_are_http_and_cannot_leave_their_place() -> None:
    assert inert.href("javascript:alert(1)") == "#"
    assert inert.href(None) == "#"
    assert inert.href("https://x.example/a b") == "#"
    assert inert.href('https://x.example/a"b)c<d>`e') == "https://x.example/a%22b%29c%3Cd%3E%60e"
    assert inert.relative("../x (1).png") == "../x%20%281%29.png"


def test_plain_text_of_the_apps_markdown() -> None:
    md = messages.reason(
        Reason(R.RUN_FAILED, {"gpu": "H200", "conclusion": "fail`ure", "url": None})
    )
    assert "``fail`ure``" in md
    plain = messages.reason_plain(
        Reason(R.BUNDLE_REJECTED, {"gpu": "H200", "problem": "<b> & @x [y](z)"})
    )
    assert plain == f"the H200 bundle was rejected: <b> & @{inert.ZWSP}x [y](z)"


@pytest.mark.parametrize(
    "author",
    [
        "Fixes the decoder.\n\n<details><summary>notes</summary>\n\nstill open",
        "Fixes the decoder.\n\n```python\nprint('a fence left open')",
        "Fixes it.\n\n~~~~\n```\nstill in the tilde fence",
        "<DETAILS open>\n<details>\n\n</details>\n<pre>\n",
    ],
)
def test_the_authors_open_blocks_cannot_swallow_the_evidence(author: str) -> None:
    from evidence.render import SECTION_END, SECTION_START, replace_pr_section

    section = f"{SECTION_START}\n## rsi-bot evidence\n\nImproved.\n{SECTION_END}"
    for body in (author, f"{author}\n\n{section}\n\nThe author's end."):
        out = replace_pr_section(body, section)
        assert out.startswith(author)  # the author's text is kept byte for byte
        tokens = MD.parse(out)
        headings = [
            tokens[i + 1].content
            for i, t in enumerate(tokens)
            if t.type == "heading_open" and t.level == 0
        ]
        assert "rsi-bot evidence" in headings, out
        # and no HTML block of the author's is open where the section starts (GitHub
        # would fold the evidence into the author's <details>)
        before = out[: out.index("## rsi-bot evidence")].lower()
        for tag in ("details", "pre"):
            assert before.count(f"<{tag}") == before.count(f"</{tag}>"), (tag, out)
        assert replace_pr_section(out, section) == out  # idempotent
