"""The measurement design and the host's own noise, where a maintainer reads them.

The manifest's `design` says how base and head were measured (docs/bundle.md); the
evidence, the PR comment, the check summary and the report say per GPU which design ran
and what it assumes, in the engine's own words. Each run's `host_cpu_ms` says how much
the machine itself moved; the comment and the report say so when it moved past the
audit's threshold, with what would fix it.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from evidence.build import Inputs, build, write
from evidence.errors import InputError
from evidence.model import Evidence
from evidence.render import render_check, render_comment, render_report
from tests.bundles import edit_manifest, manifest, run_ids

REFERENCE = Path(__file__).parent / "fixtures" / "h200-reference"
AA_EAGER = REFERENCE / "rsi-bundle-v-autoaa-h200.zip"  # host_cpu_ms recorded, 23.8% CV
AA_GRAPH = REFERENCE / "rsi-bundle-v-autoaag-h200.zip"  # predates host_cpu_ms

ALTERNATE: dict[str, Any] = {
    "name": "alternate",
    "paired": True,
    "unit": "burst",
    "summary": "both servers started once and kept resident on one GPU; the idle one frozen",
    "assumes": ["the host's drift is slower than a pair of bursts (seconds)"],
    "burst_requests": 64,
    "servers": {
        "base": [
            {
                "rows": ["streaming c16"],
                "startup_s": 8.1,
                "vram_mib": 6100,
                "memory_fraction": 0.45,
                "gpu_memory_total_mib": 143771,
                "warmup": {"passes": 2},
            }
        ],
        "head": [
            {
                "rows": ["streaming c16"],
                "startup_s": 8.4,
                "vram_mib": 6150,
                "memory_fraction": 0.45,
                "gpu_memory_total_mib": 143771,
            }
        ],
    },
}


def with_design(src: Path, dest: Path, design: Any) -> Path:
    """A copy of a real bundle whose manifest carries `design` (the digests cover every
    file but the manifest, so the copy is as whole as the original)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename.endswith("manifest.json"):
                doc = json.loads(data)
                doc["design"] = design
                data = json.dumps(doc).encode()
            zout.writestr(item, data)
    return dest


def texts(ev: Evidence, tmp: Path) -> dict[str, str]:
    return {
        "comment": render_comment(ev, None),
        "check": render_check(ev, None),
        "report": render_report(ev, tmp),
    }


def test_alternate_design_is_in_the_evidence_and_every_text(tmp_path: Path) -> None:
    path = with_design(AA_EAGER, tmp_path / "alt.zip", ALTERNATE)
    ev, _ = build(Inputs(bundles=[path]))
    assert not [f for f in ev.audit if f.code == "digest-mismatch"]
    d = ev.gpus["H200"].design
    assert d is not None
    assert (d.name, d.recorded, d.known, d.paired, d.unit) == (
        "alternate",
        True,
        True,
        True,
        "burst",
    )
    assert d.burst_requests == 64
    assert "a burst of 64 requests" in d.summary
    assert [(s.side, s.memory_fraction, s.vram_mib) for s in d.servers] == [
        ("base", 0.45, 6100),
        ("head", 0.45, 6150),
    ]
    # The runner's own words are kept apart, the displayed ones are the engine's.
    assert d.runner_summary == ALTERNATE["summary"]
    assert d.runner_assumes == ALTERNATE["assumes"]
    t = texts(ev, tmp_path)
    for kind in ("comment", "check"):
        assert "- **H200**: alternating bursts: both servers started once" in t[kind]
        assert "analysed as pairs (each base burst against the head burst beside it)" in t[kind]
        assert "Assumes the host's speed drifts more slowly than a pair of bursts" in t[kind]
        assert ALTERNATE["summary"] not in t[kind]
    # Runs are counted as what they are: bursts.
    assert "8 base / 8 head bursts, compared as 8 pairs)" in t["comment"]
    assert "in a configuration compared as pairs, the paired test" in t["report"]
    assert "bursts until decided (at most 12 a side" in t["comment"]
    assert "head rounds)" not in t["comment"]
    assert (
        "--rounds auto --max-rounds 12 --threshold-pct 3 --modes streaming --concurrencies 16 "
        "--requests 128 --warmup-requests 16 --design alternate --out bundle-h200"
    ) in t["comment"]
    assert "45% of 143,771 MiB given, 6,100 MiB used" in t["report"]
    assert "8.10 s" in t["report"]
    assert (
        "“both servers started once and kept resident on one GPU; the idle one frozen”"
        in (t["report"])
    )
    # Paired: more pairs, not more rounds, narrow the interval.
    assert "a dedicated machine, or more pairs, would narrow" in t["comment"]
    (host,) = [f for f in ev.audit if f.code == "host-cpu-unsteady"]
    assert "only more pairs (or a dedicated machine)" in host.message


