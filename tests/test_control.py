"""The null control (`control: aa`): base against base, read, compared and shown.

Every bundle here is a real one (the H200 CUDA-graph A/A, tests/fixtures/h200-reference)
unpacked, marked as measured by the alternate design, and given a control list whose
runs are copies of its own runs' files under new names: the control pairs are real
measurements. "Moved" controls scale a copied speed file's numbers (and its run's wall
clock) so the control server looks faster than base by a known factor.
"""

from __future__ import annotations

import copy
import hashlib
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from evidence.build import Inputs, build, write
from evidence.control import demote
from evidence.errors import BoundError
from evidence.limits import Limits
from evidence.metrics import BY_NAME
from evidence.model import ControlRow, Evidence, StudyRow
from evidence.render import render_check, render_comment, render_report

REAL = Path(__file__).parent / "fixtures" / "h200-reference" / "rsi-bundle-v-autoaag-h200.zip"
ALTERNATE = {"name": "alternate", "paired": True, "unit": "burst", "burst_requests": 128}
Doc = dict[str, Any]
MOVED = 1.075  # the control server's throughput scaled so the control reads about +6%


TIMES = (
    "wall_clock_s",
    "latency_mean_s",
    "latency_median_s",
    "latency_p95_s",
    "latency_p99_s",
    "rtf_mean",
    "audio_ttfp_median_s",
    "audio_ttfp_p95_s",
    "inter_chunk_p95_s",
)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _scale(folder: Path, run: Doc, factor: float) -> None:
    """Make a run's throughput `factor` times what was measured: its wall clock (which
    throughput is computed from), every time in its records and its speed file's summary
    scaled alike, so the audit finds the records as consistent as they were."""
    run["wall_clock_s"] = run["wall_clock_s"] / factor
    p = folder / run["files"]["speed"]
    speed = orjson.loads(p.read_bytes())
    s = speed["summary"]
    for k in ("throughput_qps", "audio_throughput_s_per_s"):
        s[k] = s[k] * factor
    for k in TIMES:
        if isinstance(s.get(k), float):
            s[k] = s[k] / factor
    for req in speed["per_request"]:
        for k in ("latency_s", "audio_ttfp_s", "rtf"):
            if isinstance(req.get(k), float):
                req[k] = req[k] / factor
        req["inter_chunk_s"] = [x / factor for x in req.get("inter_chunk_s") or []]
    p.write_bytes(orjson.dumps(speed))


def control_bundle(
    dest: Path,
    *,
    control_scale: float = 1.0,
    head_scale: float = 1.0,
    edit: Callable[[Doc], None] | None = None,
) -> Path:
    """The real A/A unpacked into `dest`, design alternate, and a control of 8 pairs: pair
    k's two bursts are copies of two of the bundle's own runs of one side (base 1 and 2,
    3 and 4, …, then head 1 and 2, …: base against base, real measurements), ordered as
    the runner orders control pairs (odd pairs base first). `control_scale` multiplies
    the control server's throughput, `head_scale` the real head's; digests cover every
    file, so the bundle stays whole."""
    with zipfile.ZipFile(REAL) as z:
        z.extractall(dest)
    doc: Doc = orjson.loads((dest / "manifest.json").read_bytes())
    doc["design"] = ALTERNATE
    runs = {r["id"]: r for r in doc["runs"]}
    sources = [f"r{i}-{side}-stream-c16" for side in ("base", "head") for i in range(1, 9)]
    control: list[Doc] = []
    for k in range(1, 9):
        pair = []
        for side, rid in zip(("base", "head"), sources[2 * k - 2 : 2 * k], strict=True):
            new = f"ctl-r{k}-{side}-stream-c16"
            run = copy.deepcopy(runs[rid])
            run.update(id=new, side=side, round=k)
            run.pop("logs", None)
            for kind in ("speed", "server"):
                old = dest / run["files"][kind]
                rel = f"control/{new}/{old.name}"
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                (dest / rel).write_bytes(old.read_bytes())
                run["files"][kind] = rel
            if side == "head" and control_scale != 1.0:
                _scale(dest, run, control_scale)
            pair.append(run)
        control += pair if k % 2 else pair[::-1]
    if head_scale != 1.0:
        for r in doc["runs"]:
            if r["side"] == "head":
                _scale(dest, r, head_scale)
        # the runner's looks saw the unscaled A/A (equivalent): as fixed rounds instead,
        # so its decisions do not overrule the scaled head (study._defer_to_runner)
        doc["adaptive"] = None
    doc["control"] = {
        "kind": "aa",
        "summary": "base against the base code again, resident in its own cgroup",
        "runs": control,
        "gpu_minutes": 0.31,
    }
    for p in dest.rglob("*"):
        if p.is_file() and p.name != "manifest.json":
            doc["digests"][p.relative_to(dest).as_posix()] = _sha(p)
    if edit is not None:
        edit(doc)
    (dest / "manifest.json").write_bytes(orjson.dumps(doc))
    return dest


