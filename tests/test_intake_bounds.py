"""Intake values no column can hold get 422 naming the field, on SQLite and PostgreSQL
alike (PostgreSQL refused them with a 500: a string past its column, a NUL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from bot.models import Verification
from evidence.synth import HEAD_SHA
from tests import appkit
from tests.standin import GitHubStandIn
from tests.worlds import SHAPES, World, world


@pytest.fixture(params=SHAPES)
def w(request: pytest.FixtureRequest, tmp_path: Path, github: GitHubStandIn) -> Iterator[World]:
    with world(request.param, tmp_path, github) as x:
        yield x


def _head(**changes: str) -> dict[str, str]:
    return {"repo": appkit.FORK, "ref": appkit.HEAD_REF, "sha": HEAD_SHA, **changes}


CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"candidate_id": "c" * 201}, "candidate_id", "longer than 200 characters"),
    ({"task": "t" * 101}, "task", "longer than 100 characters"),
    ({"repo": "o/" + "r" * 199}, "repo", "longer than 200 characters"),
    ({"head": _head(ref="b" * 256)}, "head.ref", "longer than 255 characters"),
    ({"head": _head(repo="o/" + "f" * 199)}, "head.repo", "longer than 200 characters"),
    (
        {"head": _head(sha="a" * 65)},
        "head.sha",
        "Value error, not a full commit SHA (40 or 64 lowercase hex digits)",
    ),
    ({"pull_request": 2**40}, "pull_request", "not a pull request number"),
    ({"candidate_id": "r14\x00"}, "candidate_id", "holds a NUL character"),
    ({"head": _head(ref="rsi/x\x00y")}, "head.ref", "holds a NUL character"),
    ({"title": "fast\x00er"}, "title", "holds a NUL character"),
    ({"caveats": ["ok", "n\x00"]}, "caveats[1]", "holds a NUL character"),
    ({"harness": {"run\x00id": 1}}, "harness.run\x00id", "key holds a NUL character"),
]


@pytest.mark.parametrize(("changes", "field", "message"), CASES)
def test_a_value_no_column_holds_is_a_422(
    w: World, changes: dict[str, Any], field: str, message: str
) -> None:
    body = appkit.dumps(appkit.candidate(**changes))
    resp = w.client.post(
        "/api/v1/candidates", data=body, headers=appkit.intake_headers(body, "d-bounds")
    )
    assert resp.status_code == 422, resp.get_data(as_text=True)
    assert {"field": field, "message": message} in resp.get_json()["errors"]
    with w.svc.db.session() as s:
        assert s.scalar(select(func.count()).select_from(Verification)) == 0
    # The longest values that fit are taken.
    fits = appkit.candidate(candidate_id="c" * 200, head=_head(ref="rsi/" + "b" * 251))
    body = appkit.dumps(fits)
    ok = w.client.post("/api/v1/candidates", data=body, headers=appkit.intake_headers(body, "d-ok"))
    assert ok.status_code == 202, ok.get_data(as_text=True)


@pytest.mark.parametrize(
    ("head", "field"),
    [
        (_head(sha="not-a-sha"), "head.sha"),
        (_head(sha="abc1234"), "head.sha"),  # the runner checks out exactly 40 digits
        (_head(repo="owner/.."), "head.repo"),
        (_head(repo="ünï/cödé"), "head.repo"),
        (_head(ref="HEAD"), "head.ref"),
        (_head(sha="../../../orgs/x?y="), "head.sha"),
        (_head(repo="not a repo!!"), "head.repo"),
        (_head(ref="--upload-pack=x"), "head.ref"),
        (_head(ref="rsi/a..b"), "head.ref"),
        (_head(ref="rsi/x y"), "head.ref"),
    ],
)
def test_a_head_git_or_github_would_not_take_is_a_422(
    w: World, head: dict[str, str], field: str
) -> None:
    """Each part of the head ends up in a git command or an API path: before, all of
    these were stored and one reached dispatch."""
    body = appkit.dumps(appkit.candidate(head=head))
    resp = w.client.post(
        "/api/v1/candidates", data=body, headers=appkit.intake_headers(body, "d-head")
    )
    assert resp.status_code == 422, resp.get_data(as_text=True)
    assert [e["field"] for e in resp.get_json()["errors"]] == [field]
    with w.svc.db.session() as s:
        assert s.scalar(select(func.count()).select_from(Verification)) == 0


@pytest.mark.parametrize(
    "repo",
    [
        "ѕgl-project/sglang-omni",
        "../..",
        "x/..",
        "./x",
        "o/r/x",
        "sgl-project/sglang-omni\n",  # a second spelling of the same repository
        "-x/y",  # no GitHub owner starts with '-'
    ],
)
def test_a_repository_git_or_github_would_not_take_is_a_422(w: World, repo: str) -> None:
    """The candidate's own repository gets the head's strict owner/name rule: `\\w`
    took a Cyrillic ѕ and `..` before."""
    body = appkit.dumps(appkit.candidate(repo=repo))
    resp = w.client.post(
        "/api/v1/candidates", data=body, headers=appkit.intake_headers(body, "d-repo")
    )
    assert resp.status_code == 422, resp.get_data(as_text=True)
    assert [e["field"] for e in resp.get_json()["errors"]] == ["repo"]
    with w.svc.db.session() as s:
        assert s.scalar(select(func.count()).select_from(Verification)) == 0


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"task": "../../etc/passwd"}, "task"),
        ({"task": "Cosyvoice3"}, "task"),
        ({"head": {"ref": "rsi/\u202egnp.exe"}}, "head.ref"),  # shown reversed
        ({"head": {"ref": "rsi/a\u200bb"}}, "head.ref"),  # a zero-width space
        ({"head": {"repo": "openrsi-bot/sglang-omni\n"}}, "head.repo"),
    ],
)
def test_names_that_would_show_or_mean_something_else_are_a_422(
    w: World, changes: dict[str, object], field: str
) -> None:
    doc = appkit.candidate()
    for key, value in changes.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) else value
    body = appkit.dumps(doc)
    resp = w.client.post(
        "/api/v1/candidates", data=body, headers=appkit.intake_headers(body, "d-name")
    )
    assert resp.status_code == 422, resp.get_data(as_text=True)
    assert [e["field"] for e in resp.get_json()["errors"]] == [field]
