"""The job queue's order under a flood: repositories in turn (`bot.lanes`) against first
in, first out, in the same process, on the same store.

The App's own queue (`bot.queue.Queue`, on Redis as deployed and on SQLite as embedded)
with two consumer threads, as `rsi-bot worker --workers 2` runs it; the jobs are
stand-ins of fixed cost (a sleep: what is measured is the order, not the App's CPU). A
request is a chain of four jobs, each queuing the next once it ran, as a webhook's
delivery queues its start, the start its drain, the drain its outbox's write.
`flood/repo` sends requests faster than the consumer takes them for `--seconds`; nine
other repositories send one each every `--every` seconds. Printed: each repository
class's time from its first job queued to its last job run (p50, p95, max), with the
reference (first in, first out: every job queued without a priority) and the ratio.

    .venv/bin/python bench/lanes.py [--store redis|sqlite|both] [--seconds 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from huey import Huey, PriorityRedisHuey, SqliteHuey  # noqa: E402

from bot.queue import Jobs, Queue  # noqa: E402

CHAIN = ("process_delivery", "start", "drain", "write")


@dataclass
class Trial:
    job_s: float
    begun: dict[str, float] = field(default_factory=dict)  # request → first job queued
    ended: dict[str, float] = field(default_factory=dict)  # request → last job ran
    lock: threading.Lock = field(default_factory=threading.Lock)


def build(huey: Huey, trial: Trial, fifo: bool) -> Queue:
    queue: Queue

    def step(kind: str) -> Callable[[str], None]:
        def run(request: str) -> None:
            time.sleep(trial.job_s)
            nxt = CHAIN.index(kind) + 1
            if nxt == len(CHAIN):
                with trial.lock:
                    trial.ended[request] = time.perf_counter()
            elif CHAIN[nxt] == "start":
                queue.start(request)
            elif CHAIN[nxt] == "drain":
                queue.drain(request)
            else:
                queue.write(request, 0)

        return run

    def write(repo: str, number: int) -> None:
        step("write")(repo)
        return None

    queue = Queue(
        huey,
        Jobs(
            process_delivery=step("process_delivery"),
            start=step("start"),
            drain=step("drain"),
            write=write,
            reconcile=lambda: None,
            verification_lane=lambda request: request.split("#")[0],
            delivery_lanes=lambda ids: {i: i.split("#")[0] for i in ids},
        ),
    )
    if fifo:  # the reference: no job tagged as it enters the queue
        huey.disconnect_signal(queue.lanes.tag_on_enqueue)
    return queue


def consume(huey: Huey, stop: threading.Event) -> None:
    while not stop.is_set():
        task = huey.dequeue()
        if task is None:
            time.sleep(0.001)
            continue
        huey.execute(task)


def run(huey: Huey, fifo: bool, args: argparse.Namespace) -> Trial:
    trial = Trial(job_s=args.job_ms / 1000)
    queue = build(huey, trial, fifo)
    stop = threading.Event()
    threads = [threading.Thread(target=consume, args=(huey, stop)) for _ in range(2)]
    for t in threads:
        t.start()
    start = time.perf_counter()
    sent = 0
    others = 0
    # The consumer takes 2 / job_s jobs a second, a request is 4 jobs: the flood sends
    # `--overload` times what the consumer can finish.
    flood_every = 4 * trial.job_s / 2 / args.overload
    next_other = start + args.every
    while (now := time.perf_counter()) - start < args.seconds:
        if now >= next_other:
            for r in range(9):
                request = f"team{r}/repo#{others}"
                trial.begun[request] = time.perf_counter()
                queue.deliver([request])
            others += 1
            next_other += args.every
        request = f"flood/repo#{sent}"
        trial.begun[request] = time.perf_counter()
        queue.deliver([request])
        sent += 1
        time.sleep(flood_every)
    # Every request the others sent finishes; the flood's backlog need not.
    deadline = time.perf_counter() + 600
    while time.perf_counter() < deadline:
        with trial.lock:
            if all(k in trial.ended for k in trial.begun if not k.startswith("flood/")):
                break
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join()
    return trial


def times(trial: Trial, flood: bool) -> list[float]:
    return sorted(
        trial.ended[k] - trial.begun[k]
        for k in trial.begun
        if k.startswith("flood/") == flood and k in trial.ended
    )


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else float("nan")


def make(store: str, tmp: Path, n: int) -> tuple[Huey, Callable[[], None]]:
    if store == "sqlite":
        return SqliteHuey(f"bench-lanes-{n}", filename=str(tmp / f"q{n}.db")), lambda: None
    from tests.services import REDIS

    huey = PriorityRedisHuey(f"bench-lanes-{n}", url=f"{REDIS}/0", blocking=False)
    huey.flush()
    return huey, huey.flush


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", choices=["redis", "sqlite", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=4.0, help="how long the flood lasts")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between others' requests")
    ap.add_argument("--job-ms", type=float, default=10.0, help="each job's cost")
    ap.add_argument("--overload", type=float, default=2.0, help="the flood against capacity")
    args = ap.parse_args()
    stores = ["redis", "sqlite"] if args.store == "both" else [args.store]
    print(
        f"2 consumer threads, jobs of {args.job_ms:g} ms, requests of {len(CHAIN)} chained "
        f"jobs; flood/repo at {args.overload:g}× what the consumer finishes for "
        f"{args.seconds:g} s; nine others, a request each every {args.every:g} s\n"
    )
    print("| store | order | who | requests | p50 s | p95 s | max s |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for store in stores:
            got = {}
            for fifo in (True, False):
                n += 1
                huey, clean = make(store, Path(tmp), n)
                try:
                    trial = run(huey, fifo, args)
                finally:
                    clean()
                order = "first in, first out" if fifo else "in turn (lanes)"
                for who, flood in (("others", False), ("flooder", True)):
                    xs = times(trial, flood)
                    print(
                        f"| {store} | {order} | {who} | {len(xs)} | {pct(xs, 0.5):.3f} | "
                        f"{pct(xs, 0.95):.3f} | {pct(xs, 1.0):.3f} |"
                    )
                got[fifo] = times(trial, False)
            ratios.append(
                (store, *(pct(got[False], q) / pct(got[True], q) for q in (0.5, 0.95, 1.0)))
            )
    print("\nThe others' time in turn against first in, first out (lower is better):\n")
    print("| store | × p50 | × p95 | × max |")
    print("| --- | ---: | ---: | ---: |")
    for store, *r in ratios:
        print(f"| {store} | " + " | ".join(f"{x:.2f}" for x in r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