def _row(ev: Evidence) -> Any:
    (row,) = [r for r in ev.study if r.primary]
    return row


def texts(ev: Evidence, tmp: Path) -> dict[str, str]:
    return {
        "comment": render_comment(ev, None),
        "check": render_check(ev, None),
        "report": render_report(ev, tmp),
    }


def test_a_quiet_control_is_read_compared_and_changes_nothing(tmp_path: Path) -> None:
    plain, _ = build(Inputs(bundles=[control_bundle(tmp_path / "a", edit=_no_control)]))
    ev, sources = build(Inputs(bundles=[control_bundle(tmp_path / "b")]))
    assert not [f for f in ev.audit if f.severity == "error"], ev.audit
    assert not [f for f in ev.audit if f.code == "control-moved"]
    # The control never enters the study, the rounds or the base/head audits.
    assert ev.study == plain.study
    assert ev.verdict == plain.verdict == "no-change"
    assert len(ev.rounds) == 16
    assert len(sources[0].control_runs) == 16
    ctl = ev.gpus["H200"].control
    assert ctl is not None
    assert (ctl.kind, ctl.runs, ctl.gpu_minutes) == ("aa", 16, 0.31)
    (c,) = ctl.rows
    assert (c.mode, c.concurrency, c.metric, c.method, c.pairs) == (
        "streaming",
        16,
        "throughput_qps",
        "paired",
        8,
    )
    assert c.verdict == "no-change"
    assert not c.moved
    assert c.delta_pct is not None
    assert abs(c.delta_pct) < 3
    assert plain.gpus["H200"].control is None


def _no_control(doc: Doc) -> None:
    del doc["control"]


def test_a_control_that_moved_demotes_an_improved_row(tmp_path: Path) -> None:
    """The real head made 5% faster (+5.1% measured), the control server 7.5% (its
    own base-against-base pairs read −1.3%, so about +6%): improved without the control;
    with it, inconclusive, and the audit says the control moved."""
    bundle = control_bundle(tmp_path / "b", head_scale=1.05, control_scale=MOVED)
    ev, _ = build(Inputs(bundles=[bundle]))
    row = _row(ev)
    assert row.demoted_from == "improved"
    assert row.verdict == "inconclusive"
    assert "null control (base against base) moved +" in (row.note or "")
    assert ev.verdict == "inconclusive"
    assert ev.gpus["H200"].verdict == "inconclusive"
    assert "would read improved, but the null control (base against base) moved as much" in (
        ev.reason
    )
    (moved,) = [f for f in ev.audit if f.code == "control-moved"]
    assert moved.severity == "warning"
    assert moved.message.startswith("The null control (base against base, 8 pairs) moved +")
    assert "on H200 streaming c=16" in moved.message
    assert "favoured the head's slot over the base's" in moved.message
    assert moved.runs[0].startswith("ctl-r1-")
    ctl = ev.gpus["H200"].control
    assert ctl is not None
    (c,) = ctl.rows
    assert c.moved
    assert c.verdict == "improved"
    assert c.delta_pct is not None
    assert 5.5 < c.delta_pct < 6.5
    # Without the control, the same real runs read improved.
    plain, _ = build(
        Inputs(bundles=[control_bundle(tmp_path / "p", head_scale=1.05, edit=_no_control)])
    )
    assert plain.verdict == "improved"


