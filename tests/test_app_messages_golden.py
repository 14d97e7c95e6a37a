"""Golden files for the App's own words: each message kind (replies, check runs, the
comment's ledger and status, end reasons, the `.github/rsi.yml` refusals, the setup and
pending pages, the cut notice), rendered with hostile strings as every value a user or a
runner can choose, and compared exactly with tests/golden/app/<kind>. A change to a
template's output fails here until the golden file is rewritten:

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_app_messages_golden.py
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from bot import messages, triggers
from bot.approvals import Outsider
from bot.commands import Mistake
from bot.estimate import Estimate, GpuEstimate
from bot.github.api import fit
from bot.inquiries import AlertView, StepView
from bot.models import Inquiry, RunnerJob, Verification
from bot.repo_config import parse, render_error
from bot.verification import fresh
from bot.verification.reasons import Reason
from bot.web.reports import pending_page
from evidence.model import Candidate
from evidence.render import COMMENT_MARKER, cut_notice, environment
from tests.test_render import assert_golden

# Markdown and HTML injection, GitHub's mentions and references, line breaks, control
# and bidirectional characters: each is a value the App must show as text.
HOSTILE = [
    "<script>alert(1)</script>",
    "[x](javascript:alert(1)) ](javascript:alert(2)) ![i](https://evil.io/p.png)",
    "``` `code` `` ~~~",
    "@octocat @acme/security-team",
    "#123 GH-7 octo/repo#9",
    "<!-- hidden --> -->",
    "one\r\n# two\r- three\n| four |",
    "rtl \u202eevil\u202c",
    "nul\x00byte\x1b[31m",
]
WORDS = " ".join(HOSTILE)
LONG = "L" * 3_000
URL = "javascript:alert(1)//evil.io"
SHA = "0123456789abcdef0123456789abcdef01234567"
BASE = "fedcba9876543210fedcba9876543210fedcba98"

# The codes of bot.verification.reasons, each with every parameter hostile.
CODES = (
    "run-failed",
    "run-cancelled",
    "run-timed-out",
    "no-report",
    "no-bundle",
    "bundle-rejected",
    "bundle-unreadable",
    "no-evidence",
    "cancelled-by",
    "pr-closed",
    "superseded-by",
    "step-failed",
    "head-not-tip",
    "awaiting-approval",
    "approval-stale",
    "watch-budget",
    "watch-behind",
    "over-budget",
    "queue-full",
)
NAMES = ("gpu", "conclusion", "minutes", "artifact", "user", "state", "id", "sha", "step")
NAMES += ("tip", "branch", "head", "pusher", "spent", "budget", "field", "got", "want", "detail")
NAMES += ("kind", "verdict", "limit", "steps", "which", "low", "queued", "most")
PARAMS = dict.fromkeys(NAMES, WORDS) | {"url": URL, "problem": WORDS + LONG, "error": WORDS + LONG}
PARAMS["attempts"] = WORDS
PARAMS["log"] = [*HOSTILE, "````", "</details>"]  # a failed job's last log lines


def reason(code: str) -> Reason:
    return Reason(code, dict(PARAMS))


def estimated(
    v: Verification, low: float, typical: float, high: float, capped: bool = False
) -> Verification:
    """`v` with an estimate of its GPU minutes, split over its GPU kinds; the basis is the
    hostile words (a task name reaches it)."""
    n = len(v.gpus)
    v.estimate = Estimate(
        {
            g: GpuEstimate(low / n, typical / n, high / n, f"3 earlier runs on {WORDS}", capped)
            for g in v.gpus
        }
    ).to_json()
    return v


def hostile_verification(state: str, vid: str = "v-golden01") -> Verification:
    published = state == "published"
    v = Verification(
        id=vid,
        created_at=datetime(2026, 1, 5, 9, 30, tzinfo=UTC),
        repo="sgl-project/sglang-omni",
        pr_number=7,
        task=WORDS,
        base_sha=BASE,
        head_sha=SHA,
        head_repo="openrsi-bot/sglang-omni",
        head_ref="rsi/x",
        gpus=["H100", "H200"],
        rounds=5,
        adaptive=False,
        modes=["streaming", "non-streaming"],
        candidate={},
        trigger=f"push by @octocat {WORDS}",
        state=state,
        verdict="improved" if published else None,
        claim_status="confirmed" if published else None,
        reason=WORDS if published else None,
        headline={"H100": {"delta_pct": 5.25, "ci_low_pct": 1.0, "ci_high_pct": 9.5}}
        if published
        else None,
        end_reason=None if published else reason("step-failed").to_json(),
    )
    v.jobs = [
        RunnerJob(
            gpu="H100",
            state="kept" if published else "failed",
            html_url=URL,
            end_reason=None if published else reason("bundle-rejected").to_json(),
        ),
        RunnerJob(
            gpu="H200", state="failed", html_url=None, end_reason=reason("run-failed").to_json()
        ),
    ]
    return v


def joined(*texts: str) -> str:
    """Several renderings in one golden file, each after a numbered rule line."""
    return "".join(f"----- {i}\n{t.rstrip(chr(10))}\n" for i, t in enumerate(texts))


def reasons() -> str:
    """Every code, then each kind of rejected bundle (`what`)."""
    bundles = [
        Reason("bundle-rejected", dict(PARAMS) | {"what": what})
        for what in ("unreadable", "too-large", "field", "side", "gpu")
    ]
    bundles.append(Reason("bundle-rejected", dict(PARAMS) | {"what": "gpu", "got": ""}))
    return joined(
        *(messages.reason(reason(code)) for code in CODES), *map(messages.reason, bundles)
    )


def reasons_plain() -> str:
    """The reasons as plain text, for the evidence engine (which escapes them again)."""
    return joined(*(messages.reason_plain(reason(code)) for code in CODES))


def check_runs() -> list[tuple[str, str]]:
    """(title, summary) of each check-run state; the title is plain text."""
    queued, failed = hostile_verification("queued"), hostile_verification("failed")
    published = hostile_verification("published")
    return [
        messages.check_queued(queued),
        messages.check_running(hostile_verification("running")),
        messages.check_published(published, "The evidence's own check summary."),
        messages.check_ended(failed),
    ]


def checks() -> str:
    return joined(*(summary for _, summary in check_runs()))


def check_titles() -> str:
    return joined(*(title for title, _ in check_runs()))


def comment() -> str:
    failed = hostile_verification("failed", "v-golden02")
    published = hostile_verification("published")
    common = {"main_moved": 3, "base_ref": WORDS, "ledger_budget": 20_000}
    return joined(
        messages.evidence_comment(
            [published, failed],
            current=failed.id,
            evidence=f"{COMMENT_MARKER}\nthe evidence",
            good=published,
            **common,  # type: ignore[arg-type]
        ),
        messages.evidence_comment(
            [failed],
            current=failed.id,
            evidence=None,
            good=None,
            **common,  # type: ignore[arg-type]
        ),
        messages.status_section(hostile_verification("dispatched")),
    )


def replies() -> str:
    v, failed = hostile_verification("published"), hostile_verification("failed")
    outsiders = [
        Outsider(SHA, WORDS),
        Outsider(BASE, None, earlier_head=True),
        Outsider(SHA, None, unchecked=True),
    ]
    return joined(
        messages.notify(v, WORDS, URL),
        messages.approval_needed(WORDS, SHA, outsiders),
        messages.approval_refused(WORDS, SHA),
        messages.reverify_moved(WORDS, SHA, BASE),
        messages.reverify_moved(WORDS, SHA, BASE, True),
        messages.reverify_which(WORDS, WORDS, SHA),
        messages.reverify_which(WORDS, None, SHA),
        messages.refusal(WORDS, WORDS),
        messages.help_text(
            [
                Mistake("unknown-argument", WORDS),
                Mistake("unknown-command", WORDS),
                Mistake("bad-rounds", WORDS),
            ]
        ),
        messages.refused(WORDS, WORDS),
        messages.reverify_queued(WORDS, v),
        messages.reverify_joined(WORDS, v, True),
        messages.reverify_joined(WORDS, v, False),
        messages.nothing_to_repeat(WORDS),
        messages.no_task(WORDS),
        messages.verify_held(WORDS, v),
        messages.verify_budget(WORDS, "pr", WORDS, WORDS),
        messages.verify_budget(WORDS, "day", WORDS, WORDS),
        messages.status_reply(failed, WORDS, 45.0, True),
        messages.status_reply(estimated(failed, 0.2, 0.4, 0.5), WORDS, 720.0, False),
        messages.status_reply(estimated(failed, 2.0, 2.35, 2.4), WORDS, 9000.0, False),
        messages.status_reply(estimated(v, 4.0, 12.5, 40.0, capped=True), WORDS, 60.0, False),
        messages.status_reply(hostile_verification("published"), WORDS, 30.0, False),
        messages.reverify_queued(WORDS, estimated(hostile_verification("queued"), 3, 5, 9)),
        messages.nothing_verified(WORDS),
        messages.nothing_running(WORDS),
        messages.cancelled(WORDS, [WORDS, "v-golden01"]),
    )


HOSTILE_YAML = (
    '"<script>alert(1)</script>": 1\n'
    '"@octocat [x](javascript:alert(1)) #123": 2\n'
    'approval: "<!-- `` ` @team GH-7 \\u202e -->"\n'
    "gpus: [a100, '</details>']\n"
    "rounds: 1\n"
)


def config_error() -> str:
    return joined(
        render_error(parse(HOSTILE_YAML, sha=SHA, html_url=URL)),
        render_error(parse(HOSTILE_YAML, html_url="https://github.com/o/r/blob/main/x.yml")),
        render_error(parse('gpus: [h100\n"@octocat": <b>\n', sha=SHA)),
    )


def config_words() -> str:
    config = parse("rounds: 5\nbudget: {gpu_minutes: 90.5, max_rounds: 8}\n").config
    return joined(
        config.summary(),
        str(config.plan(gpus=[WORDS, "h100"])),
        str(config.plan(gpus=[WORDS, "a100"])),
        str(config.plan(rounds=WORDS)),
        str(config.plan(rounds=2)),
        str(config.plan(rounds=9)),
    )


def setup_pages() -> str:
    page = environment().get_template("setup.html.j2")
    app = {
        "name": WORDS,
        "hook_attributes": {"url": WORDS},
        "redirect_url": URL,
        "default_events": HOSTILE,
        "default_permissions": {WORDS: WORDS},
    }
    common = {"public_url": WORDS, "answered": None, "configured": False}
    form = {"action": URL, "manifest": WORDS, "app": app, "org": WORDS, "web_url": WORDS}
    errors = ["not-an-org", "elsewhere", "unknown-state", "no-code", "unreachable"]
    errors += ["code-refused", "not-an-app", WORDS]
    return joined(
        page.render(**common, error=None, **form),
        *(page.render(**common, error=e) for e in errors),
        page.render(**common | {"answered": 500}, error="github-status", **form),
        page.render(**common | {"configured": True}, error=None),
        environment()
        .get_template("setup_done.html.j2")
        .render(
            app_id=WORDS,
            name=WORDS,
            html_url=URL,
            install_url=URL,
            env_file=WORDS,
            webhook_secret_missing=True,
            public_url=WORDS,
        ),
    )


def pending() -> str:
    pages = [pending_page(hostile_verification(s))[0] for s in ("dispatched", "published")]
    for state in ("failed", "cancelled", "superseded", "timed-out"):
        v = hostile_verification(state)
        v.end_reason = reason("cancelled-by" if state == "cancelled" else "step-failed").to_json()
        pages.append(pending_page(v)[0])
    ended = hostile_verification("failed")
    ended.end_reason = None
    pages.append(pending_page(ended)[0])
    return joined(*pages)


def cut() -> str:
    return joined(
        cut_notice(None),
        cut_notice(URL),
        cut_notice(f"https://rsi.example/r?token={WORDS}"),
        fit("The App's own Markdown. " * 20, 200, "https://rsi.example/reports/v-1?token=t"),
    )


def hostile_candidate() -> Candidate:
    """The example candidate with every free-text field a search can write made hostile
    (NUL aside: the intake refuses it before anything is rendered)."""
    doc = json.loads((Path(__file__).parents[1] / "examples" / "candidate.json").read_text())
    words = WORDS.replace("\x00", "")
    doc |= {
        "title": words,
        "summary": words + " " + LONG,
        "caveats": [words, URL],
        "default_behavior_changes": [words],
    }
    return Candidate.model_validate(doc)


def pr_title() -> str:
    """The title of the PR the App opens: plain text (GitHub shows a title as text)."""
    return joined(messages.pr_title(hostile_candidate()))


def pr_opening() -> str:
    """The body of the PR the App opens, with each of its status sections."""
    cand = hostile_candidate()
    url = f"https://github.com/sgl-project/sglang-omni/compare/{BASE}...{SHA}"
    why = reason("head-not-tip")
    return joined(
        messages.pr_opening(cand, url, messages.status_section(hostile_verification("queued"))),
        messages.pr_opening(cand, URL, messages.not_measured_section("v-golden01", why)),
    )


def alerts() -> str:
    """The watch's alert on a regression's culprit (a PR's comment and an issue's
    title), and the answers to `/rsi justified` and `/rsi false-alarm`."""
    steps = [
        StepView("confirm", BASE, SHA, "regressed", -8.25, -9.5, -7.0, URL),
        StepView("bisect", BASE, WORDS, WORDS, None, None, None, None),
    ]
    view = AlertView(
        repo=WORDS,
        task=WORDS,
        gpu=WORDS,
        mode=WORDS,
        metric=WORDS,
        culprit=SHA,
        culprit_pr=7,
        good=BASE,
        bad=SHA,
        commits=8,
        steps=steps,
        history_url=URL,
    )
    single = dataclasses.replace(
        view, commits=1, culprit_pr=None, steps=steps[:1], culprit_step=steps[0]
    )
    inquiry = Inquiry(culprit_sha=SHA)
    return joined(
        messages.alert(view, WORDS),
        messages.alert(view, "alice"),
        messages.alert(single, ""),
        messages.alert_title(view),
        messages.triaged(WORDS, "justified", inquiry),
        messages.triaged(WORDS, "false-alarm", inquiry),
        messages.no_alert(WORDS),
        *(
            messages.unresolved_alert(
                dataclasses.replace(view, lo=BASE, hi=SHA, why={"code": code, "params": PARAMS})
            )
            for code in (
                "step-undecided",
                "range-too-long",
                "bisect-stuck",
                "not-measurable",
                WORDS,
            )
        ),
        messages.unresolved_alert(view),
    )


def trigger_words() -> str:
    """What started a verification, for each kind (a hostile login or branch), and a
    row stored as free text before kinds."""
    stored = [triggers.of(k, WORDS) if k != triggers.INTAKE else k for k in sorted(triggers.KINDS)]
    logins = [triggers.of("push", "dependabot[bot]"), triggers.of("approve", "maintainer-mia")]
    legacy = f"push by @octocat {WORDS}"
    return joined(*(messages.trigger_words(t) for t in [*stored, *logins, legacy]))


def fresh_titles() -> str:
    """The titles of the candidate records the watch, `/rsi verify` and an inquiry's steps
    write (plain text, escaped where shown)."""
    return joined(
        fresh.title("watch", branch=WORDS, sha=SHA),
        fresh.title("pull", number=44),
        fresh.title("confirm", base=BASE, head=SHA),
        fresh.title("bisect", base=BASE, head=SHA),
    )


KINDS: dict[str, Callable[[], str]] = {
    "fresh_titles.txt": fresh_titles,
    "alerts.md": alerts,
    "triggers.md": trigger_words,
    "pr_opening.md": pr_opening,
    "pr_title.txt": pr_title,
    "reasons.md": reasons,
    "reasons_plain.txt": reasons_plain,
    "checks.md": checks,
    "check_titles.txt": check_titles,
    "comment.md": comment,
    "replies.md": replies,
    "config_error.md": config_error,
    "config_words.txt": config_words,
    "setup.html": setup_pages,
    "pending.html": pending,
    "cut.md": cut,
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_app_message_golden(kind: str) -> None:
    assert_golden(f"app/{kind}", KINDS[kind]())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_no_hostile_string_acts(kind: str) -> None:
    """What the golden files hold is inert: nowhere a NUL, an escape or a bidirectional
    override; as HTML (a page, or Markdown as CommonMark renders it) no script element
    and no javascript: link; in Markdown no live mention outside a code span."""
    text = KINDS[kind]()
    for control in ("\x00", "\x1b", "\u202e"):
        assert control not in text
    if kind.endswith(".txt"):
        return  # plain text: whoever shows it escapes it
    html = MD.render(text) if kind.endswith(".md") else text
    assert "<script" not in html
    assert 'href="javascript:' not in html
    if kind.endswith(".md"):
        assert "@octocat" not in SPAN.sub("", text)


MD = MarkdownIt("commonmark")
SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)


@pytest.mark.parametrize("kind", ["push", "push-after-review", "push-awaiting", "rerun", "approve"])
def test_a_bot_login_reads_as_itself_in_a_trigger(kind: str) -> None:
    """A login ending in `[bot]` stays as it is in its code span (an entity there would
    be shown literally), as the free-text rows of before showed it."""
    said = str(messages.trigger_words(triggers.of(kind, "dependabot[bot]")))
    assert "`@dependabot[bot]`" in said
    assert "&#" not in said
    assert "`@dependabot[bot]`" in str(messages.trigger_words("push by @dependabot[bot]"))
