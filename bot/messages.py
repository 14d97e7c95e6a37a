"""The App's words on GitHub. Every text is a macro of `pr_templates/app.md.j2`, rendered
in the evidence engine's template environment, so a figure or an interval reads the
same in the ledger, the check run and the evidence. End reasons are stored as codes and
rendered here."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from markupsafe import Markup

from bot import repeats, triggers
from bot.approvals import Outsider
from bot.commands import Mistake
from bot.models import Verification
from bot.repo_config import ConfigResult, render_error
from bot.verification.machine import JobState, State
from bot.verification.reasons import AWAITING_APPROVAL, Reason
from evidence import inert
from evidence.model import Candidate
from evidence.render import (
    COMMENT_MARKER,
    SECTION_END,
    SECTION_START,
    environment,
    tidy_markdown,
)

CLAIM_WORDS = {
    "confirmed": "claim holds",
    "weakened": "claim weakened",
    "not-reproduced": "claim gone",
    "inconclusive": "claim undecided",
    "none": "no claim",
}


@cache
def _macros() -> Any:
    return environment().get_template("app.md.j2").module


def _say(name: str, *args: Any) -> str:
    return str(getattr(_macros(), name)(*args)).strip()


@dataclass(frozen=True)
class JobView:
    gpu: str
    state: str
    url: str | None
    reason: Reason | None


def jobs(v: Verification) -> list[JobView]:
    return [
        JobView(j.gpu, j.state, j.html_url, Reason.from_json(j.end_reason))
        for j in sorted(v.jobs, key=lambda j: j.gpu)
    ]


def reason(r: Reason) -> str:
    return _say("reason", r)


def reason_plain(r: Reason) -> str:
    """The reason as plain text (no links, code spans or character references), for the
    evidence engine, whose templates escape it again for HTML and Markdown."""
    return inert.markdown_to_plain(reason(r))


def end_reason(v: Verification) -> str:
    r = Reason.from_json(v.end_reason)
    return reason(r) if r is not None else ""


# ----------------------------------------------------------------------- PR body


def status_section(v: Verification) -> str:
    return f"{SECTION_START}\n{_say('status_section', v)}\n{SECTION_END}\n"


def body_pending(newer: Verification, shown: Verification) -> str:
    """The PR body's line while a newer commit is measured: the figures are older."""
    return _say("body_pending", newer, shown)


def not_measured_section(vid: str, why: Reason) -> str:
    """The PR body's section when nothing of the PR's head is measured, and why."""
    return f"{SECTION_START}\n{_say('not_measured_section', vid, why)}\n{SECTION_END}\n"


def pr_opening(candidate: Candidate, compare_url: str, section: str) -> str:
    return (
        environment()
        .get_template("pr_open.md.j2")
        .render(candidate=candidate, compare_url=compare_url, status_section=Markup(section))
    )


def pr_title(candidate: Candidate) -> str:
    """The candidate's title for the PR it opens: one line, mentions and references
    broken (GitHub links `#123` in a title too)."""
    return str(inert.plain(candidate.title, 256))


def config_error(result: ConfigResult) -> str:
    return render_error(result)


# ----------------------------------------------------------------------- check run


def check_queued(v: Verification) -> tuple[str, str]:
    return _say("title_queued"), _say("check_queued", v)


def _awaits(v: Verification) -> Reason:
    """Why a verification awaits approval (who pushed which head)."""
    return Reason.from_json(v.end_reason) or Reason(AWAITING_APPROVAL, {"sha": v.head_sha})


def check_awaiting(v: Verification) -> tuple[str, str]:
    return _say("title_awaiting"), _say("check_awaiting", v, _awaits(v))


def approve_action(identifier: str) -> dict[str, str]:
    """The Approve and verify button of a check run awaiting approval (GitHub's limits:
    label 20 characters, description 40, identifier 20)."""
    return {
        "label": _say("approve_action_label")[:20],
        "description": _say("approve_action_description")[:40],
        "identifier": identifier[:20],
    }


def check_running(v: Verification) -> tuple[str, str]:
    return _say("title_running", v), _say("check_running", v, jobs(v))


def _failed_jobs(v: Verification) -> list[JobView]:
    return [j for j in jobs(v) if j.state != JobState.KEPT.value and j.reason is not None]


