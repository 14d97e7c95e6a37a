"""The runner's candidate users for this test process.

A verification kills every process of its candidate users when a side ends and removes
what they left in the shared temp folders, so two test processes running verifications
as the same users would end each other's servers. Under pytest-xdist each worker gets
users of its own (`rsi-base-gw0`, `rsi-head-gw0`, …), created once per worker by the
`candidate_users` fixture (tests/conftest.py); a run without workers uses the runner's
defaults, which `scripts/test-services` creates. Tests hand these to the runner
(`--candidate-users`) and to `Sandbox.open` rather than relying on the defaults.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

from runners import sandbox

ROOT = Path(__file__).resolve().parent.parent
# The candidates' interpreter: the machine's own, which the candidate users can run (a
# virtual environment under /root is closed to them; the runner checks and says so).
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
USERS: dict[str, str] = (
    {side: f"{name}-{WORKER}" for side, name in sandbox.DEFAULT_USERS.items()}
    if WORKER
    else dict(sandbox.DEFAULT_USERS)
)


def users_arg() -> list[str]:
    """The runner's option naming this process's users."""
    return ["--candidate-users", f"base={USERS['base']},head={USERS['head']}"]


def missing() -> list[str]:
    out = []
    for name in USERS.values():
        try:
            pwd.getpwnam(name)
        except KeyError:
            out.append(name)
    return out


def create() -> None:
    """Create this process's users if one is missing (root), as test-services does for
    the defaults: through the runner's own `sandbox --create-users`."""
    if not missing():
        return
    py = ["--python", PYTHON]
    r = subprocess.run(
        [sys.executable, "-m", "runners", "sandbox", "--create-users", *users_arg(), *py],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if missing():
        raise RuntimeError(
            f"cannot create the candidate users {', '.join(missing())} (root is needed; "
            f"run `sudo make test`): {r.stderr.strip()}"
        )
