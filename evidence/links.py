"""Compare links on GitHub (or a GitHub Enterprise host), what each GPU's runner
measured and the reproduce command."""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import quote

from evidence import inert
from evidence.design import DESIGNS
from evidence.load import Source
from evidence.model import Link, Measured, Reproduce

_COMMIT = re.compile(r"[0-9a-f]{7,40}")


def compare_url(
    github_url: str, repo: str, base: str, head: str, head_repo: str | None = None
) -> str:
    """`compare/BASE...HEAD`; a fork's head is written `owner:sha` as GitHub expects."""
    root = github_url.rstrip("/")
    if head_repo and head_repo != repo:
        head = f"{head_repo.split('/')[0]}:{head}"
    return f"{root}/{repo}/compare/{quote(base, safe='')}...{quote(head, safe=':')}"


def links(github_url: str, sources: list[Source]) -> list[Link]:
    if not sources:
        return []
    m = sources[0].manifest
    if not m.base.sha or not m.head.sha or "/" not in m.repo:
        return []
    root = github_url.rstrip("/")
    out = [
        Link(
            label="compare base...head",
            url=compare_url(github_url, m.repo, m.base.sha, m.head.sha, m.head.repo),
        ),
        Link(label=f"base {m.base.sha[:10]}", url=f"{root}/{m.repo}/commit/{m.base.sha}"),
    ]
    head_repo = m.head.repo or m.repo
    out.append(Link(label=f"head {m.head.sha[:10]}", url=f"{root}/{head_repo}/commit/{m.head.sha}"))
    return out


def _design_flag(src: Source) -> str:
    """`--design NAME` for a design the engine knows (the runner's default takes the
    task's, which may be another), and `--control aa` when a null control ran; a name it
    does not know is never put in a command."""
    name = src.manifest.measured_by.name
    flag = f" --design {name}" if name in DESIGNS else ""
    control = src.manifest.control
    if flag and isinstance(control, dict) and control.get("kind") == "aa":
        flag += " --control aa"
    return flag


def _count(x: Any) -> int | None:
    """A recorded count (requests, rounds): a non-negative integer, else None."""
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None


def _number(x: Any) -> float | None:
    ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0
    return float(x) if ok else None


def _words(x: Any, limit: int = inert.LOG_LIMIT) -> str | None:
    """The runner's text, bounded and without control characters; None when empty."""
    if not isinstance(x, str):
        return None
    return inert.bound(inert.clean(x).strip(), limit) or None


def _first(values: list[int | None]) -> int | None:
    return next((v for v in values if v is not None), None)


def measured_by_runner(src: Source) -> Measured:
    """What `src`'s runner measured: its manifest's `benchmark` (docs/bundle.md), with
    the runs' own counts where a runner did not write them there."""
    m = src.manifest
    b = m.benchmark if isinstance(m.benchmark, dict) else {}
    runs = [lr.run for lr in src.runs]
    raw = b.get("commands")
    commands: dict[Any, Any] = raw if isinstance(raw, dict) else {}
    a = m.adaptive
    rounds: int | str | None = "auto" if a is not None or b.get("rounds") == "auto" else None
    if rounds is None:
        rounds = _count(b.get("rounds")) or max((r.round for r in runs), default=None)
    auto = rounds == "auto"
    cap = ((_count(a.max_rounds) if a else None) or _count(b.get("max_rounds"))) if auto else None
    concurrencies = b.get("concurrencies")
    if not (isinstance(concurrencies, list) and all(_count(c) for c in concurrencies)):
        concurrencies = sorted({r.concurrency for r in runs})
    warmup = _count(b.get("warmup_requests"))
    return Measured(
        command=_words(b.get("command")),
        commands={
            str(_words(k, inert.NAME_LIMIT)): w
            for k, v in list(commands.items())[:4]
            if _words(k, inert.NAME_LIMIT) and (w := _words(v))
        },
        server_command=_words(b.get("server_command")),
        dataset=_words(b.get("dataset"), inert.TEXT_LIMIT),
        dataset_sha256=_words(b.get("dataset_sha256"), inert.NAME_LIMIT),
        dataset_sha256_head=_words(b.get("dataset_sha256_head"), inert.NAME_LIMIT),
        modes=sorted({r.mode for r in runs}),
        concurrencies=concurrencies[:32],
        rounds=rounds,
        max_rounds=cap,
        gpu_minutes_budget=_number(a.gpu_minutes_budget) if a else None,
        threshold_pct=_number(a.threshold_pct) if a else None,
        requests=_count(b.get("requests")) or _first([r.requests for r in runs]),
        warmup_requests=warmup if warmup is not None else _first([r.warmup_requests for r in runs]),
    )


def _rounds_flags(w: Measured, rounds: int) -> str:
    """`--rounds` as the runner was asked: `auto` with its cap, budget and threshold, or
    the number of rounds a side (`rounds` when the bundle does not say)."""
    if w.rounds != "auto":
        return f" --rounds {w.rounds if isinstance(w.rounds, int) else rounds}"
    flags = " --rounds auto"
    if w.max_rounds:
        flags += f" --max-rounds {w.max_rounds}"
    if w.gpu_minutes_budget:
        flags += f" --gpu-minutes {w.gpu_minutes_budget:g}"
    if w.threshold_pct:
        flags += f" --threshold-pct {w.threshold_pct:g}"
    return flags


def _load_flags(w: Measured) -> str:
    """The load each run had, as recorded: concurrencies, requests and warm-up."""
    flags = ""
    if w.concurrencies:
        flags += f" --concurrencies {','.join(str(c) for c in w.concurrencies)}"
    if w.requests:
        flags += f" --requests {w.requests}"
    if w.warmup_requests is not None:
        flags += f" --warmup-requests {w.warmup_requests}"
    return flags


def reproduce(github_url: str, sources: list[Source], rounds: int) -> Reproduce | None:
    """One `python3 -m runners verify` per GPU, asking for what that GPU's runner was
    asked: rounds (`auto` with its cap), modes, load, design and control. Only numbers
    the bundle recorded and names the runner knows are put in a command."""
    if not sources:
        return None
    m = sources[0].manifest
    modes = sorted({lr.run.mode for s in sources for lr in s.runs})
    gpus = [s.gpu for s in sources]
    env = m.environment.get("head") or m.environment.get("base") or {}
    head_repo = m.head.repo or m.repo
    root = github_url.rstrip("/")
    # The runner measures one GPU kind a run: one command per GPU of the verification,
    # each on a machine with that GPU.
    lines = []
    for s in sources:
        w = measured_by_runner(s)
        lines.append(
            f"python3 -m runners verify --repo {root}/{m.repo} --base {m.base.sha} "
            f"--head-repo {root}/{head_repo} --head {m.head.sha} --task {m.task} "
            f"--gpu {s.gpu.lower()}{_rounds_flags(w, rounds)} --modes {','.join(modes)}"
            f"{_load_flags(w)}{_design_flag(s)} --out bundle-{s.gpu.lower()}"
        )
    commit = (m.runner or {}).get("commit")
    return Reproduce(
        command="\n".join(lines),
        base_sha=m.base.sha,
        head_sha=m.head.sha,
        head_repo=m.head.repo,
        image=env.get("image"),
        image_digest=env.get("image_digest"),
        gpus=gpus,
        runner_commit=commit if isinstance(commit, str) and _COMMIT.fullmatch(commit) else None,
    )
