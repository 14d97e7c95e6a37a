"""Accuracy audited like speed: transcriptions failed or missing from the accuracy
outputs are counted per side, error rates are compared over the samples both sides
scored, and sides whose accuracy outputs cover different samples are an error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from evidence.build import Inputs, build
from evidence.model import Evidence, Finding
from evidence.policy import Policy
from tests.bundles import clean_bundle, edit_manifest, manifest, run_ids

Row = dict[str, Any]


def edit_wer(bundle: Path, run_id: str, fn: Callable[[list[Row]], list[Row]]) -> None:
    """Rewrite a run's wer_results.json rows; its summary counts them as the script does."""
    run = next(r for r in manifest(bundle)["runs"] if r["id"] == run_id)
    path = bundle / run["files"]["wer"]
    doc = orjson.loads(path.read_bytes())
    rows = fn(doc["per_sample"])
    ok = [r["wer"] for r in rows if r["is_success"]]
    doc["per_sample"] = rows
    doc["summary"] = {
        "total_samples": len(rows),
        "evaluated": len(ok),
        "skipped": len(rows) - len(ok),
        "wer_mean": round(float(np.mean(ok)), 4),
    }
    path.write_bytes(orjson.dumps(doc))


def drop(ids: set[str]) -> Callable[[list[Row]], list[Row]]:
    return lambda rows: [r for r in rows if r["id"] not in ids]


def fail(ids: set[str]) -> Callable[[list[Row]], list[Row]]:
    def fn(rows: list[Row]) -> list[Row]:
        for r in rows:
            if r["id"] in ids:
                r.update(is_success=False, wer=None, error="whisper: empty audio")
        return rows

    return fn


def set_wer(values: dict[str, float]) -> Callable[[list[Row]], list[Row]]:
    def fn(rows: list[Row]) -> list[Row]:
        for r in rows:
            if r["id"] in values:
                r["wer"] = values[r["id"]]
        return rows

    return fn


def sample_ids(bundle: Path, run_id: str) -> list[str]:
    run = next(r for r in manifest(bundle)["runs"] if r["id"] == run_id)
    doc = orjson.loads((bundle / run["files"]["wer"]).read_bytes())
    return [r["id"] for r in doc["per_sample"]]


def evidence(bundle: Path) -> Evidence:
    ev, _ = build(Inputs(bundles=[bundle], policy=Policy()))
    return ev


def found(ev: Evidence, code: str) -> list[Finding]:
    return [f for f in ev.audit if f.code == code]


def test_lost_transcriptions_are_counted_per_side(tmp_path: Path) -> None:
    """SGLang-Omni's own seed-tts run lost 1 base and 4 head transcriptions of 24."""
    b = clean_bundle(tmp_path / "b", requests=24)
    ids = sample_ids(b, run_ids(b, "base", "non-streaming")[0])
    for rid in run_ids(b, "base", "non-streaming"):
        edit_wer(b, rid, fail({ids[0]}))
    for rid in run_ids(b, "head", "non-streaming"):
        edit_wer(b, rid, drop(set(ids[1:5])))
    ev = evidence(b)
    got = {f.numbers["side"]: f for f in found(ev, "accuracy-failed")}
    assert set(got) == {"base", "head"}
    assert got["base"].numbers["failed"] == 4  # one a round, four rounds
    assert got["base"].numbers["missing"] == 0
    assert got["head"].numbers["missing"] == 16
    assert got["head"].numbers["failed"] == 0
    assert got["head"].numbers["total"] == 96
    assert got["base"].severity == "error"  # 1 of 24 is past the 1% guard
    assert got["head"].severity == "error"
    assert "non-streaming" in got["head"].message
    assert ids[1] in got["head"].samples
    assert ev.verdict == "invalid"
    assert "accuracy-failed" in ev.reason


