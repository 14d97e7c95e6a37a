"""Both commits, side by side: one repository, two detached git worktrees.

`base` is fetched from the upstream repository and `head` from the head repository (a
fork, or the same one); either may be a URL or a local path. The worktrees are
`<workdir>/base` and `<workdir>/head` — paths of the same length, so nothing that
depends on path length (hashing, prompt caching keyed on paths) favours a side.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


class GitError(RuntimeError):
    pass


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"})
    return env


def git(*args: str, cwd: Path | None = None, timeout: float = 1800.0) -> str:
    try:
        r = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise GitError(f"git {' '.join(args)} timed out after {timeout:.0f}s") from exc
    except OSError as exc:
        raise GitError(f"cannot run git: {exc}") from exc
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise GitError(f"git {' '.join(args)} failed: {msg[-1] if msg else r.returncode}")
    return r.stdout.strip()


def source(url_or_path: str) -> str:
    """A fetchable source: URLs as given, local paths made absolute."""
    if re.match(r"^[a-z][a-z0-9+.-]*://", url_or_path) or re.match(
        r"^[\w.-]+@[\w.-]+:", url_or_path
    ):
        return url_or_path
    p = Path(url_or_path).expanduser()
    if not p.exists():
        raise GitError(f"repository {url_or_path} is neither a URL nor an existing path")
    return str(p.resolve())


def repo_name(url_or_path: str) -> str:
    """`https://github.com/owner/repo(.git)` → `owner/repo`; a path → its folder name."""
    m = re.search(r"[:/]([\w.-]+)/([\w.-]+?)(?:\.git)?/?$", url_or_path)
    if m and ("://" in url_or_path or "@" in url_or_path):
        return f"{m.group(1)}/{m.group(2)}"
    return Path(url_or_path.rstrip("/")).name.removesuffix(".git")


@dataclass
class Checkout:
    repo: Path
    base: Path
    head: Path
    base_sha: str
    head_sha: str
    trees: list[Path] = field(default_factory=list)  # more worktrees (the trusted tree)


def _fetch(repo: Path, src: str, rev: str, tag: str) -> str:
    """Fetch `rev` (a SHA or a ref) from `src` and return its full commit SHA."""
    rev_is_sha = bool(re.fullmatch(r"[0-9a-fA-F]{7,64}", rev))
    if rev_is_sha:
        try:
            return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=repo)
        except GitError:
            pass
    if not rev_is_sha or _SHA.match(rev.lower()):
        try:
            git("fetch", "--no-tags", "--quiet", src, rev, cwd=repo)
            sha = git("rev-parse", "FETCH_HEAD^{commit}", cwd=repo)
            git("update-ref", f"refs/rsi/{tag}", sha, cwd=repo)
            return sha
        except GitError:
            if not rev_is_sha:
                raise
    # A short SHA, or a server that refuses to serve a commit by its SHA: fetch every
    # branch and tag, then look for it.
    git(
        "fetch",
        "--quiet",
        src,
        f"+refs/heads/*:refs/rsi/{tag}-heads/*",
        f"+refs/tags/*:refs/rsi/{tag}-tags/*",
        cwd=repo,
    )
    try:
        return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=repo)
    except GitError as exc:
        raise GitError(f"commit {rev} is not in {src}") from exc


def _worktree(repo: Path, path: Path, sha: str) -> None:
    if path.exists():
        try:
            git("worktree", "remove", "--force", str(path), cwd=repo)
        except GitError:
            shutil.rmtree(path, ignore_errors=True)
    git("worktree", "prune", cwd=repo)
    git("worktree", "add", "--detach", "--force", str(path), sha, cwd=repo)


def checkout(workdir: Path, repo_src: str, base: str, head_src: str, head: str) -> Checkout:
    """Fetch both commits into `<workdir>/repo` and make the two worktrees."""
    workdir.mkdir(parents=True, exist_ok=True)
    repo = workdir / "repo"
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        git("init", "--quiet", str(repo))
    base_sha = _fetch(repo, source(repo_src), base, "base")
    head_sha = _fetch(repo, source(head_src), head, "head")
    co = Checkout(repo, workdir / "base", workdir / "head", base_sha, head_sha)
    _worktree(repo, co.base, base_sha)
    _worktree(repo, co.head, head_sha)
    for wt in (co.base, co.head):
        if (wt / ".gitmodules").exists():
            git("submodule", "update", "--init", "--recursive", "--quiet", cwd=wt)
    return co


def trusted_tree(co: Checkout, path: Path, repo_src: str, rev: str | None) -> str:
    """A third worktree, at `rev` (default: the base commit), for the benchmark client.

    The client and the accuracy step run from here, never from the head's worktree, so
    a head cannot change how it is measured. Returns the tree's commit SHA.
    """
    sha = co.base_sha if rev is None else _fetch(co.repo, source(repo_src), rev, "bench")
    _worktree(co.repo, path, sha)
    if (path / ".gitmodules").exists():
        git("submodule", "update", "--init", "--recursive", "--quiet", cwd=path)
    co.trees.append(path)
    return sha


_PIN = re.compile(
    r"^benchmark_ref:[ \t]*[\"']?([A-Za-z0-9][A-Za-z0-9._/-]{0,199})[\"']?[ \t]*(#.*)?$", re.M
)


def pinned_benchmark_ref(co: Checkout) -> str | None:
    """`benchmark_ref` of the base commit's `.github/rsi.yml` (a top-level scalar), if any.

    Read from the base — trusted — never from the head, which could otherwise pick the
    scripts that measure it.
    """
    try:
        text = git("show", f"{co.base_sha}:.github/rsi.yml", cwd=co.repo, timeout=30)
    except GitError:
        return None
    m = _PIN.search(text)
    return m.group(1) if m and ".." not in m.group(1) else None


def changed(co: Checkout, paths: list[str]) -> list[str]:
    """Files under `paths` that differ between base and head (the head's own changes)."""
    if not paths:
        return []
    out = git("diff", "--name-only", co.base_sha, co.head_sha, "--", *paths, cwd=co.repo)
    return [line for line in out.splitlines() if line]


def remove(co: Checkout) -> None:
    for wt in (co.base, co.head, *co.trees):
        try:
            git("worktree", "remove", "--force", str(wt), cwd=co.repo)
        except GitError:
            shutil.rmtree(wt, ignore_errors=True)