def check_published(v: Verification, check_md: str) -> tuple[str, str]:
    failed = _failed_jobs(v)
    if failed:
        check_md = _say("partial_note", failed, False, v.watch) + "\n\n" + check_md
    return _say("title_published", v, failed), check_md


def evidence_linked(report_url: str) -> str:
    """A check run's evidence when its summary could not be read back: the report."""
    return _say("evidence_linked", report_url)


def hunt_check(h: Any) -> tuple[str, str]:
    """The words a hunt adds to its suspect merge's check run: the title's tail, and the
    paragraph above the evidence (`bot.hunt_check.Hunt`)."""
    return _say("hunt_check_title", h), _say("hunt_check_text", h)


def check_ended(v: Verification) -> tuple[str, str]:
    why = Markup(end_reason(v))  # the App's own Markdown: kept as it is
    return _say("title_ended", v, why), _say("check_ended", v, why, jobs(v))


# ----------------------------------------------------------------------- the comment


@dataclass
class LedgerRow:
    sha: str
    when: str
    trigger: str
    cells: dict[str, Cell] = field(default_factory=dict)
    claim: str = ""
    current: bool = False
    url: str | None = None  # the commit's page
    base: str = ""  # the base it was measured against


@dataclass(frozen=True)
class Cell:
    """One GPU's ledger cell, worded by the template: the headline measured, or the
    job's state and run where nothing was."""

    headline: dict[str, Any] | None = None
    state: str | None = None
    url: str | None = None


def ledger_cell(c: Cell) -> str:
    """A ledger cell as the comment shows it."""
    return _say("ledger_cell", c)


def gpu_time(v: Verification) -> list[tuple[str, dict[str, Any]]]:
    """(GPU kind, headline) of each GPU kind whose bundle recorded its GPU minutes (each
    side's, start-ups included), for the template's `gpu_time`."""
    out = []
    for g, h in (v.headline or {}).items():
        m = (h or {}).get("gpu_minutes") or {}
        if isinstance(m.get("total"), int | float):
            out.append((g, h))
    return out


_MENTION = re.compile(r"@([A-Za-z0-9-]+(?:\[bot\])?)")


def trigger_words(stored: str) -> Markup:
    """What started a verification, in words (`bot.triggers`): "push by `@user`", the
    login in a code span, which notifies nobody (the ledger is rewritten often)."""
    known = triggers.parse(stored)
    if known is not None:
        kind, arg = known
        login = _MENTION.fullmatch("@" + arg) is not None
        # A login is only letters, digits, dashes and `[bot]`: as it is in its code span.
        return Markup(_say("trigger", kind, Markup(arg) if login else arg, login))
    return _legacy_trigger(stored)


def _legacy_trigger(trigger: str) -> Markup:
    """A trigger stored as free text before kinds: its logins in code spans, the rest
    inert text."""
    out, pos = [], 0
    for m in _MENTION.finditer(trigger):
        out += [inert.text(trigger[pos : m.start()]), f"`@{m.group(1)}`"]
        pos = m.end()
    out.append(inert.text(trigger[pos:]))
    return Markup("".join(out))


def _row(v: Verification, current: bool) -> LedgerRow:
    row = LedgerRow(
        sha=v.head_sha,
        when=v.created_at.strftime("%Y-%m-%d %H:%M"),
        # A login in a code span notifies nobody: the ledger is rewritten often.
        trigger=trigger_words(v.trigger),
        current=current,
    )
    # Measured numbers stay in the row whatever came after (a verification superseded
    # after its evidence was recorded keeps them).
    for g, h in (v.headline or {}).items():
        row.cells[g] = Cell(headline=h) if h else Cell()
    if v.state == State.PUBLISHED.value:
        row.claim = CLAIM_WORDS.get(v.claim_status or "none", "")
    else:
        row.claim = v.state
    for j in jobs(v):
        if j.gpu not in row.cells and j.reason is not None:
            # The reason itself is said once, under the table; the cell stays short.
            row.cells[j.gpu] = Cell(state=j.state, url=j.url)
    return row


