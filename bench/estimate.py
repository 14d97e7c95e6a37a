"""The App's GPU-minute estimate against what verifications then spent.

    python bench/estimate.py BUNDLE …        # bundles (folders or zips) in the order run
    python bench/estimate.py --dry [--isolation none]

Each bundle after the first is estimated the way the App estimates a new verification
(bot/estimate.py): from the costs the earlier bundles of its task and GPU recorded, for
its own plan (design, modes, fixed rounds or rounds until decided with their cap). The
estimate's `typical` is compared with the bundle's recorded `gpu_minutes.total`; the last
line is the median absolute error and the share of bundles inside the estimate's range.

`--dry` first runs a sequence of real verifications of the dry task on this machine (the
runner, its server and client; CPU, start-ups of about 2 s): both designs, one and two
modes, fixed rounds and rounds until decided, A/A and a head 1.3× faster, in an order
that changes the plan at almost every step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot import estimate  # noqa: E402
from evidence.cost import cost_of  # noqa: E402
from evidence.load import load  # noqa: E402

# (design, modes, rounds, head speed): the dry sequence
DRY = [
    ("alternate", "non-streaming", "3", 1.0),
    ("alternate", "streaming,non-streaming", "4", 1.3),
    ("alternate", "streaming,non-streaming", "auto", 1.0),
    ("alternate", "non-streaming", "6", 1.0),
    ("alternate", "streaming,non-streaming", "auto", 1.3),
    ("sequential", "streaming,non-streaming", "2", 1.0),
    ("sequential", "non-streaming", "4", 1.3),
    ("sequential", "streaming,non-streaming", "3", 1.0),
    ("sequential", "streaming,non-streaming", "auto", 1.3),
    ("sequential", "non-streaming", "auto", 1.0),
]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=b", "-c", "user.email=b@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def make_repo(path: Path, base: dict[str, Any], head: dict[str, Any]) -> tuple[str, str]:
    """A repository of two commits whose `rsi-dry.json` configures the dry server."""
    path.mkdir(parents=True)
    _git(path, "init", "-q")
    (path / "rsi-dry.json").write_text(json.dumps(base))
    _git(path, "add", ".")
    _git(path, "commit", "-qm", "base")
    (path / "rsi-dry.json").write_text(json.dumps(head))
    _git(path, "commit", "-qam", "head")
    return _git(path, "rev-parse", "HEAD~1"), _git(path, "rev-parse", "HEAD")


def dry_verify(
    work: Path, name: str, base: dict[str, Any], head: dict[str, Any], *args: str
) -> Path:
    """One real verification of the dry task on this machine; its bundle."""
    base_sha, head_sha = make_repo(work / f"repo-{name}", base, head)
    bundle = work / f"bundle-{name}"
    cmd = [sys.executable, "-S", "-E", "-m", "runners", "verify"]
    cmd += ["--repo", str(work / f"repo-{name}"), "--base", base_sha, "--head", head_sha]
    cmd += ["--task", "dry", "--gpu", "cpu", "--out", str(bundle)]
    cmd += ["--workdir", str(work / f"w-{name}"), "--verification-id", f"v-{name}"]
    cmd += ["--repo-name", "owner/repo", "--python", "/usr/bin/python3", *args]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if not (bundle / "manifest.json").is_file():
        sys.exit(f"{name} left no bundle:\n{r.stderr[-2000:]}")
    return bundle


def run_dry(work: Path, isolation: str) -> list[Path]:
    os.chmod(work, 0o755)
    out: list[Path] = []
    cfg = {"startup_s": 2.0, "char_ms": 2.0}
    for i, (design, modes, rounds, speed) in enumerate(DRY):
        args = ["--design", design, "--modes", modes, "--rounds", rounds, "--max-rounds", "6"]
        args += ["--requests", "24", "--isolation", isolation]
        out.append(dry_verify(work, f"est{i}", cfg, dict(cfg, speed=speed), *args))
        print(f"ran {i}: {design} {modes} rounds={rounds} speed={speed}", file=sys.stderr)
    return out


def _manifest(path: Path) -> dict[str, Any]:
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as z:
            return dict(json.loads(z.read("manifest.json")))
    return dict(json.loads((path / "manifest.json").read_text()))


@dataclass(frozen=True)
class Replayed:
    """One bundle of a replay: its plan, what it spent, and what the App would have
    estimated from the bundles before it (None: no earlier run of its task and GPU)."""

    name: str
    design: str
    plan: str
    actual: float
    est: estimate.GpuEstimate | None

    @property
    def error_pct(self) -> float | None:
        if self.est is None or self.actual <= 0:
            return None
        return 100.0 * (self.est.typical - self.actual) / self.actual

    @property
    def inside(self) -> bool:
        return self.est is not None and self.est.low <= self.actual <= self.est.high


def replay(paths: list[Path]) -> list[Replayed]:
    """Each bundle estimated as the App would have, from the costs recorded before it."""
    history: list[tuple[str, str, dict[str, Any]]] = []  # (task, gpu, cost) oldest first
    out: list[Replayed] = []
    for path in paths:
        m = _manifest(path)
        src = load(path)
        cost = cost_of(src).model_dump()
        # what the App adds to a recorded cost (bot/estimate.py `units`)
        cost.update(
            base_sha=src.manifest.base.sha,
            head_sha=src.manifest.head.sha,
            stopped=(m.get("adaptive") or {}).get("stopped"),
        )
        task, gpu = str(m.get("task")), str(m.get("gpu"))
        b = m.get("benchmark") or {}
        adaptive = b.get("rounds") == "auto"
        rounds = int(b.get("max_rounds") or b.get("rounds") or 0)
        modes = len(b.get("modes") or [1])
        cap = (m.get("adaptive") or {}).get("gpu_minutes_budget")
        actual = float((m.get("gpu_minutes") or {}).get("total") or 0.0)
        plan = f"{modes} mode(s), " + (f"auto ≤{rounds}" if adaptive else f"{rounds} rounds")
        earlier = [c for t, g, c in reversed(history) if t == task and g == gpu]
        earlier = [c for c in earlier if estimate._usable(c)]
        est = None
        if earlier:
            u = estimate._unit(gpu, earlier, design=cost["design"])
            got = estimate.estimate(
                {gpu: u},
                [gpu],
                rounds=rounds,
                modes=modes,
                adaptive=adaptive,
                cap=cap,
                base_sha=cost["base_sha"],
                head_sha=cost["head_sha"],
                control=bool(m.get("control")),  # the plan's, as the App reads it
            )
            est = got.gpus[gpu] if got is not None else None
        out.append(Replayed(path.name, str(cost["design"]), plan, actual, est))
        history.append((task, gpu, cost))
    return out


def report(paths: list[Path]) -> list[str]:
    lines = [f"{'bundle':12} {'design':10} {'plan':28} {'actual':>7} {'estimate':>22} {'error':>7}"]
    rows = replay(paths)
    for r in rows:
        e = r.error_pct
        if r.est is None or e is None:
            said, err = "(no earlier run)", ""
        else:
            said = f"{r.est.typical:6.2f} [{r.est.low:.2f}, {r.est.high:.2f}]"
            err = f"{e:+6.1f}%"
        lines.append(f"{r.name:12} {r.design:10} {r.plan:28} {r.actual:7.2f} {said:>22} {err:>7}")
    errors = [abs(e) for r in rows if (e := r.error_pct) is not None]
    if errors:
        inside = sum(r.inside for r in rows if r.error_pct is not None)
        lines.append(
            f"median |error| of `typical`: {statistics.median(errors):.1f}% over {len(errors)} "
            f"estimates (largest {max(errors):.1f}%); actual inside the range: {inside} "
            f"of {len(errors)}"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundles", nargs="*", type=Path)
    ap.add_argument("--dry", action="store_true", help="run the dry sequence first")
    ap.add_argument("--isolation", default="cgroup", choices=("cgroup", "none"))
    a = ap.parse_args()
    paths = list(a.bundles)
    with tempfile.TemporaryDirectory() as tmp:
        if a.dry:
            paths = run_dry(Path(tmp), a.isolation) + paths
        print("\n".join(report(paths)))


if __name__ == "__main__":
    main()
