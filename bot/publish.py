"""Take in a runner's bundle, build the evidence, and put it on the PR.

The comment is found by its hidden marker across *all* pages of comments and edited in
place; the PR body's evidence section replaces only itself; the check run is completed
with a conclusion that follows the verdict.
"""

from __future__ import annotations

import io
import logging
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from bot import ledger
from bot.flow import _upstream, artifact_name, claim, end, release
from bot.models import (
    FAILED,
    FINAL,
    INGESTING,
    PUBLISHED,
    RUNNING,
    BaselineMeasurement,
    PullRequest,
    Verification,
    utcnow,
)
from bot.runtime import Runtime
from evidence.build import Inputs, build, write
from evidence.errors import InputError
from evidence.load import Source
from evidence.model import Candidate, HistoryEntry
from evidence.render import COMMENT_LIMIT, COMMENT_MARKER, render_comment, replace_pr_section

log = logging.getLogger(__name__)

CONCLUSION = {
    "improved": "success",
    "regressed": "failure",
    "invalid": "failure",
    "no-change": "neutral",
}


# ----------------------------------------------------------------------- ingest


def ingest(rt: Runtime, vid: str, gpu: str) -> None:
    """Fetch one GPU's bundle, check it is this verification's, keep it."""
    with rt.db.session() as s:
        v = s.get(Verification, vid)
        if v is None or v.state in FINAL:
            return
        job = next(j for j in v.jobs if j.gpu == gpu)
        if job.bundle_key is None:
            data = _fetch_bundle(rt, v, gpu, job.workflow_run_id)
            if data is None:
                end(
                    rt,
                    s,
                    v,
                    FAILED,
                    f"The {gpu} runner finished but left no bundle "
                    f"(`{artifact_name(vid, gpu)}`): nothing to measure.",
                )
                return
            problem = _wrong_bundle(v, gpu, data)
            if problem:
                end(rt, s, v, FAILED, f"The {gpu} bundle was rejected: {problem}")
                return
            key = f"bundles/{vid}/{gpu.lower()}.zip"
            rt.store.put_bytes(key, data, "application/zip")
            job.bundle_key = key
        if all(j.bundle_key for j in v.jobs) and v.state in (RUNNING, "dispatched"):
            v.state = INGESTING
            ready = True
        else:
            ready = False
    if ready:
        rt.tasks.publish(vid)


def _fetch_bundle(rt: Runtime, v: Verification, gpu: str, run_id: int | None) -> bytes | None:
    name = artifact_name(v.id, gpu)
    runner = rt.settings.RSI_RUNNER_REPO
    if run_id is not None:
        iid = rt.github.installation_id(runner)
        _, listing = rt.github.request(
            iid, "GET", f"/repos/{runner}/actions/runs/{run_id}/artifacts?name={name}"
        )
        for art in listing.get("artifacts", []):
            if art.get("name") == name and not art.get("expired"):
                return rt.github.download(iid, f"/repos/{runner}/actions/artifacts/{art['id']}/zip")
    # Runners may put the bundle on S3 instead (`<prefix>/<verification-id>/<gpu>.zip`).
    for key in (f"{v.id}/{gpu.lower()}.zip", f"{v.id}/{gpu}.zip"):
        if rt.store.exists(key):
            data: bytes = rt.store.get_bytes(key)
            return data
    return None


