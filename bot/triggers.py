"""What started a verification, as stored in `verifications.trigger`: a kind, and after a
colon who (a login) or what (a branch, a suspected side). The words are the template's
(`trigger` of `pr_templates/app.md.j2`); a row written before kinds existed is free
text, shown as it is with its logins in code spans."""

from __future__ import annotations

INTAKE = "intake"  # a promoted candidate, through the signed intake
KINDS = frozenset(
    {
        INTAKE,
        "push",  # a trusted push to the PR: arg the pusher
        "push-after-review",  # the push that answers a review asking for changes
        "push-awaiting",  # an untrusted push, held for a writer's approval
        "reverify",  # `/rsi reverify`: arg who asked
        "verify",  # `/rsi verify` on a PR rsi-bot did not open
        "rerun",  # GitHub's Re-run of `rsi/verify`
        "approve",  # the check run's Approve and verify
        "watch",  # a push to the default branch: arg the branch
        "confirm",  # an inquiry's rerun of a suspicion: arg the suspected side
        "bisect",  # an inquiry's bisection step: arg the suspected side
    }
)


def of(kind: str, arg: str = "") -> str:
    """The stored form of a trigger."""
    if kind not in KINDS:
        raise ValueError(f"unknown trigger kind {kind!r}")
    return kind + ":" + arg if arg else kind


def parse(stored: str) -> tuple[str, str] | None:
    """(kind, arg) of a stored trigger; None for free text written before kinds."""
    kind, _, arg = stored.partition(":")
    return (kind, arg) if kind in KINDS else None
