"""What a maintainer reads on the PR, through the GitHub stand-in in both shapes of the
App: the ledger keeps every published result, the comment says what was measured and
how to measure it again, and a verification that ended without evidence names each
GPU's reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evidence.render import COMMENT_MARKER
from evidence.synth import HEAD_SHA
from tests import appkit
from tests.standin import GitHubStandIn
from tests.test_reviews import command, push
from tests.worlds import SHAPES, World, world

NEW_SHA = "5" * 40
WRITER = "maintainer-mia"


@pytest.fixture(params=SHAPES)
def w(request: pytest.FixtureRequest, tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world(request.param, tmp_path, github) as x:
        yield x


def the_comment(w: World, number: int) -> str:
    [body] = [
        c.body
        for c in w.github.comments_on(appkit.UPSTREAM, number)
        if COMMENT_MARKER in c.body and c.via_app
    ]
    return body


def ledger_lines(comment: str) -> list[str]:
    table = comment.split("### Commits verified on this PR", 1)[1].split("\n\n", 2)[1]
    return [line for line in table.splitlines() if line.startswith("| ") and "`" in line]


def test_each_failed_gpus_reason_is_in_the_comment(w: World) -> None:
    """Two GPUs whose bundles name another repository: the comment names each GPU's
    reason, as the check run does, not only "no GPU produced evidence"."""
    vid = w.promote(gpus=["H100", "H200"])
    v = w.verification(vid)
    assert sorted(j.gpu for j in v.jobs) == ["H100", "H200"]
    for gpu in ("H100", "H200"):
        w.give_bundle(vid, gpu, repo="someone/else")
        w.complete(vid, gpu)
        w.settle()
    v = w.verification(vid)
    assert v.state == "failed", v.state
    comment = the_comment(w, v.pr_number or 0)
    for gpu in ("H100", "H200"):
        assert f"the {gpu} bundle was rejected: its manifest says repo" in comment, comment
    w.github.assert_clean()


# ----------------------------------------------------------------------- the ledger


def _published(w: World) -> int:
    vid = w.promote()
    w.finish(vid)
    v = w.verification(vid)
    assert v.state == "published", w.reason(vid)
    return v.pr_number or 0


def _reverify(w: World, number: int, delivery: str) -> str:
    w.github.set_permission(appkit.UPSTREAM, WRITER, "write")
    payload = command(w.github, number, "/rsi reverify", WRITER)
    assert w.deliver("issue_comment", payload, delivery) == 202
    w.settle()
    return w.latest(number).id


def test_a_rerun_superseded_by_a_push_leaves_the_published_row(w: World) -> None:
    """The commit's published figures, a re-run of it that a trusted push supersedes,
    then the push: the published row keeps its numbers, the re-run has a row of its
    own."""
    number = _published(w)
    [published] = ledger_lines(the_comment(w, number))
    assert "improved" in published
    assert "%" in published
    rerun = _reverify(w, number, "c-rerun")
    assert w.verification(rerun).head_sha == HEAD_SHA
    assert w.deliver("pull_request", push(w.github, number, NEW_SHA, "openrsi-bot"), "p") == 202
    w.settle()
    assert w.verification(rerun).state == "superseded"
    pushed = w.latest(number)
    assert pushed.head_sha == NEW_SHA
    w.finish(pushed.id, head_sha=NEW_SHA)
    assert w.verification(pushed.id).state == "published", w.reason(pushed.id)
    rows = ledger_lines(the_comment(w, number))
    assert (
        [r.split("|")[1].split("`")[1] for r in rows]
        == [  # each commit, linked
            HEAD_SHA[:10],
            HEAD_SHA[:10],
            NEW_SHA[:10],
        ]
    ), rows
    assert rows[0] == published.replace("**", "")
    assert rows[1].rstrip(" |").endswith("superseded")
    w.github.assert_clean()


def test_measuring_a_commit_again_adds_a_row(w: World) -> None:
    number = _published(w)
    [first] = ledger_lines(the_comment(w, number))
    again = _reverify(w, number, "c-again")
    w.finish(again, speedup=0.0, seed=9)
    assert w.verification(again).state == "published", w.reason(again)
    rows = ledger_lines(the_comment(w, number))
    assert len(rows) == 2, rows
    assert rows[0].replace("**", "") == first.replace("**", "")
    assert f"**[`{HEAD_SHA[:10]}`](" in rows[1]  # the current verification
    assert "%" in rows[1]
    w.github.assert_clean()


# ----------------------------------------------------------------------- what was measured

SERVER = "{python} -m sglang_omni.cli serve --model-path {model} --port {port}"
CLIENT = (
    "{python} -m benchmarks.eval.benchmark_tts_seedtts --use-existing-server --stream "
    "--model {model} --port {port} --meta {dataset} --max-samples {requests} "
    "--concurrency {concurrency} --warmup {warmup} --output-dir {out}"
)
BENCHMARK = {
    "command": CLIENT,
    "commands": {"streaming": CLIENT, "non-streaming": CLIENT.replace(" --stream", "")},
    "server_command": SERVER,
    "dataset": "seedtts_testset/en/meta.lst",
    "dataset_sha256": "ab" * 32,
    "modes": ["non-streaming", "streaming"],
    "concurrencies": [4],
    "rounds": "auto",
    "max_rounds": 12,
    "requests": 40,
    "warmup_requests": 6,
    "order": "balanced",
}
ADAPTIVE = {
    "method": "repeated confidence intervals, Lan-DeMets alpha spending",
    "threshold_pct": 3.0,
    "alpha": 0.05,
    "max_rounds": 12,
    "gpu_minutes_budget": None,
    "looks": [],
    "stopped": "decided",
    "decisions": {},
    "rows": {},
}


def test_the_comment_says_what_was_measured_and_how_to_measure_it_again(w: World) -> None:
    """A `rounds: auto` run: the comment and the report say the benchmark command,
    dataset, requests a round, warm-up, server command, design and rounds; Reproduce
    asks for the same rounds and says where the runner comes from and what it needs."""
    from tests.test_life_words import with_manifest

    vid = w.promote()
    data = appkit.bundle_zip(w.tmp / "measured", vid, "H200")
    data = with_manifest(data, benchmark=BENCHMARK, adaptive=ADAPTIVE)
    w.github.add_artifact(appkit.RUNNER, w.run_id(vid, "H200"), f"rsi-bundle-{vid}-h200", data)
    w.complete(vid, "H200")
    w.settle()
    v = w.verification(vid)
    assert v.state == "published", w.reason(vid)
    comment = the_comment(w, v.pr_number or 0)

    measured = comment.split("### What was measured", 1)[1].split("\n### ", 1)[0]
    for words in (
        "benchmarks.eval.benchmark_tts_seedtts",  # the benchmark command
        "`seedtts_testset/en/meta.lst`",  # the dataset
        "40 requests a round",
        "6 warm-up requests",
        "sglang_omni.cli serve --model-path",  # the server's arguments
        "sequential rounds",  # the design
        "rounds until decided, at most 12 a side",
    ):
        assert words in measured, (words, measured)

    repro = comment.split("### Reproduce", 1)[1]
    assert "--rounds auto --max-rounds 12" in repro
    assert "--rounds 3 " not in repro
    assert "--design sequential" in repro
    assert "--concurrencies 4 --requests 40 --warmup-requests 6" in repro
    assert "python3 -m runners verify" in repro
    assert "python3 -m runners sandbox --create-users" in repro
    assert "root" in repro
    assert "cgroup v2" in repro

    page = w.client.get(w.svc.report_url(vid).removeprefix("https://rsi.example.com"))
    html = page.get_data(as_text=True)
    report = html.split('id="measured"', 1)[1].split("<h2", 1)[0]
    for words in (
        "seedtts_testset/en/meta.lst",
        "ab" * 32,  # the dataset's digest, in the report only
        "--stream --model",  # the streaming command
        "--max-samples {requests}",
        "sglang_omni.cli serve",
        "12",
    ):
        assert words in report, (words, report)
    tail = html.split('id="reproduce"', 1)[1]
    assert "--rounds auto --max-rounds 12" in tail
    assert "python3 -m runners sandbox --create-users" in tail
    w.github.assert_clean()
