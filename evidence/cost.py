"""What one GPU kind's measurement cost, in the units a later estimate needs.

An estimate of a verification's GPU minutes (bot/estimate.py) scales what this
repository's runners recorded for the task: how long a server took to start, how many
starts the design made, and how long a run (or burst) held the GPU besides. Those come
from the bundle: the runs' `startup_s` (sequential) or the resident servers' records,
and the runner's `gpu_minutes`.
"""

from __future__ import annotations

from statistics import fmean

from evidence.load import Source
from evidence.model import Cost


def cost_of(src: Source) -> Cost:
    m = src.manifest
    design = m.measured_by
    ran = [r for r in m.runs if r.status != "skipped"]
    control = [r for r in (src.control.runs if src.control else []) if r.status != "skipped"]
    # (side, seconds) of every server start: the design's resident servers, else a start
    # a run (its record's, else its server.json's: older runners)
    started: list[tuple[str, float | None]]
    if design.servers:
        started = [(side, s.startup_s) for side, recs in design.servers.items() for s in recs]
    else:
        started = [
            (
                lr.run.side,
                _num((lr.run.model_extra or {}).get("startup_s", lr.metrics.get("startup_s"))),
            )
            for lr in src.runs
            if lr.run.status != "skipped"
        ]
        started = [(side, x) for side, x in started if x is not None]
    starts = len(started)
    known = [x for _, x in started if x is not None]
    startup = fmean(known) if known else None
    gm = m.gpu_minutes
    total = gm.total if gm is not None else None
    run_s = None
    if total is not None and ran:
        run_s = max(0.0, (60.0 * total - starts * (startup or 0.0)) / (len(ran) + len(control)))

    def side_run_s(side: str) -> float | None:
        minutes = getattr(gm, side, None) if gm is not None else None
        n = sum(1 for r in ran if r.side == side)
        if not isinstance(minutes, int | float) or not n:
            return None
        own = sum((x if x is not None else startup or 0.0) for s, x in started if s == side)
        return round(max(0.0, (60.0 * minutes - own) / n), 3)

    return Cost(
        design=design.name,
        starts=starts,
        startup_s=None if startup is None else round(startup, 3),
        rows=len({(r.mode, r.concurrency) for r in m.runs}),
        modes=len({r.mode for r in m.runs}),
        rounds=max((r.round for r in ran), default=0),
        runs=len(ran),
        gpu_minutes=total,
        run_s=None if run_s is None else round(run_s, 3),
        adaptive=m.adaptive is not None,
        control_runs=len(control),
        base_run_s=side_run_s("base"),
        head_run_s=side_run_s("head"),
    )


def _num(v: object) -> float | None:
    if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0:
        return float(v)
    return None
