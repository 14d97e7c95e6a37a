"""`/rsi` commands in PR comments: reverify, status, cancel, help.

Allowed for users with write, maintain or admin on the repository, or on the config's
allow-list. A reaction acknowledges at once; a refusal is polite and says who may. Edited
comments, comments by bots and comments on issues that are not tracked PRs are ignored.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from sqlalchemy import select

from bot import reviews, runtime, trust
from bot.models import ACTIVE, PullRequest, RunnerJob, Verification, utcnow
from bot.routing import Payload, Router

router = Router()
COMMAND = re.compile(r"^\s*/rsi(?:\s+(.*))?$", re.MULTILINE)

HELP = """**rsi-bot commands** (for users with write access, or listed in `.github/rsi.yml`):

- `/rsi reverify [h100|h200|all] [rounds=N] [base=main]` — measure the PR's current head
  again (on one GPU kind or all; `base=main` measures against the current main). This also
  approves exactly the current head commit for the GPU runners.
- `/rsi status` — where the current verification stands, time queued, expected GPU time.
- `/rsi cancel` — cancel the running verification.
- `/rsi help` — this text."""


@dataclass
class Command:
    name: str
    gpus: list[str] | None = None
    rounds: int | None = None
    base_main: bool = False
    errors: list[str] = field(default_factory=list)


def parse(text: str) -> Command | None:
    m = COMMAND.search(text)
    if m is None:
        return None
    words = (m.group(1) or "").split()
    if not words:
        return Command("help")
    name, args = words[0].lower(), words[1:]
    cmd = Command(name if name in ("reverify", "status", "cancel", "help") else "help")
    if name not in ("reverify", "status", "cancel", "help"):
        cmd.errors.append(f"unknown command `{words[0]}`")
    for arg in args if cmd.name == "reverify" else []:
        low = arg.lower()
        if low in ("h100", "h200"):
            cmd.gpus = [low.upper()]
        elif low == "all":
            cmd.gpus = None
        elif low.startswith("rounds=") and low[7:].isdigit():
            cmd.rounds = int(low[7:])
        elif low == "base=main":
            cmd.base_main = True
        else:
            cmd.errors.append(f"unknown argument `{arg}`")
    return cmd


@router.register("issue_comment", "created")
def commented(payload: Payload) -> None:
    comment, issue = payload["comment"], payload["issue"]
    if "pull_request" not in issue or payload["sender"].get("type") == "Bot":
        return
    cmd = parse(comment.get("body") or "")
    if cmd is None:
        return
    rt = runtime.current()
    repo = payload["repository"]["full_name"]
    with rt.db.session() as s:
        pr = s.scalar(
            select(PullRequest).where(
                PullRequest.repo == repo, PullRequest.number == issue["number"]
            )
        )
        if pr is None:
            return
    user = comment["user"]["login"]
    gh_issue = rt.github.repo(repo).get_issue(issue["number"])
    gh_issue.get_comment(comment["id"]).create_reaction("eyes")
    result = rt.repo_config(repo)
    allowed = user.lower() in {u.lower() for u in result.config.trigger.allow} or trust.can_write(
        rt, repo, user
    )
    if not allowed:
        gh_issue.create_comment(
            f"Sorry @{user}, `/rsi` commands are for people with write access to {repo} "
            "(or listed under `trigger.allow` in `.github/rsi.yml`). A maintainer can run "
            "it for you."
        )
        return
    if cmd.errors or cmd.name == "help":
        note = ("; ".join(cmd.errors) + ".\n\n") if cmd.errors else ""
        gh_issue.create_comment(note + HELP)
        return
    reply = {"reverify": _reverify, "status": _status, "cancel": _cancel}[cmd.name](
        rt, repo, issue["number"], user, cmd
    )
    if reply:
        gh_issue.create_comment(reply)


def _reverify(rt: runtime.Runtime, repo: str, number: int, user: str, cmd: Command) -> str:
    config = rt.repo_config(repo).config
    budget = config.budget
    if cmd.rounds is not None and cmd.rounds > budget.max_rounds:
        return (
            f"@{user} `rounds={cmd.rounds}` is over this repository's budget of "
            f"{budget.max_rounds} rounds a command (`budget.max_rounds` in "
            "`.github/rsi.yml`)."
        )
    gh_pr = rt.github.repo(repo).get_pull(number)
    base_sha = None
    if cmd.base_main or config.base == "main":
        base_sha = rt.github.repo(repo).get_branch(gh_pr.base.ref).commit.sha
    with rt.db.session() as s:
        pr = s.scalar(
            select(PullRequest).where(PullRequest.repo == repo, PullRequest.number == number)
        )
        assert pr is not None
        pr.head_sha = gh_pr.head.sha
        trust.approve(s, repo, number, pr.head_sha, user)
        v = reviews.verify_head(
            rt,
            s,
            pr,
            trigger=f"/rsi reverify by @{user}",
            requested_by=user,
            gpus=cmd.gpus,
            rounds=cmd.rounds,
            base_sha=base_sha,
        )
        if v is None:
            return f"@{user} there is no earlier verification of this PR to repeat."
        vid, head, gpus, rounds = v.id, v.head_sha, v.gpus, v.rounds
        base = v.base_sha
    rt.tasks.start(vid)
    return (
        f"@{user} verification `{vid}` of `{head[:10]}` against `{base[:10]}` is "
        f"queued on {', '.join(gpus)} ({rounds} rounds a side)."
    )


def _status(rt: runtime.Runtime, repo: str, number: int, user: str, cmd: Command) -> str:
    with rt.db.session() as s:
        v = reviews.latest(s, repo, number)
        if v is None:
            return f"@{user} nothing has been verified on this PR yet."
        now = utcnow()
        created = _aware(v.created_at)
        dispatched = _aware(v.dispatched_at) if v.dispatched_at else None
        queued = ((dispatched or now) - created).total_seconds()
        expected = _expected_gpu_minutes(s, v.task)
        lines = [
            f"Verification `{v.id}` of `{v.head_sha[:10]}` ({v.trigger}): "
            f"**{v.state}**"
            + (f" — {v.reason}" if v.reason and v.state not in ACTIVE else "")
            + ".",
            f"- queued for {_human(queued)}" + (" so far" if dispatched is None else ""),
            "- runners: " + ", ".join(f"{j.gpu} {j.state}" for j in v.jobs),
        ]
        if expected is not None:
            lines.append(
                f"- expected GPU time: about {expected:.0f} minutes per GPU "
                "(median of earlier runs of this task)"
            )
        else:
            lines.append("- expected GPU time: unknown (no earlier run of this task)")
        return "\n".join(lines)


def _cancel(rt: runtime.Runtime, repo: str, number: int, user: str, cmd: Command) -> str:
    with rt.db.session() as s:
        running = reviews.active(s, repo, number)
        if not running:
            return f"@{user} nothing is running on this PR."
        for v in running:
            reviews.cancel(rt, s, v, f"Cancelled by @{user} with `/rsi cancel`.")
        ids = ", ".join(f"`{v.id}`" for v in running)
    return f"@{user} cancelled {ids}."


def _expected_gpu_minutes(s: object, task: str) -> float | None:
    from statistics import median

    from sqlalchemy.orm import Session

    assert isinstance(s, Session)
    rows = s.execute(
        select(RunnerJob.dispatched_at, RunnerJob.completed_at)
        .join(Verification)
        .where(Verification.task == task, RunnerJob.conclusion == "success")
        .order_by(RunnerJob.completed_at.desc())
        .limit(20)
    ).all()
    spans = [(_aware(b) - _aware(a)).total_seconds() / 60 for a, b in rows if a and b]
    return median(spans) if spans else None


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def _human(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