def _wrong_bundle(v: Verification, gpu: str, data: bytes) -> str | None:
    """The bundle must be this verification's: id, repository, commits and GPU."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = z.namelist()
            inner = next(
                (n for n in names if n.endswith("manifest.json") and n.count("/") <= 1), None
            )
            if inner is None:
                return "it has no manifest.json"
            m = orjson.loads(z.read(inner))
    except (zipfile.BadZipFile, orjson.JSONDecodeError, KeyError) as exc:
        return f"it is not a readable zip with a JSON manifest ({exc})"
    if not isinstance(m, dict):
        return "its manifest is not a JSON object"
    want = {"verification_id": v.id, "repo": v.repo}
    for k, val in want.items():
        if m.get(k) != val:
            return f"its manifest says {k} {m.get(k)!r}, expected {val!r}"
    if (m.get("base") or {}).get("sha") != v.base_sha:
        return f"its base is {(m.get('base') or {}).get('sha')!r}, expected {v.base_sha}"
    if (m.get("head") or {}).get("sha") != v.head_sha:
        return f"its head is {(m.get('head') or {}).get('sha')!r}, expected {v.head_sha}"
    if str(m.get("gpu", "")).upper().replace("NVIDIA ", "") != gpu.upper():
        return f"it is for GPU {m.get('gpu')!r}, expected {gpu}"
    return None


# ----------------------------------------------------------------------- publish


def publish(rt: Runtime, vid: str) -> None:
    """Build the evidence and put it on the PR; the lease keeps it to one worker, and the
    final state change is conditional, so a verification is published once."""
    if not claim(rt, vid, (INGESTING,)):
        return
    try:
        _publish(rt, vid)
    except Exception:
        release(rt, vid)
        raise


def _publish(rt: Runtime, vid: str) -> None:
    with rt.db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        keys = [(j.gpu, j.bundle_key) for j in v.jobs]
        cand = Candidate.model_validate(v.candidate)
        history = _history(s, v)
    with tempfile.TemporaryDirectory(prefix="rsi-publish-") as tmp:
        work = Path(tmp)
        bundles = []
        for gpu, key in keys:
            assert key is not None
            p = work / f"{gpu.lower()}.zip"
            p.write_bytes(rt.store.get_bytes(key))
            bundles.append(p)
        try:
            ev, sources = build(
                Inputs(
                    bundles=bundles,
                    candidate=cand,
                    history=history,
                    github_url=rt.settings.web_url,
                    # The repository's thresholds (`.github/rsi.yml`), else the defaults.
                    policy=rt.repo_config(v.repo).config.policy(),
                )
            )
        except InputError as exc:
            with rt.db.session() as s:
                row = s.get(Verification, vid)
                assert row is not None
                end(rt, s, row, FAILED, f"A bundle could not be read: {exc}")
            return
        out = work / "out"
        write(
            ev,
            sources,
            out,
            None,
            report_url=rt.report_url(vid),
            plot_url=lambda name: rt.signer.plot_url(rt.settings.PUBLIC_URL, vid, name),
        )
        rt.store.put_tree(f"reports/{vid}", out)
        check = (out / "check.md").read_text()
        section = (out / "pr-body.md").read_text()
    pull = _upstream(rt, v).get_pull(v.pr_number)
    moved = _main_moved(rt, v, pull)
    with rt.db.session() as s:
        v = s.get(Verification, vid)
        assert v is not None
        if v.state != INGESTING:  # superseded or cancelled meanwhile: never shown as current
            return
        table = ledger.render(
            ledger.rows_for(s, v, ev), main_moved=moved, base_ref=pull.base.ref, base_sha=v.base_sha
        )
        comment = ledger.compose(
            table, render_comment(ev, rt.report_url(vid), limit=COMMENT_LIMIT - len(table) - 2)
        )
        upsert_comment(rt, s, v, comment)
    _update_body(rt, pull, section)
    _upstream(rt, v).get_check_run(v.check_run_id).edit(
        status="completed",
        conclusion=CONCLUSION[ev.verdict],
        completed_at=utcnow(),
        details_url=rt.report_url(vid),
        output={"title": _title(ev.verdict, ev.reason), "summary": check},
    )
    with rt.db.session() as s:
        res = s.execute(
            update(Verification)
            .where(Verification.id == vid, Verification.state == INGESTING)
            .values(
                state=PUBLISHED,
                verdict=ev.verdict,
                reason=ev.reason,
                claim_status=ev.claim.status,
                published_at=utcnow(),
                lease_until=None,
                headline={
                    g: {
                        **(r.headline.model_dump() if r.headline else {}),
                        "verdict": r.verdict,
                        "claim_status": r.claim_status,
                    }
                    for g, r in ev.gpus.items()
                },
            )
        )
        if res.rowcount:  # type: ignore[attr-defined]
            row = s.get(Verification, vid)
            assert row is not None
            _record_baseline(s, row, sources)
    log.info("published %s: %s", vid, ev.verdict)


def _title(verdict: str, reason: str) -> str:
    return f"{verdict}: {reason}"[:250]


def _history(s: Session, v: Verification) -> list[HistoryEntry]:
    rows = s.scalars(
        select(BaselineMeasurement).where(
            BaselineMeasurement.repo == v.repo,
            BaselineMeasurement.task == v.task,
            BaselineMeasurement.verification_id != v.id,
        )
    )
    return [
        HistoryEntry(
            task=r.task,
            gpu=r.gpu,
            mode=r.mode,
            concurrency=r.concurrency,
            metric=r.metric,
            value=r.value,
            sha=r.sha,
            measured_at=r.measured_at.isoformat(),
            fingerprint=r.fingerprint,
        )
        for r in rows
    ]


def _record_baseline(s: Session, v: Verification, sources: list[Source]) -> None:
    """Every measurement of the base (main) side joins the history."""
    for src in sources:
        fp = src.manifest.environment.get("base") or {}
        for lr in src.runs:
            if lr.run.side != "base" or not lr.usable:
                continue
            for metric in ("throughput_qps", "latency_p95_s", "audio_ttfp_p95_s"):
                value = lr.metrics.get(metric)
                if value is not None:
                    s.add(
                        BaselineMeasurement(
                            repo=v.repo,
                            task=v.task,
                            gpu=src.gpu,
                            mode=lr.run.mode,
                            concurrency=lr.run.concurrency,
                            metric=metric,
                            value=value,
                            sha=v.base_sha,
                            verification_id=v.id,
                            fingerprint=fp,
                        )
                    )


def upsert_comment(rt: Runtime, s: Session, v: Verification, body: str) -> None:
    """Edit the one evidence comment, found by its marker across all pages; else create it."""
    assert v.pr_number is not None
    pr_row = s.scalar(
        select(PullRequest).where(PullRequest.repo == v.repo, PullRequest.number == v.pr_number)
    )
    issue = _upstream(rt, v).get_issue(v.pr_number)
    if pr_row is not None and pr_row.comment_id is not None:
        comment = issue.get_comment(pr_row.comment_id)
        comment.edit(body)
        return
    for comment in issue.get_comments():  # PaginatedList: every page
        if COMMENT_MARKER in (comment.body or ""):
            comment.edit(body)
            break
    else:
        comment = issue.create_comment(body)
    if pr_row is not None:
        pr_row.comment_id = comment.id


def _main_moved(rt: Runtime, v: Verification, pull: Any) -> int:
    """How many commits the PR's base branch is past the measured base (0 when the PR's
    own record of its base is the measured one, which saves a request)."""
    if pull.base.sha == v.base_sha:
        return 0
    cmp = _upstream(rt, v).compare(v.base_sha, pull.base.ref)
    return int(cmp.ahead_by)


def _update_body(rt: Runtime, pr: Any, section: str) -> None:
    new = replace_pr_section(pr.body, section)
    if new != (pr.body or ""):
        pr.edit(body=new)
