"""A promoted candidate starts one verification, whatever delivery id carries it: the same
candidate sent again is answered with the verification it started (200, `replayed`), the
same `candidate_id` with other commits is a 409, and two intakes of one candidate at the
same instant start one. On SQLite and PostgreSQL alike."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bot.models import Verification
from bot.repo_config import ConfigResult
from bot.verification import store
from evidence.synth import BASE_SHA, HEAD_SHA
from tests import appkit
from tests.standin import GitHubStandIn
from tests.worlds import SHAPES, World, world

CANDIDATE_ID = appkit.candidate()["candidate_id"]
OTHER_SHA = "c" * 40


@pytest.fixture(params=SHAPES)
def w(request: pytest.FixtureRequest, tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world(request.param, tmp_path, github) as x:
        yield x


def send(w: World, delivery: str, **changes: Any) -> tuple[int, dict[str, Any]]:
    body = appkit.dumps(appkit.candidate(**changes))
    resp = w.client.post(
        "/api/v1/candidates", data=body, headers=appkit.intake_headers(body, delivery)
    )
    answer: dict[str, Any] = resp.get_json()
    return resp.status_code, answer


def verifications(w: World) -> list[tuple[str, str | None]]:
    with w.svc.db.session() as s:
        rows = s.execute(
            select(Verification.repo, Verification.candidate_id).order_by(Verification.created_at)
        )
        return [(r.repo, r.candidate_id) for r in rows]


def seed_other_repository(w: World) -> str:
    """A verification another repository's intake started for a candidate of the same id
    (and other commits): it is no business of this repository's intake."""
    with w.svc.db.session() as s:
        v = store.create(
            s,
            store.NewVerification(
                repo="someone-else/other-repo",
                pr_number=None,
                task="cosyvoice3",
                base_sha=OTHER_SHA,
                head_sha=OTHER_SHA,
                head_repo="someone-else/other-fork",
                head_ref="rsi/x",
                gpus=["H200"],
                rounds=3,
                modes=["streaming"],
                candidate={},
                candidate_id=CANDIDATE_ID,
                trigger="intake",
            ),
        )
        # Not this test's to run: it must not count as queued work.
        v.state = "cancelled"
        return v.id


def test_a_replay_with_a_new_delivery_id_starts_nothing(w: World) -> None:
    elsewhere = seed_other_repository(w)
    status, first = send(w, "d-1")
    assert status == 202, first
    vid = first["verification_id"]
    assert vid != elsewhere
    w.settle()
    assert len(w.github.dispatches) == 1
    requests_before = len(w.github.requests)

    status, again = send(w, "d-2")
    assert status == 200, again
    assert again == {
        "verification_id": vid,
        "pull_request": w.verification(vid).pr_number,
        "report_url": first["report_url"],
        "replayed": True,
    }
    assert again["pull_request"] is not None  # the PR the first intake opened
    w.settle()
    assert len(w.github.dispatches) == 1
    # Not even the repository's configuration is asked for again.
    assert w.github.requests[requests_before:] == []
    assert verifications(w) == [
        ("someone-else/other-repo", CANDIDATE_ID),
        (appkit.UPSTREAM, CANDIDATE_ID),
    ]

    # The first delivery id still gets its first answer; another candidate starts anew.
    status, repeated = send(w, "d-1")
    assert (status, repeated) == (202, first)
    w.github.add_branch(appkit.FORK, "rsi/next", HEAD_SHA)
    head = {"repo": appkit.FORK, "ref": "rsi/next", "sha": HEAD_SHA}
    status, other = send(w, "d-3", candidate_id="next-candidate", head=head)
    assert status == 202, other
    assert other["verification_id"] != vid
    w.settle()
    assert len(w.github.dispatches) == 2
    w.github.assert_clean()


@pytest.mark.parametrize(
    "changes",
    [
        {"head": {"repo": appkit.FORK, "ref": appkit.HEAD_REF, "sha": OTHER_SHA}},
        {"base_sha": OTHER_SHA},
    ],
    ids=["head", "base"],
)
def test_the_same_candidate_id_with_other_commits_is_a_409(
    w: World, changes: dict[str, Any]
) -> None:
    status, first = send(w, "d-1")
    assert status == 202, first
    w.settle()

    status, answer = send(w, "d-2", **changes)
    assert status == 409, answer
    assert CANDIDATE_ID in answer["error"]
    assert "other commits" in answer["error"]
    assert answer["verification_id"] == first["verification_id"]
    w.settle()
    assert len(w.github.dispatches) == 1
    assert verifications(w) == [(appkit.UPSTREAM, CANDIDATE_ID)]
    with w.svc.db.session() as s:
        v = s.get(Verification, first["verification_id"])
        assert v is not None
        assert (v.base_sha, v.head_sha) == (BASE_SHA, HEAD_SHA)


