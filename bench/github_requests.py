"""GitHub requests one verification makes, intake to published.

Runs the core loop against the GitHub stand-in the tests use (real HTTP, every request
checked against GitHub's REST description, failing on any it does not expect), on the
embedded default (SQLite, in-process queue): a candidate promoted through
`POST /api/v1/candidates`, the PR opened and the check run created, `workflow_dispatch`,
the run's `workflow_run` events, the bundle fetched, the comment, PR body and check run
published. Twice: the first verification of a process also mints installation tokens and
looks repositories up; the second is what every later one costs.

    .venv/bin/python bench/github_requests.py

Prints every request of both and the counts. Target: ≤ 12 API requests for a
verification (the artifact's blob download, which is not an API request, is listed
apart). Exit 0 on pass, 1 on fail.
"""

from __future__ import annotations

import collections
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot import runtime  # noqa: E402
from bot.db import upgrade  # noqa: E402
from bot.web.app import create_app  # noqa: E402
from evidence.synth import HEAD_SHA  # noqa: E402
from tests import appkit  # noqa: E402
from tests.standin import RecordedRequest, serve  # noqa: E402
from tests.test_app_flow import finish_run, promote, verification  # noqa: E402

TARGET = 12


def label(r: RecordedRequest) -> str:
    return f"{r.method} {r.operation or r.path}"


def main() -> int:
    with (
        tempfile.TemporaryDirectory(prefix="gh-requests-") as tmp_s,
        serve(app_id=appkit.APP_ID) as gh,
    ):
        tmp = Path(tmp_s)
        appkit.populate(gh)
        settings = appkit.settings(tmp, gh.url, LOG_LEVEL="WARNING")
        upgrade(settings.DATABASE_URL)
        rt = runtime.build(settings, immediate=True)
        app = create_app(svc=rt)
        client = app.test_client()
        counted: dict[str, list[RecordedRequest]] = {}
        try:
            for name, branch in (("first", None), ("second", "rsi/other-change")):
                before = len(gh.requests)
                changes: dict[str, object] = {"candidate_id": f"c-bench-{name}"}
                if branch:
                    gh.add_branch(appkit.FORK, branch, HEAD_SHA)
                    changes["head"] = {"repo": appkit.FORK, "ref": branch, "sha": HEAD_SHA}
                vid = promote(client, f"bench-{name}", **changes)["verification_id"]
                finish_run(app, client, gh, tmp / name, vid, f"bench-{name}-run")
                state = verification(app, vid).state
                if state != "published":
                    print(f"{name} verification ended {state}, not published", file=sys.stderr)
                    return 1
                counted[name] = gh.requests[before:]
        finally:
            rt.db.dispose()

    api = {
        name: [r for r in reqs if not r.path.startswith("/_blobs/")]
        for name, reqs in counted.items()
    }
    print("GitHub requests per verification, intake to published (GitHub stand-in):")
    for name, reqs in api.items():
        blobs = len(counted[name]) - len(reqs)
        print(f"\n{name} verification: {len(reqs)} API requests (+{blobs} artifact blob download)")
        for what, n in collections.Counter(label(r) for r in reqs).items():
            print(f"  {n} × {what}")
    warm = len(api["second"])
    ok = warm <= TARGET
    print(f"\n{'PASS' if ok else 'FAIL'}: {warm} API requests per verification (≤ {TARGET})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
