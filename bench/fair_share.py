"""The shared runner pool under a flood: ten repositories of two installations, one of
them asking for verification after verification; the others' wait from request to
dispatch, per class, and what the flooder held (bot/pool.py).

    python bench/fair_share.py [--ticks 600] [--seed 1]

The dispatcher's own code (`pool.waits`) decides every start against a real database
(SQLite); time is simulated in ticks of ten seconds: each tick the queued work is tried
in a random order (as the reconciler and the queue's own start jobs would), and a
running verification ends after 30–90 ticks (5–15 minutes on a GPU).
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import select  # noqa: E402

from bot import pool  # noqa: E402
from bot.db import Database, upgrade  # noqa: E402
from bot.models import RunnerJob, Verification  # noqa: E402

T0 = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)
TICK_S = 10
FLOODER = "flood/repo"
REPOS = [FLOODER] + [f"team{i}/repo" for i in range(1, 10)]
KINDS = {"maintainer": "reverify:mia", "push": "push:dev", "watch": "watch:main"}


@dataclass
class Outcome:
    waits: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (who, class)
    flood_held: list[int] = field(default_factory=list)  # runners the flooder held a tick
    held_total: list[int] = field(default_factory=list)


@contextmanager
def database() -> Iterator[Database]:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/pool.db"
        upgrade(url)
        db = Database(url)
        try:
            yield db
        finally:
            db.dispose()


def simulate(
    ticks: int, seed: int, caps: pool.Caps, repo_cap: int = 2, flood: bool = True
) -> Outcome:
    rnd = random.Random(seed)
    out = Outcome()
    ends: dict[str, int] = {}
    made: dict[str, int] = {}
    with database() as db:
        n = 0
        for t in range(ticks):
            now = T0 + dt.timedelta(seconds=t * TICK_S)
            with db.session() as s:
                # The flooder: a command or a push every ten seconds, all day.
                kind = rnd.choice(["maintainer", "push"])
                asks: list[tuple[str, str]] = [(FLOODER, kind)] if flood else []
                for repo in REPOS[1:]:  # the others: one request every ~20 minutes each
                    if rnd.random() < TICK_S / 1200:
                        asks.append((repo, rnd.choice(list(KINDS))))
                for repo, kind in asks:
                    n += 1
                    vid = f"v-{n:06d}"
                    s.add(_queued(vid, repo, kind, now, installation=1 if repo < "team5" else 2))
                    made[vid] = t
                s.flush()
                order = list(s.scalars(select(Verification).where(Verification.state == "queued")))
                rnd.shuffle(order)
                for v in order:
                    if pool.waits(s, v, caps, lambda _repo: repo_cap) is None:
                        v.state = "running"
                        s.add(RunnerJob(verification_id=v.id, gpu=v.gpus[0], state="running"))
                        s.flush()
                        ends[v.id] = t + rnd.randint(30, 90)
                        cls = "flood" if v.repo == FLOODER else "other"
                        kind = (v.trigger or "").split(":")[0]
                        label = next(k for k, trig in KINDS.items() if trig.startswith(kind))
                        out.waits.setdefault((cls, label), []).append((t - made[v.id]) * TICK_S)
                for v in s.scalars(select(Verification).where(Verification.state == "running")):
                    if ends.get(v.id, t + 1) <= t:
                        v.state = "published"
                        for j in v.jobs:
                            j.state = "done"
                running = list(
                    s.scalars(select(Verification).where(Verification.state == "running"))
                )
                out.flood_held.append(sum(1 for v in running if v.repo == FLOODER))
                out.held_total.append(len(running))
    return out


def _queued(vid: str, repo: str, kind: str, now: dt.datetime, installation: int) -> Verification:
    return Verification(
        id=vid,
        repo=repo,
        pr_number=1,
        task="cosyvoice3",
        base_sha="a" * 40,
        head_sha="b" * 40,
        head_repo=repo,
        head_ref="x",
        gpus=["H100"],
        rounds=3,
        modes=["streaming"],
        candidate={},
        trigger=KINDS[kind],
        state="queued",
        installation_id=installation,
        created_at=now,
        watch=kind == "watch",
    )


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ticks", type=int, default=180)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    caps = pool.Caps.parse(4, "H100=6")
    print(f"{a.ticks} ticks of {TICK_S} s; pool H100=6, 4 a installation, 2 a repository")
    print(
        f"{'flood':6} {'who':6} {'class':10} {'started':>7} {'p50 s':>7} {'p95 s':>7} {'max s':>7}"
    )
    for flood in (False, True):
        got = simulate(a.ticks, a.seed, caps, flood=flood)
        for (who, label), xs in sorted(got.waits.items()):
            p50, p95 = pct(xs, 50), pct(xs, 95)
            print(
                f"{'yes' if flood else 'no':6} {who:6} {label:10} {len(xs):7} {p50:7.0f} "
                f"{p95:7.0f} {max(xs):7.0f}"
            )
        if flood:
            share = sum(got.flood_held) / max(sum(got.held_total), 1)
            print(
                f"flooder held {max(got.flood_held)} runners at most; {share:.0%} of runner-ticks"
            )


if __name__ == "__main__":
    main()