def test_a_control_that_moved_less_leaves_the_verdict(tmp_path: Path) -> None:
    bundle = control_bundle(tmp_path / "b", head_scale=1.12, control_scale=MOVED)
    ev, _ = build(Inputs(bundles=[bundle]))
    assert _row(ev).verdict == "improved"
    assert _row(ev).demoted_from is None
    assert ev.verdict == "improved"
    assert [f.code for f in ev.audit if f.code == "control-moved"] == ["control-moved"]


def test_the_control_in_every_text_and_evidence_json(tmp_path: Path) -> None:
    bundle = control_bundle(tmp_path / "b", head_scale=1.05, control_scale=MOVED)
    ev, sources = build(Inputs(bundles=[bundle]))
    t = texts(ev, tmp_path)
    for kind in ("comment", "check"):
        assert "  - Null control (base against base, 8 pairs, 0.31 GPU-min): +" in t[kind]
        assert "— improved" in t[kind]
    assert "Null control" in t["report"]
    assert "ctl-r1-base-stream-c16" not in t["comment"].split("Raw-record audit")[0]
    write(ev, sources, tmp_path / "out", None)
    doc = orjson.loads((tmp_path / "out" / "evidence.json").read_bytes())
    ctl = doc["gpus"]["H200"]["control"]
    assert ctl["kind"] == "aa"
    assert ctl["rows"][0]["pairs"] == 8
    assert ctl["rows"][0]["verdict"] == "improved"
    assert [r["demoted_from"] for r in doc["study"] if r["primary"]] == ["improved"]
    assert Evidence.model_validate(doc).gpus["H200"].control == ev.gpus["H200"].control


HOSTILE = "<img src=x onerror=alert(1)> @team [x](https://evil.example) </details> `|` #1"


def test_hostile_control_strings_are_inert(tmp_path: Path) -> None:
    def hostile(doc: Doc) -> None:
        doc["control"]["summary"] = "# heading\n" + HOSTILE + "x" * 5000
        for r in doc["control"]["runs"]:
            r["error"] = HOSTILE
            r["log_tail"] = HOSTILE
        doc["control"]["runs"][0]["status"] = "failed"

    bundle = control_bundle(tmp_path / "b", control_scale=1.06, edit=hostile)
    ev, _ = build(Inputs(bundles=[bundle]))
    ctl = ev.gpus["H200"].control
    assert ctl is not None
    assert ctl.runner_summary is not None
    assert len(ctl.runner_summary) <= 1000
    assert "\n" not in ctl.runner_summary
    (c,) = ctl.rows
    assert c.pairs == 7
    assert "1 incomplete control pair(s) left out" in (c.note or "")
    t = texts(ev, tmp_path)
    for kind in ("comment", "check"):
        md = t[kind]
        assert "<img" not in md
        assert "@team" not in md
        assert "](https://evil" not in md
        assert "xxxxx" not in md  # the runner's own summary stays out of the Markdown
    assert "<img src=x" not in t["report"]


def _shares_a_real_file(doc: Doc) -> None:
    doc["control"]["runs"][3]["files"]["speed"] = doc["runs"][0]["files"]["speed"]


def _shares_a_control_file(doc: Doc) -> None:
    runs = doc["control"]["runs"]
    runs[3]["files"]["server"] = runs[2]["files"]["server"]


def _side(doc: Doc) -> None:
    doc["control"]["runs"][2]["side"] = "control"


