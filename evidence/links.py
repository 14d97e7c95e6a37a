"""Compare links on GitHub (or a GitHub Enterprise host) and the reproduce command."""

from __future__ import annotations

from urllib.parse import quote

from evidence.design import DESIGNS
from evidence.load import Source
from evidence.model import Link, Reproduce


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


def reproduce(github_url: str, sources: list[Source], rounds: int) -> Reproduce | None:
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
    cmd = "\n".join(
        f"rsi-runner verify --repo {root}/{m.repo} --base {m.base.sha} "
        f"--head-repo {root}/{head_repo} --head {m.head.sha} --task {m.task} "
        f"--gpu {s.gpu.lower()} --rounds {rounds} --modes {','.join(modes)}"
        f"{_design_flag(s)} --out bundle-{s.gpu.lower()}"
        for s in sources
    )
    return Reproduce(
        command=cmd,
        base_sha=m.base.sha,
        head_sha=m.head.sha,
        head_repo=m.head.repo,
        image=env.get("image"),
        image_digest=env.get("image_digest"),
        gpus=gpus,
    )
