"""A verification with no candidate before it: a push to the default branch, a PR
rsi-bot did not open, a step of an inquiry. Its candidate record is written from what is
measured, so the evidence and the report read it like any other."""

from __future__ import annotations

from sqlalchemy.orm import Session

from bot.models import Verification
from bot.repo_config import Plan
from bot.verification import store
from evidence.render import macro


def title(kind: str, **params: object) -> str:
    """The candidate record's title for a verification of `kind` (watch, pull, confirm,
    bisect): a macro of `pr_templates/fresh.txt.j2`."""
    return macro("fresh.txt.j2", kind, **params)


def verification(
    s: Session,
    *,
    repo: str,
    task: str,
    base: str,
    head: str,
    head_repo: str,
    head_ref: str,
    plan: Plan,
    modes: list[str],
    title: str,
    trigger: str,
    pr_number: int | None = None,
    requested_by: str | None = None,
    installation_id: int | None = None,
    watch: bool = False,
    held: bool = False,
    candidate_id: str | None = None,
    inquiry_id: int | None = None,
) -> Verification:
    """A verification with no candidate before it (a push to main, a PR rsi-bot did not
    open, an inquiry's step): its candidate record is written from what is measured."""
    default_id = ("watch-" + head[:12]) if watch else "pr-" + str(pr_number)
    candidate: dict[str, object] = {
        "candidate_id": candidate_id or default_id,
        "task": task,
        "repo": repo,
        "base_sha": base,
        "head": {"repo": head_repo, "ref": head_ref, "sha": head},
        "title": title,
    }
    if pr_number is not None:
        candidate["pull_request"] = pr_number
    return store.create(
        s,
        store.NewVerification(
            repo=repo,
            pr_number=pr_number,
            task=task,
            base_sha=base,
            head_sha=head,
            head_repo=head_repo,
            head_ref=head_ref,
            gpus=plan.gpus,
            rounds=plan.rounds,
            adaptive=plan.adaptive,
            gpu_minutes=plan.gpu_minutes,
            control=plan.control,
            modes=modes,
            candidate=candidate,
            trigger=trigger,
            requested_by=requested_by,
            installation_id=installation_id,
            watch=watch,
            held=held,
            inquiry_id=inquiry_id,
        ),
    )
