"""Rendering main's history page: 10,000 measured merges in one series.

The page (`GET /history/<owner>/<name>`, `bot/web/history.py`) is rendered through the
Flask app on SQLite, the embedded default; the reference is the same request's JSON
export (`.json`: the same query, every point serialised by orjson, no template), timed in
the same process, interleaved (reference, page, page, reference, …), medians compared.

    .venv/bin/python bench/history_page.py [--points 10000] [--repeat 5]

Target: the page in ≤ 1 s at 10,000 points. Exit 0 when met, 1 when not.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from bot import history, runtime  # noqa: E402
from bot.db import upgrade  # noqa: E402
from bot.web.app import create_app  # noqa: E402
from tests import appkit  # noqa: E402

REPO = "sgl-project/sglang-omni"
KEY = history.SeriesKey(REPO, "cosyvoice3", "H200", "550.54", "img", "streaming", 8, "rtf")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = appkit.settings(Path(tmp), "http://127.0.0.1:9")
        upgrade(settings.DATABASE_URL)
        rt = runtime.build(settings, immediate=True)
        t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        with rt.db.session() as s:
            for n in range(args.points):
                p = history.NewPoint(
                    sha=f"{n + 1:040x}",
                    parent_sha=f"{n:040x}",
                    verification_id=f"v-w{n:06d}",
                    change_pct=0.3 * ((-1) ** n),
                    ci_low_pct=-1.0,
                    ci_high_pct=1.0,
                    verdict="regressed" if n % 500 == 0 else "no-change",
                    pairs=6,
                    bundle_key=f"b/{n}.zip",
                )
                history.add_point(s, KEY, p, t0 + dt.timedelta(minutes=n))
        client = create_app(svc=rt).test_client()
        token = rt.signer.history_token(REPO)
        urls = {
            "reference: JSON export": f"/history/{REPO}.json?token={token}",
            "history page": f"/history/{REPO}?token={token}",
        }
        times: dict[str, list[float]] = {k: [] for k in urls}
        sizes: dict[str, int] = {}
        for name in urls:  # warm both once
            client.get(urls[name])
        order = list(urls)
        for i in range(args.repeat):
            for name in order if i % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                resp = client.get(urls[name])
                times[name].append(time.perf_counter() - start)
                assert resp.status_code == 200, resp.status_code
                sizes[name] = len(resp.get_data())
        rt.db.dispose()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.points} points in one series, SQLite, median of {args.repeat}")
    for k, v in med.items():
        print(f"  {k:<24} {v:7.3f} s   {sizes[k] / 1024:8.0f} KiB")
    page, ref = med["history page"], med["reference: JSON export"]
    print(f"  ratio page/reference     {page / ref:7.2f}×")
    ok = page <= 1.0
    print("target met (≤ 1 s)" if ok else "target NOT met (≤ 1 s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