def test_two_intakes_of_one_candidate_at_once_start_one(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both requests are past every check before either creates its verification (they
    meet while reading the repository's configuration) and creating one takes a while:
    only the lock in the creating transaction keeps the second from starting a
    verification of its own."""
    real = w.svc.repo_config
    met = threading.Barrier(2, timeout=30)
    asked: list[str] = []
    count = threading.Lock()

    def both_asking(repo: str) -> ConfigResult:
        with count:
            asked.append(repo)
            intake = len(asked) <= 2  # the two intakes ask first; the start job later
        if intake:
            met.wait()
        return real(repo)

    monkeypatch.setattr(w.svc, "repo_config", both_asking)
    real_create = store.create

    def slow_create(s: Session, new: store.NewVerification) -> Verification:
        time.sleep(0.3)  # a lookup that is not serialised would miss it for this long
        return real_create(s, new)

    monkeypatch.setattr(store, "create", slow_create)
    clients = {name: w.app.test_client() for name in ("d-a", "d-b")}
    answers: dict[str, tuple[int, dict[str, Any]]] = {}
    body = appkit.dumps(appkit.candidate())

    def post(delivery: str) -> None:
        resp = clients[delivery].post(
            "/api/v1/candidates", data=body, headers=appkit.intake_headers(body, delivery)
        )
        answers[delivery] = (resp.status_code, resp.get_json())

    w.at_once(lambda: post("d-a"), lambda: post("d-b"))
    assert sorted(status for status, _ in answers.values()) == [200, 202], answers
    assert len({a["verification_id"] for _, a in answers.values()}) == 1
    assert [a.get("replayed") for status, a in answers.values() if status == 200] == [True]
    with w.svc.db.session() as s:
        assert s.scalar(select(func.count()).select_from(Verification)) == 1
    w.settle()
    assert len(w.github.dispatches) == 1


def test_a_candidate_past_the_repository_s_queue_cap_is_a_429_and_kept_for_later(
    tmp_path: Path, github: GitHubStandIn
) -> None:
    """Refused at the door, not made into a verification only to be refused: a
    verification would answer every later resend of this candidate with its refusal."""
    with world("embedded", tmp_path, github, RSI_REPO_MAX_QUEUED=1) as w:
        with w.svc.db.session() as s:
            waiting = store.create(
                s,
                store.NewVerification(
                    repo=appkit.UPSTREAM,
                    pr_number=None,
                    task="cosyvoice3",
                    base_sha=OTHER_SHA,
                    head_sha=OTHER_SHA,
                    head_repo=appkit.FORK,
                    head_ref="rsi/waiting",
                    gpus=["H200"],
                    rounds=3,
                    modes=["streaming"],
                    candidate={},
                    candidate_id="waiting",
                    trigger="intake",
                ),
            ).id
        body = appkit.dumps(appkit.candidate())
        resp = w.client.post(
            "/api/v1/candidates", data=body, headers=appkit.intake_headers(body, "d-1")
        )
        assert resp.status_code == 429, resp.get_json()
        assert resp.headers["Retry-After"] == "300"
        answer = resp.get_json()
        assert (answer["queued"], answer["most"]) == (1, 1)
        assert "RSI_REPO_MAX_QUEUED=1" in answer["error"]
        assert "send the candidate again" in answer["error"]
        assert verifications(w) == [(appkit.UPSTREAM, "waiting")]
        assert w.github.dispatches == []

        with w.svc.db.session() as s:
            v = s.get(Verification, waiting)
            assert v is not None
            v.state = "cancelled"
        status, first = send(w, "d-1")  # the same delivery id: nothing was kept of it
        assert status == 202, first
        w.settle()
        assert len(w.github.dispatches) == 1
        assert verifications(w)[-1] == (appkit.UPSTREAM, CANDIDATE_ID)


def test_two_candidates_at_once_at_the_cap_get_one_place_and_one_429(
    tmp_path: Path, github: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the intakes of one repository are serialised, so two candidates sent
    together cannot both count one place left; the second is a 429, not a verification
    made only to be refused (which would answer every resend of it with the refusal)."""
    with world("deployed", tmp_path, github, RSI_REPO_MAX_QUEUED=1) as w:
        w.queue_may_wait = True
        one_runner = "gpus: [H200]\nrounds: 3\nmodes: [streaming]\nbudget:\n  max_running: 1\n"
        w.github.set_file(appkit.UPSTREAM, ".github/rsi.yml", one_runner)
        running = w.promote("d-run", candidate_id="running")  # holds the one runner
        w.settle()
        assert w.verification(running).state == "dispatched"
        both_counting = threading.Barrier(2, timeout=0.3)
        real = store.queued_requests

        def counted_together(s: Session, repo: str) -> int:
            with contextlib.suppress(threading.BrokenBarrierError):
                both_counting.wait()  # unserialised, both count here at once
            return real(s, repo)

        monkeypatch.setattr(store, "queued_requests", counted_together)
        answers: dict[str, int] = {}

        def post(cid: str) -> None:
            body = appkit.dumps(appkit.candidate(candidate_id=cid))
            headers = appkit.intake_headers(body, f"d-{cid}")
            resp = w.app.test_client().post("/api/v1/candidates", data=body, headers=headers)
            answers[cid] = resp.status_code

        w.at_once(lambda: post("a"), lambda: post("b"))
        assert sorted(answers.values()) == [202, 429], answers
        w.settle()
        assert len(w.github.dispatches) == 1