def test_a_failure_rate_under_the_guard_warns(tmp_path: Path) -> None:
    b = clean_bundle(tmp_path / "b", requests=120)
    rid = run_ids(b, "head", "streaming")[0]
    edit_wer(b, rid, fail({sample_ids(b, rid)[7]}))
    ev = evidence(b)
    (f,) = found(ev, "accuracy-failed")
    assert f.severity == "warning"
    assert f.numbers["failed"] == 1
    assert f.numbers["total"] == 480
    assert not found(ev, "accuracy-sample-set-mismatch")
    assert ev.verdict != "invalid"


def test_wer_is_compared_over_the_samples_both_sides_scored(tmp_path: Path) -> None:
    """A sample the head failed to transcribe, which the base scored badly, would make the
    head look better if each side's WER were taken over what it scored."""
    b = clean_bundle(tmp_path / "b", requests=120)
    ids = sample_ids(b, run_ids(b, "base", "streaming")[0])
    hard = dict.fromkeys(ids[:1], 1.0)
    for rid in run_ids(b, "base", "streaming"):
        edit_wer(b, rid, set_wer(hard))
    for rid in run_ids(b, "head", "streaming"):
        edit_wer(b, rid, set_wer(hard))
    rid = run_ids(b, "head", "streaming")[0]
    edit_wer(b, rid, fail(set(hard)))
    ev = evidence(b)
    row = next(r for r in ev.study if r.metric == "wer_mean" and r.mode == "streaming")
    # Over the common samples the hard one is out of both sides: base's mean WER is
    # the mean of its other samples, not pulled up by 1.0 / 120 ≈ 0.0083.
    expect = []
    for r in run_ids(b, "base", "streaming"):
        doc = orjson.loads((b / f"runs/{r}/wer_results.json").read_bytes())
        expect.append(np.mean([s["wer"] for s in doc["per_sample"] if s["id"] not in hard]))
    assert row.base is not None
    assert abs(row.base - float(np.mean(expect))) < 1e-9
    assert row.delta_abs is not None
    assert abs(row.delta_abs) < 0.005
    assert row.verdict != "improved"
    (f,) = found(ev, "accuracy-failed")
    assert f.numbers["side"] == "head"


def test_accuracy_outputs_of_other_samples_are_an_error(tmp_path: Path) -> None:
    b = clean_bundle(tmp_path / "b", requests=120)
    ids = sample_ids(b, run_ids(b, "head", "non-streaming")[0])

    def rename(rows: list[Row]) -> list[Row]:
        for r in rows:
            if r["id"] == ids[3]:
                r["id"] = "not-a-sample-of-this-run"
        return rows

    for rid in run_ids(b, "head", "non-streaming"):
        edit_wer(b, rid, rename)
    ev = evidence(b)
    (f,) = found(ev, "accuracy-sample-set-mismatch")
    assert f.severity == "error"
    assert f.numbers == {"only_base": 0, "only_head": 1}
    assert "not-a-sample-of-this-run" in f.samples
    assert ev.verdict == "invalid"


def test_a_side_with_no_accuracy_outputs_is_an_error_not_a_pass(tmp_path: Path) -> None:
    """A head whose accuracy run crashed, or that wrote no accuracy file, left the
    accuracy guard nothing to compare: before, a WER rise went unseen that way."""
    honest = clean_bundle(tmp_path / "honest", speedup=0.05)
    assert found(evidence(honest), "accuracy-missing") == []
    for how in ("no file", "run failed"):
        b = clean_bundle(tmp_path / how, speedup=0.05)
        head = set(run_ids(b, "head", "non-streaming"))

        def lose(doc: dict[str, Any], how: str = how, head: set[str] = head) -> None:
            for r in doc["runs"]:
                if r["id"] in head and how == "no file":
                    r["files"].pop("wer")
                elif r["id"] in head:
                    r["status"] = "failed"

        edit_manifest(b, lose)
        ev = evidence(b)
        (f,) = found(ev, "accuracy-missing")
        assert f.severity == "error"
        assert f.message.startswith("non-streaming c=8: base has accuracy outputs but head")
        assert set(f.runs) == head
        assert ev.verdict == "invalid"