def _not_a_list(doc: Doc) -> None:
    doc["control"]["runs"] = {"a": 1}


def _not_an_object(doc: Doc) -> None:
    doc["control"] = "aa"


def _kind(doc: Doc) -> None:
    doc["control"]["kind"] = "ab"


def _minutes(doc: Doc) -> None:
    doc["control"]["gpu_minutes"] = "lots"


def _missing_file(doc: Doc) -> None:
    doc["control"]["runs"][1]["files"]["speed"] = "control/nowhere/speed_results.json"


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (_shares_a_real_file, "control.runs: runs 'r1-base-stream-c16' and 'ctl-r2-base"),
        (_shares_a_control_file, "runs 'ctl-r2-head-stream-c16' and 'ctl-r2-base-stream-c16' both"),
        (_side, "control.runs.2.side"),
        (_not_a_list, "control.runs: Input should be a valid list"),
        (_not_an_object, "control: must be an object"),
        (_kind, "control.kind"),
        (_minutes, "control.gpu_minutes"),
        (_missing_file, "control/nowhere/speed_results.json is missing"),
    ],
)
def test_a_malformed_control_is_a_finding_naming_it_and_the_real_runs_are_judged(
    tmp_path: Path, edit: Callable[[Doc], None], says: str
) -> None:
    ev, _ = build(Inputs(bundles=[control_bundle(tmp_path / "b", edit=edit)]))
    bad = [f for f in ev.audit if f.code == "bundle-invalid"]
    assert any(says in f.message for f in bad), [f.message for f in bad]
    assert ev.verdict == "invalid"
    row = _row(ev)  # the real runs are still read and compared
    assert row.pairs == 8
    assert row.delta_pct is not None
    assert abs(row.delta_pct) < 3
    render_comment(ev, None)
    render_report(ev, tmp_path)


def test_too_many_control_runs_are_refused_by_the_run_bound(tmp_path: Path) -> None:
    def twice(doc: Doc) -> None:
        doc["control"]["runs"] *= 2

    bundle = control_bundle(tmp_path / "b", edit=twice)
    with pytest.raises(BoundError, match=r"control\.runs: 32 runs, more than 20"):
        build(Inputs(bundles=[bundle], limits=Limits(max_runs=20)))


def test_a_control_number_out_of_range_is_refused_naming_it(tmp_path: Path) -> None:
    def far(doc: Doc) -> None:
        doc["control"]["runs"][4]["wall_clock_s"] = 1e12

    with pytest.raises(BoundError, match=r"control\.runs\[4\]\.wall_clock_s"):
        build(Inputs(bundles=[control_bundle(tmp_path / "b", edit=far)]))


def test_control_files_are_covered_by_the_digests(tmp_path: Path) -> None:
    bundle = control_bundle(tmp_path / "b")
    p = bundle / "control" / "ctl-r3-head-stream-c16" / "speed_results.json"
    p.write_bytes(p.read_bytes() + b" ")
    ev, _ = build(Inputs(bundles=[bundle]))
    (bad,) = [f for f in ev.audit if f.code == "digest-mismatch"]
    assert "control/ctl-r3-head-stream-c16/speed_results.json differs" in bad.message


def test_hostile_control_run_ids_are_inert_where_the_audit_lists_them(tmp_path: Path) -> None:
    def ids(doc: Doc) -> None:
        for i, r in enumerate(doc["control"]["runs"]):
            r["id"] = f"{HOSTILE} {i}"

    ev, _ = build(Inputs(bundles=[control_bundle(tmp_path / "b", control_scale=MOVED, edit=ids)]))
    (moved,) = [f for f in ev.audit if f.code == "control-moved"]
    assert moved.runs[0] == f"{HOSTILE} 0"
    t = texts(ev, tmp_path)
    for kind in ("comment", "check"):
        assert "<img" not in t[kind]
        assert "@team" not in t[kind]
        assert "](https://evil" not in t[kind]
    assert "<img src=x" not in t["report"]


