"""The hunt for a culprit with the real runner on the dry task: eight merges of a real git
repository, the fifth making the dry server 15% slower (`rsi-dry.json`), pushed to main at
once. Every verification the App dispatches — the push, the confirming rerun, each
bisection step — is measured by `python -m runners verify` on that repository (its
servers, clients, rounds and bundle; only the GPU is a stand-in `nvidia-smi`), and its
bundle is handed back through the stand-in GitHub. The App must name the fifth merge's PR
after at most 3 bisection steps and alert it once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.models import Inquiry, Verification
from tests import appkit, candidates
from tests.standin import GitHubStandIn
from tests.test_runner_verify import CANDIDATE_PYTHON, FAKE_SMI, ROOT, git, runner_env
from tests.test_watch import push
from tests.worlds import World, world

CONFIG = "gpus: [H100]\nrounds: 4\nmodes: [non-streaming]\nwatch:\n  tasks: [dry]\n"
# Each request's work is a sleep long enough that the measurement holds when the test
# shares the cores with others (pytest-xdist): −15% throughput from the fifth merge on
# (at −8% a loaded host twice read the confirming rerun as too wide to tell).
DRY = {"char_ms": 4.0}
SLOWER = {**DRY, "speed": 0.85}


@pytest.fixture
def w(reachable_tmp: Path, github: GitHubStandIn) -> Iterator[World]:
    with world("embedded", reachable_tmp, github) as x:
        yield x


def merges(repo: Path) -> tuple[str, list[str]]:
    """A repository of a base and eight merges, one file each; the fifth slows the dry
    server down and the rest keep that."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "README.md").write_text("dry\n")
    (repo / "rsi-dry.json").write_text(json.dumps(DRY))
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    shas = []
    for i in range(1, 9):
        (repo / f"merge-{i}.txt").write_text(f"{i}\n")
        if i == 5:
            (repo / "rsi-dry.json").write_text(json.dumps(SLOWER))
        git(repo, "add", ".")
        git(repo, "commit", "-qm", f"merge {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return base, shas


def measure(w: World, repo: Path, v: Verification, tmp: Path) -> None:
    """The runner measures `v` on the repository; its bundle goes back as the run's
    artifact, and the run completes."""
    out = tmp / f"bundle-{v.id}"
    cmd = [
        sys.executable,
        "-S",
        "-E",
        "-m",
        "runners",
        "verify",
        *("--repo", str(repo), "--base", v.base_sha, "--head", v.head_sha),
        *("--task", "dry", "--gpu", "h100", "--rounds", "4", "--modes", "non-streaming"),
        *("--requests", "24", "--out", str(out), "--workdir", str(tmp / f"work-{v.id}")),
        *("--prelaunch-window", "0.1"),  # GPU samples each second, as on a runner
        *("--verification-id", v.id, "--repo-name", appkit.UPSTREAM),
        *("--python", CANDIDATE_PYTHON),
        *candidates.users_arg(),
    ]
    env = runner_env(PATH=f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}")
    env["RSI_GPU_BACKEND"] = "nvidia-smi"
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert (out / "manifest.json").is_file(), r.stderr
    archive = shutil.make_archive(str(tmp / f"bundle-{v.id}"), "zip", out)
    [job] = v.jobs
    assert job.workflow_run_id is not None
    name = f"rsi-bundle-{v.id}-{job.gpu.lower()}"
    w.github.add_artifact(appkit.RUNNER, job.workflow_run_id, name, Path(archive).read_bytes())
    w.complete(v.id, job.gpu)
    w.settle()


def dispatched(w: World) -> list[Verification]:
    with w.svc.db.session() as s:
        rows = list(s.scalars(select(Verification).where(Verification.state == "dispatched")))
        for v in rows:
            _ = list(v.jobs)
        return rows


@pytest.mark.long
def test_the_runner_on_the_dry_task_bisects_a_planted_regression_to_its_pr(
    w: World, reachable_tmp: Path
) -> None:
    repo = reachable_tmp / "upstream"
    base, shas = merges(repo)
    w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", CONFIG)
    w.github.set_compare(appkit.UPSTREAM, base, shas[-1], commits=shas)
    for i, sha in enumerate(shas):
        w.github.add_merged_pull(appkit.UPSTREAM, 60 + i, f"merge {i + 1}", [sha], user="bob")
    push(w, base, shas[-1], "push-dry")
    measured = 0
    while running := dispatched(w):
        [v] = running
        measure(w, repo, v, reachable_tmp)
        measured += 1
        assert measured <= 6, "more verifications than the push, a rerun and 3 steps"
    with w.svc.db.session() as s:
        [q] = s.scalars(select(Inquiry)).all()
    with w.svc.db.session() as s:
        why = [(v.id, v.verdict, v.reason) for v in s.scalars(select(Verification))]
    assert q.state == "alerted", (q.steps, q.end_reason, why)
    assert (q.culprit_sha, q.culprit_pr) == (shas[4], 64)
    assert [st["kind"] for st in q.steps].count("bisect") <= 3
    alerts = [c for c in w.github.comments_on(appkit.UPSTREAM, 64) if "regression" in c.body]
    assert len(alerts) == 1
    assert all(not w.github.comments_on(appkit.UPSTREAM, n) for n in range(60, 68) if n != 64)
    w.github.assert_clean()
