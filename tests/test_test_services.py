"""`make test` brings up what the tests need through scripts/test-services (the script
`.ci/run` reaches through `make test` too), and `make unit-fast` leaves out exactly the
tests marked `services`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "test-services"


def _as_someone_else(cmd: list[str]) -> list[str]:
    """Run `cmd` as a user who is not root: `nobody` when we are root, else ourselves."""
    if os.geteuid() != 0:
        return cmd
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *cmd]


def test_not_root_it_changes_nothing_and_says_the_exact_command() -> None:
    # The script reaches bash on its standard input: a clone in a private folder
    # (`mktemp -d`, root's 0700 home) is not readable by that other user.
    done = subprocess.run(
        _as_someone_else(["bash", "-s"]),
        input=SCRIPT.read_text(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert done.returncode == 1
    assert "sudo make test" in done.stderr
    assert "make unit-fast" in done.stderr
    assert "installing" not in done.stdout  # it never tried apt-get


def test_make_test_runs_the_script_first_and_ci_runs_make_test() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    plan = subprocess.run(
        ["make", "--no-print-directory", "-n", "test"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        env=env,
    ).stdout.splitlines()
    assert plan[0] == "bash scripts/test-services"
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)
    assert "apt-get" not in ci  # one script does the bring-up
    assert "redis-server" not in ci


def test_unit_fast_leaves_out_the_services_marker() -> None:
    plan = subprocess.run(
        ["make", "-n", "unit-fast"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    assert re.search(
        r"pytest -n \d+ --maxschedchunk 2 --durations=30 -m 'not services'$", plan, re.M
    ), plan
    assert "test-services" not in plan


def _marked(*files: str) -> set[str]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "services",
            "-p",
            "no:cacheprovider",
            *files,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    ).stdout
    return {line for line in out.splitlines() if "::" in line}


def test_the_marker_follows_what_a_test_reaches() -> None:
    marked = _marked(
        "tests/test_report_page.py",
        "tests/test_app_services.py",
        "tests/test_stats.py",
        "tests/test_life_hard.py",
        "tests/test_forge.py",
    )
    names = "\n".join(sorted(marked))
    # Chromium, PostgreSQL + Redis, root with the candidate users: marked.
    assert "tests/test_report_page.py::test_report_page_in_a_real_browser" in names
    assert "tests/test_app_services.py::" in names
    assert "tests/test_forge.py::" in names
    # Pure statistics: not marked.
    assert "tests/test_stats.py" not in names
    # A world test needs services in its deployed shape only.
    assert "test_two_gpus_finishing_at_the_same_instant_publish_once_with_both[deployed]" in names
    assert "[embedded" not in names