def ledger_rows(
    verifications: list[Verification], current: str, web_url: str | None = None
) -> list[LedgerRow]:
    """Oldest first: a row for every verification that measured (a published row is
    never replaced: measuring a commit again adds a row), and each commit's latest
    verification when nothing measured came after it (its status: running, failed…);
    each commit linked to its page under `web_url`."""
    last = {v.head_sha: i for i, v in enumerate(verifications)}
    rows = []
    for i, v in enumerate(verifications):
        if v.headline or v.state == State.PUBLISHED.value or last[v.head_sha] == i:
            row = _row(v, v.id == current)
            row.base = v.base_sha
            if web_url and _SLUG.fullmatch(v.head_repo or "") and _SHA.fullmatch(v.head_sha):
                row.url = f"{web_url}/{v.head_repo}/commit/{v.head_sha}"
            rows.append(row)
    return rows


_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+")
_SHA = re.compile(r"[0-9a-f]{40}")


def ledger(
    rows: list[LedgerRow],
    *,
    budget: int,
    main_moved: int = 0,
    base_ref: str = "main",
    base_sha: str = "",
) -> str:
    """The ledger table within `budget` characters: the oldest rows fold first."""
    gpus = sorted({g for r in rows for g in r.cells})
    again = repeats.repeats(
        (r.sha, r.base, g, c.headline) for r in rows for g, c in r.cells.items() if c.headline
    )
    folded = 0
    while True:
        shown = rows[folded:]
        text = _say("ledger", shown, gpus, folded, main_moved, base_ref, base_sha, again)
        if len(text) <= budget or len(shown) <= 1:
            return text
        folded += max(1, (len(shown) + 1) // 4)


def evidence_comment(
    verifications: list[Verification],
    *,
    current: str,
    evidence: str | None,
    good: Verification | None,
    main_moved: int,
    base_ref: str,
    ledger_budget: int,
    web_url: str | None = None,
) -> str:
    """Marker, ledger, the latest verification's status, then the latest good evidence:
    a later failure adds a row and a line; it never takes the evidence away. Commits
    link to their pages under `web_url` (GitHub's address)."""
    # The newest head awaits approval: the top says so, and its row is the current one.
    last = verifications[-1] if verifications else None
    waiting = last if last and last.state == State.AWAITING_APPROVAL.value else None
    # Merged or closed (what still ran was cancelled): no command to invite, not even
    # `/rsi reverify base=main` for a main that moved on.
    closed = last is not None and bool(_say("closed_pr", last))
    rows = ledger_rows(verifications, waiting.id if waiting else current, web_url)
    parts = [COMMENT_MARKER]
    if waiting is not None:
        parts.append(_say("awaiting_approval", waiting, _awaits(waiting)))
    parts.append(
        ledger(
            rows,
            budget=ledger_budget - 800,
            main_moved=0 if closed else main_moved,
            base_ref=base_ref,
            base_sha=good.base_sha if good else "",
        )
    )
    latest = verifications[-1] if verifications else None
    if latest is not None and latest.state != State.PUBLISHED.value and waiting is None:
        why = Markup(end_reason(latest))
        said = Reason.from_json(latest.end_reason)
        # Each GPU's own reason, as the check run names it, unless the end reason is it.
        failed = [j for j in _failed_jobs(latest) if j.reason != said]
        parts.append(_say("current_status", latest, why, failed, _failed_jobs(latest)))
    if good is not None and evidence is not None:
        failed = _failed_jobs(good)
        if latest is not None and latest.id != good.id:
            parts.append(_say("evidence_of", good))
        if failed:
            parts.append(_say("partial_note", failed, closed))
        marker, _, body = evidence.partition("\n")
        parts.append(body if marker.strip() == COMMENT_MARKER else evidence)
    else:
        parts.append(_say("no_evidence_yet"))
    return tidy_markdown("\n\n".join(p.strip("\n") for p in parts))


def notify(v: Verification, user: str, url: str) -> str:
    return _say("notify", user, v, url)


def answer(user: str, said: Reason) -> str:
    """A reply that mentions `user` and says `said` (a press that approved nothing)."""
    return _say("answer", user, said)


# ----------------------------------------------------------------------- commands


def approval_needed(sender: str, sha: str, outsiders: Sequence[Outsider] = ()) -> str:
    return _say("approval_needed", sender, sha, list(outsiders))


def approval_refused(user: str, sha: str) -> str:
    return _say("approval_refused", user, sha)


def reverify_moved(user: str, seen: str, head: str, named: bool = False) -> str:
    return _say("reverify_moved", user, seen, head, named)


def reverify_which(user: str, given: str | None, head: str) -> str:
    return _say("reverify_which", user, given, head)


def refusal(user: str, repo: str) -> str:
    return _say("refusal", user, repo)


def help_text(errors: list[Mistake]) -> str:
    return _say("help", errors)


# A code span of the App's plain text: a word between single backticks.
_SPAN = re.compile(r"`([^`\s](?:[^`]*[^`\s])?)`")


def _spans(text: str) -> Markup:
    """Plain text of `repo_config.txt.j2` ("… (`gpus` in `.github/rsi.yml`)") as Markdown:
    each pair of backticks a code span rebuilt by `inert.code`, the rest inert text, so
    the spans read as code and not as character references, and a backtick in a value
    can at most move a span's edge, never make anything act."""
    out, pos = [], 0
    for m in _SPAN.finditer(text):
        out += [inert.text(text[pos : m.start()]), inert.code(m.group(1))]
        pos = m.end()
    out.append(inert.text(text[pos:]))
    return Markup("").join(out)


def refused(user: str, problem: str) -> str:
    return _say("refused", user, _spans(problem))


def reverify_queued(user: str, v: Verification) -> str:
    return _say("reverify_queued", user, v)


def not_started(user: str, v: Verification, why: Reason) -> str:
    """A request queued and ended before dispatch: its estimate passes a budget."""
    return _say("not_started", user, v, why)


def reverify_joined(user: str, v: Verification, told: bool) -> str:
    """A request for the measurement already under way: it joined `v` (told: whoever
    asked is told when it ends)."""
    return _say("reverify_joined", user, v, told)


def not_measurable(user: str, state: str, head_repo: bool) -> str:
    return _say("not_measurable", user, state, head_repo)


def no_task(user: str) -> str:
    return _say("no_task", user)


def nothing_to_repeat(user: str) -> str:
    return _say("nothing_to_repeat", user)


def status_reply(v: Verification, user: str, queued_s: float, so_far: bool) -> str:
    """`/rsi status`: `queued_s` seconds queued (`so_far`: still queued)."""
    why = Markup(end_reason(v) if State(v.state).final and v.state != State.PUBLISHED.value else "")
    claim = CLAIM_WORDS.get(v.claim_status or "none", "")
    return _say(
        "status_reply",
        user,
        v,
        trigger_words(v.trigger),
        why,
        claim,
        queued_s,
        so_far,
        jobs(v),
        gpu_time(v),
    )


def nothing_verified(user: str) -> str:
    return _say("nothing_verified", user)


def nothing_running(user: str) -> str:
    return _say("nothing_running", user)


def cancelled(user: str, ids: list[str]) -> str:
    return _say("cancelled", user, ids)


# A GitHub login that may be mentioned: anything else is not named (no mention is made).
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")


def alert(view: Any, author: str) -> str:
    """The alert on a confirmed regression's culprit (`bot.inquiries.AlertView`); its
    author is mentioned when GitHub named one."""
    return _say("alert", view, author if _LOGIN.match(author or "") else "")


def bisect_reply(user: str, q: Any, why: str | None) -> str:
    """The answer to `/rsi bisect`: resumed (`why` None), or why not."""
    return _say("bisect_reply", user, q, why)


def alert_title(view: Any) -> str:
    return _say("alert_title", view)


def triaged(user: str, answer: str, inquiry: Any) -> str:
    return _say("triaged", user, answer, inquiry)


def no_alert(user: str) -> str:
    return _say("no_alert", user)


def verify_held(user: str, v: Verification) -> str:
    """A triager's `/rsi verify`: queued, and waiting for a writer's approval."""
    return _say("verify_held", user, v)


def verify_budget(user: str, which: str, spent: str, budget: str) -> str:
    return _say("verify_budget", user, which, spent, budget)


def unresolved_alert(view: Any) -> str:
    """A confirmed regression the hunt could not trace to one commit (an issue)."""
    return _say("unresolved_alert", view)