def test_evidence_json_carries_design_and_host_cpu(tmp_path: Path) -> None:
    path = with_design(AA_EAGER, tmp_path / "alt.zip", ALTERNATE)
    ev, sources = build(Inputs(bundles=[path]))
    write(ev, sources, tmp_path / "out", None)
    doc = orjson.loads((tmp_path / "out" / "evidence.json").read_bytes())
    g = doc["gpus"]["H200"]
    assert g["design"]["name"] == "alternate"
    assert g["design"]["paired"] is True
    assert g["design"]["servers"][0]["gpu_memory_total_mib"] == 143771
    assert g["host_cpu"]["runs"] == 17
    assert g["host_cpu"]["cv_pct"] == 23.83
    assert g["host_cpu"]["steady"] is False
    assert Evidence.model_validate(doc).gpus["H200"].design == ev.gpus["H200"].design


def test_no_design_reads_as_sequential_unpaired() -> None:
    ev, sources = build(Inputs(bundles=[AA_EAGER]))
    assert sources[0].manifest.design is None
    assert not sources[0].manifest.measured_by.analysed_paired
    d = ev.gpus["H200"].design
    assert d is not None
    assert (d.name, d.recorded, d.known, d.paired, d.unit) == (
        "sequential",
        False,
        True,
        False,
        "round",
    )
    assert d.summary.startswith("servers started anew every round")
    assert "base, head, head, base" in d.summary
    comment = render_comment(ev, None)
    assert "- **H200**: sequential rounds: servers started anew every round" in comment
    assert "analysed unpaired (Welch's test on the rounds)" in comment
    assert "compared as" not in comment
    # named: the runner's default is the task's own design, which may be another
    assert "--design sequential --out bundle-h200" in comment


def test_evidence_from_before_designs_still_reads_and_renders(tmp_path: Path) -> None:
    ev, _ = build(Inputs(bundles=[AA_EAGER]))
    doc = ev.model_dump(mode="json", by_alias=True)
    for g in doc["gpus"].values():
        del g["design"], g["host_cpu"]
    old = Evidence.model_validate(doc)
    comment = render_comment(old, None)
    assert "How it was measured" not in comment
    assert "How it was measured" not in render_report(old, tmp_path)


HOSTILE = "<img src=x onerror=alert(1)> @team [x](https://evil.example) </details> `|` #1"


def test_a_hostile_design_is_inert_bounded_and_unpaired(tmp_path: Path) -> None:
    design = {
        "name": HOSTILE,
        "paired": True,
        "unit": "<b>burst</b>",
        "summary": "# heading\n- item " + HOSTILE + "x" * 5000,
        "assumes": [HOSTILE] * 40,
        "servers": {"base": [{"rows": [HOSTILE], "memory_fraction": 0.5}]},
    }
    path = with_design(AA_EAGER, tmp_path / "bad.zip", design)
    ev, _ = build(Inputs(bundles=[path]))
    d = ev.gpus["H200"].design
    assert d is not None
    assert not d.known
    assert not d.paired  # a name the engine does not know is analysed unpaired
    assert d.runner_summary is not None
    assert len(d.runner_summary) <= 1000
    assert "\n" not in d.runner_summary
    assert len(d.runner_assumes) == 16
    t = texts(ev, tmp_path)
    for kind in ("comment", "check"):
        md = t[kind]
        assert "not a design this engine knows; its runs are analysed unpaired" in md
        assert "<img" not in md
        assert "@team" not in md
        assert "@\u200bteam" in md  # still there to read, notifying nobody
        assert "](https://evil" not in md
        assert "</details>" not in md.split("How it was measured")[1].split("###")[0]
        assert "xxxxx" not in md  # the runner's free text stays out of the Markdown
        assert "--design" not in md  # an unknown name is never put in a command
    report = t["report"]
    assert "<img src=x" not in report
    assert "&lt;img src=x onerror=alert(1)&gt;" in report
    assert "<b>burst" not in report