def test_a_control_of_a_sequential_bundle_is_compared_unpaired(tmp_path: Path) -> None:
    def sequential(doc: Doc) -> None:
        del doc["design"]

    ev, _ = build(Inputs(bundles=[control_bundle(tmp_path / "b", edit=sequential)]))
    ctl = ev.gpus["H200"].control
    assert ctl is not None
    (c,) = ctl.rows
    assert (c.method, c.pairs, c.n_base, c.n_control) == ("welch", None, 8, 8)
    assert "Null control (base against base, 8 base / 8 control rounds, 0.31 GPU-min)" in (
        render_comment(ev, None)
    )


def test_an_empty_control_says_nothing_could_be_compared(tmp_path: Path) -> None:
    def empty(doc: Doc) -> None:
        doc["control"]["runs"] = []
        del doc["control"]["gpu_minutes"]

    ev, _ = build(Inputs(bundles=[control_bundle(tmp_path / "b", edit=empty)]))
    assert not [f for f in ev.audit if f.severity == "error"]
    assert "  - Null control (base against base): no control run could be compared\n" in (
        render_comment(ev, None)
    )


def _study_row(metric: str, verdict: str, delta: float, **more: Any) -> StudyRow:
    m = BY_NAME[metric]
    return StudyRow(
        gpu="H200",
        mode="streaming",
        concurrency=16,
        metric=metric,
        label=m.label,
        unit=m.unit,
        better=m.better,
        base=1.0,
        head=1.0,
        n_base=8,
        n_head=8,
        delta_pct=delta,
        ci_low_pct=delta - 1,
        ci_high_pct=delta + 1,
        verdict=verdict,
        primary=True,
        **more,
    )


def _control_row(metric: str, delta: float) -> ControlRow:
    m = BY_NAME[metric]
    return ControlRow(
        gpu="H200",
        mode="streaming",
        concurrency=16,
        metric=metric,
        label=m.label,
        better=m.better,
        delta_pct=delta,
        ci_low_pct=delta - 1,
        ci_high_pct=delta + 1,
        method="paired",
        pairs=8,
        verdict="inconclusive",
    )


@pytest.mark.parametrize(
    ("metric", "verdict", "row", "control", "demoted"),
    [
        ("throughput_qps", "improved", 5.0, 5.0, True),  # as much: demoted
        ("throughput_qps", "improved", 5.0, 4.9, False),
        ("throughput_qps", "improved", 5.0, -6.0, False),  # the other way: no excuse
        ("throughput_qps", "regressed", -5.0, -7.0, True),
        ("throughput_qps", "regressed", -5.0, -4.0, False),
        ("latency_p95_s", "improved", -8.0, -9.0, True),  # lower is better, mirrored
        ("latency_p95_s", "improved", -8.0, -2.0, False),
        ("latency_p95_s", "regressed", 8.0, 8.5, True),
    ],
)
def test_the_demotion_rule(
    metric: str, verdict: str, row: float, control: float, demoted: bool
) -> None:
    r = _study_row(metric, verdict, row)
    demote([r], [_control_row(metric, control)])
    assert (r.verdict, r.demoted_from) == (
        ("inconclusive", verdict) if demoted else (verdict, None)
    )


def test_only_primary_rows_of_the_same_configuration_are_demoted() -> None:
    other = _study_row("throughput_qps", "improved", 5.0)
    other.concurrency = 8
    guard = _study_row("throughput_qps", "improved", 5.0)
    guard.primary = False
    demote([other, guard], [_control_row("throughput_qps", 9.0)])
    assert other.verdict == guard.verdict == "improved"


def test_the_reproduce_command_asks_for_the_control_too(tmp_path: Path) -> None:
    ev, _ = build(Inputs(bundles=[control_bundle(tmp_path / "b")]))
    assert ev.reproduce is not None
    assert "--design alternate --control aa --out bundle-h200" in ev.reproduce.command