@pytest.mark.parametrize(
    ("design", "field"),
    [
        ({"name": "alternate", "paired": []}, r"design\.paired"),
        ({"name": "alternate", "paired": "true"}, r"design\.paired"),
        ({"name": 5}, r"design\.name"),
        ({"servers": {"base": [{"memory_fraction": 1.5}]}}, r"memory_fraction"),
        ({"burst_requests": -1}, r"design\.burst_requests"),
    ],
)
def test_a_design_of_the_wrong_shape_refuses_the_bundle_naming_the_field(
    tmp_path: Path, design: dict[str, Any], field: str
) -> None:
    path = with_design(AA_EAGER, tmp_path / "bad.zip", design)
    with pytest.raises(InputError, match=field):
        build(Inputs(bundles=[path]))


# --------------------------------------------------------------------- host noise


def test_unsteady_host_is_said_in_the_comment_and_report(tmp_path: Path) -> None:
    ev, _ = build(Inputs(bundles=[AA_EAGER]))
    h = ev.gpus["H200"].host_cpu
    assert h is not None
    assert not h.steady
    line = (
        "This runner's CPU speed varied 24% (CV: a fixed Python loop took 7.05–13.7 ms "
        "over 17 runs). A server bound by its CPU moves with the machine; a dedicated "
        "machine, or more rounds, would narrow its interval."
    )
    comment = render_comment(ev, None)
    assert f"  - {line}" in comment
    assert line.replace("'", "&#39;") in render_report(ev, tmp_path)
    assert "CPU speed" not in render_check(ev, None)


def test_steady_host_is_a_short_note_in_the_report_only(bundle: Path, tmp_path: Path) -> None:
    ev, _ = build(Inputs(bundles=[bundle]))  # the synthetic runs all took 8.0 ms
    h = ev.gpus["H200"].host_cpu
    assert h is not None
    assert h.steady
    assert "CPU speed" not in render_comment(ev, None)
    assert "CPU speed held steady (0.0% CV: a fixed Python loop took 8 ms over 16 runs)" in (
        render_report(ev, tmp_path).replace("&#39;", "'")
    )


def test_no_host_record_no_host_line(tmp_path: Path) -> None:
    ev, _ = build(Inputs(bundles=[AA_GRAPH]))
    assert ev.gpus["H200"].host_cpu is None
    assert "CPU speed" not in render_comment(ev, None)
    assert "CPU speed" not in render_report(ev, tmp_path)


def test_a_host_slower_for_one_side_says_which(bundle: Path) -> None:
    """4% CV overall, but the loop took 8.6% longer before every head run."""
    for side, ms in (("base", 7.0), ("head", 7.6)):
        for rid in run_ids(bundle, side):
            run = next(r for r in manifest(bundle)["runs"] if r["id"] == rid)
            p = bundle / run["files"]["server"]
            doc = orjson.loads(p.read_bytes())
            doc["host_cpu_ms"] = ms
            p.write_bytes(orjson.dumps(doc))
    ev, _ = build(Inputs(bundles=[bundle]))
    comment = render_comment(ev, None)
    assert "varied" not in comment
    assert (
        "This runner's CPU was slower for the head runs: a fixed Python loop took 8.6% "
        "longer before head runs than before base runs (median 7.6 against 7 ms, over 16 "
        "runs)."
    ) in comment


def test_a_sequential_design_written_by_a_new_runner_is_recorded(bundle: Path) -> None:
    def add(doc: dict[str, Any]) -> None:
        doc["design"] = {"name": "sequential", "paired": False, "unit": "round"}

    edit_manifest(bundle, add)
    ev, _ = build(Inputs(bundles=[bundle]))
    d = ev.gpus["H200"].design
    assert d is not None
    assert d.recorded
    assert not d.paired
