"""Reading bundles in every packaging, and refusing unreadable ones with a clear error."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from evidence.build import Inputs, build
from evidence.bundle import Bundle
from evidence.errors import InputError
from evidence.load import gpu_label, load
from tests.bundles import edit_manifest, manifest
from tests.conftest import REAL


def _figures(path: Path) -> list[tuple[str, float | None]]:
    src = load(path)
    return [(lr.run.id, lr.metrics["throughput_qps"]) for lr in src.runs]


def test_folder_zip_and_tarball_read_the_same(bundle: Path, tmp_path: Path) -> None:
    zipped = Path(shutil.make_archive(str(tmp_path / "b"), "zip", bundle))
    tarred = Path(shutil.make_archive(str(tmp_path / "b"), "gztar", bundle))
    want = _figures(bundle)
    assert len(want) == 16
    assert _figures(zipped) == want
    assert _figures(tarred) == want


def test_zip_with_one_wrapping_folder(bundle: Path, tmp_path: Path) -> None:
    zipped = Path(shutil.make_archive(str(tmp_path / "w"), "zip", bundle.parent, bundle.name))
    assert _figures(zipped) == _figures(bundle)


def test_a_sparse_tar_member_is_refused_before_its_holes_are_written(
    bundle: Path, tmp_path: Path
) -> None:
    """A few KiB of .tar.gz whose sparse members unpacked to gigabytes of zeros: the
    ratio bound counts what gzip inflates, and tar fills the holes itself."""
    holes = tmp_path / "holes.bin"
    with holes.open("wb") as f:
        f.seek(64 * 1024 * 1024 - 1)
        f.write(b"\0")
    out = tmp_path / "sparse.tar.gz"
    cmd = ["tar", "--sparse", "-czf", str(out), "-C", str(bundle), ".", "-C", str(tmp_path)]
    subprocess.run([*cmd, "holes.bin"], check=True)
    with tarfile.open(out) as t:
        assert t.getmember("holes.bin").issparse()  # else this proves nothing
    with pytest.raises(InputError, match=r"member 'holes\.bin' is a sparse file"):
        load(out)


def test_a_fifo_in_a_folder_bundle_is_named_not_waited_on(bundle: Path) -> None:
    """Before: open() on the FIFO blocked forever."""
    rid = manifest(bundle)["runs"][0]["id"]
    speed = bundle / "runs" / rid / "speed_results.json"
    speed.unlink()
    os.mkfifo(speed)
    with Bundle(bundle) as b, pytest.raises(ValueError, match="is not a regular file"):
        b.read(f"runs/{rid}/speed_results.json")
    src = load(bundle)
    (bad,) = [f for f in src.findings if f.code == "bundle-invalid"]
    assert "speed_results.json is not a regular file" in bad.message


def test_a_hard_link_in_a_folder_bundle_is_refused_not_read(bundle: Path, tmp_path: Path) -> None:
    """Before: a hard link to a file outside the bundle passed the path check, and a row id
    of the outside file appeared in evidence.md."""
    rid = manifest(bundle)["runs"][0]["id"]
    speed = bundle / "runs" / rid / "speed_results.json"
    outside = tmp_path / "outside.json"
    shutil.copyfile(speed, outside)
    speed.unlink()
    os.link(outside, speed)
    with Bundle(bundle) as b, pytest.raises(ValueError, match="is a hard link"):
        b.read(f"runs/{rid}/speed_results.json")
    (bad,) = [f for f in load(bundle).findings if f.code == "bundle-invalid"]
    assert "speed_results.json is a hard link (2 names for one file)" in bad.message


def test_corrupt_zip_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "rsi-bundle-v1-h200.zip"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(InputError, match=r"rsi-bundle-v1-h200\.zip: corrupt zip"):
        load(bad)


def test_corrupt_tarball_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "b.tar.gz"
    bad.write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(InputError, match=r"b\.tar\.gz: corrupt tar"):
        load(bad)


def test_tarball_cannot_write_outside_its_folder(tmp_path: Path) -> None:
    evil = tmp_path / "evil.tar.gz"
    payload = tmp_path / "payload"
    payload.write_text("x")
    with tarfile.open(evil, "w:gz") as tar:
        tar.add(payload, arcname="../../escaped.txt")
    with pytest.raises(InputError):
        load(evil)
    assert not (tmp_path.parent / "escaped.txt").exists()


def test_zip_member_paths_cannot_escape(bundle: Path, tmp_path: Path) -> None:
    def point_outside(doc: dict[str, object]) -> None:
        runs = doc["runs"]
        assert isinstance(runs, list)
        runs[0]["files"]["speed"] = "../../etc/passwd"

    edit_manifest(bundle, point_outside)
    zipped = Path(shutil.make_archive(str(tmp_path / "b"), "zip", bundle))
    src = load(zipped)
    assert src.findings[0].code == "bundle-invalid"
    assert "unsafe path" in src.findings[0].message


def test_missing_manifest(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"empty: no manifest\.json"):
        load(tmp_path / "empty")


def test_manifest_that_is_not_json(bundle: Path) -> None:
    (bundle / "manifest.json").write_text("{ nope")
    with pytest.raises(InputError, match=r"manifest\.json: not valid JSON"):
        load(bundle)


def test_manifest_with_wrong_schema_names_the_field(bundle: Path) -> None:
    edit_manifest(bundle, lambda d: d.update(schema="rsi-bundle/9"))
    with pytest.raises(InputError, match=r"manifest\.json: schema"):
        load(bundle)


def test_manifest_with_a_bad_run_names_it(bundle: Path) -> None:
    edit_manifest(bundle, lambda d: d["runs"][3].update(side="candidate"))
    with pytest.raises(InputError, match=r"runs\.3\.side"):
        load(bundle)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("packages", ["torch==2.11.0"], r"environment: .*head\.packages must map"),
        ("changed_by_head", 3, r"benchmark_tree: .*changed_by_head must be a list"),
        ("runner", {"name": {"x": 1}}, r"runner: .*runner\.name must be a string"),
    ],
)
def test_fields_the_engine_reads_in_another_shape_are_refused(
    bundle: Path, field: str, value: object, says: str
) -> None:
    """The head's own interpreter reports the packages; a list there crashed the audit."""

    def plant(d: dict[str, Any]) -> None:
        if field == "packages":
            d["environment"]["head"]["packages"] = value
        elif field == "changed_by_head":
            d["benchmark_tree"] = {"changed_by_head": value}
        else:
            d["runner"] = value

    edit_manifest(bundle, plant)
    with pytest.raises(InputError, match=says):
        load(bundle)


def test_runs_that_share_a_file_are_refused(bundle: Path) -> None:
    """One file named by many runs multiplied the work by the runs (600 runs of one
    20,000-row file: minutes, gigabytes) and measured nothing new."""

    def share(d: dict[str, Any]) -> None:  # spelt another way: the same file
        d["runs"][5]["files"]["speed"] = "./" + d["runs"][1]["files"]["speed"]

    edit_manifest(bundle, share)
    doc = manifest(bundle)
    a, b = doc["runs"][1]["id"], doc["runs"][5]["id"]
    with pytest.raises(InputError, match=f"runs '{a}' and '{b}' both name runs/{a}/"):
        load(bundle)


def test_unknown_fields_are_kept(bundle: Path) -> None:
    edit_manifest(bundle, lambda d: d.update(scheduler={"kind": "abba"}))
    assert load(bundle).manifest.model_extra == {"scheduler": {"kind": "abba"}}


def test_nothing_there(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load(tmp_path / "nope.zip")


def test_gpu_labels() -> None:
    assert gpu_label("NVIDIA H200") == "H200"
    assert gpu_label("H100") == "H100"
    assert gpu_label("NVIDIA H100 80GB HBM3") == "H100"


def test_per_run_only_study_is_reported_without_audit() -> None:
    """SGLang-Omni PR 1445's H100 A/B: per-run aggregates only, and a 'no gain' decision."""
    path = REAL / "pr1445-h100-ab.results-summary.json"
    ev, sources = build(Inputs(bundles=[path]))
    src = sources[0]
    assert src.kind == "per-run"
    assert src.manifest.repo == "sgl-project/sglang-omni"
    assert src.runs[0].run.mode == "non-streaming"  # read from the contract beside it
    assert ev.per_request_audit is False
    assert "no-per-request-records" in {f.code for f in ev.audit}
    assert any("no per-request audit was possible" in c for c in ev.caveats)
    # c=16 had 2 rounds a side: too few for a narrow interval.
    assert any(f.code == "too-few-samples" for f in ev.audit)
    # The maintainers decided not to claim a gain; the engine agrees that none is shown,
    # and says that two rounds a side cannot tell +0.5% from a few percent either way.
    assert ev.verdict == "inconclusive"
    c16 = next(r for r in ev.study if r.metric == "throughput_qps" and r.concurrency == 16)
    assert c16.base == pytest.approx((4.692 + 4.827) / 2)
    assert c16.head == pytest.approx((4.852 + 4.714) / 2)
    assert c16.delta_pct == pytest.approx(0.49, abs=0.02)  # their own 0.494% (mean ratio)
    assert c16.ci_low_pct is not None
    assert c16.ci_low_pct < 0 < (c16.ci_high_pct or 0)
    assert c16.mde_pct is not None
    assert "could have detected" in ev.reason


def test_per_run_study_that_is_not_one(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_bytes(orjson.dumps({"hello": 1}))
    with pytest.raises(InputError, match="no `runs` list"):
        load(p)


def test_zip_member_crc_error_is_reported(bundle: Path, tmp_path: Path) -> None:
    zipped = Path(shutil.make_archive(str(tmp_path / "b"), "zip", bundle))
    data = bytearray(zipped.read_bytes())
    with zipfile.ZipFile(zipped) as z:
        info = z.getinfo("runs/r1-base-nonstream-c8/speed_results.json")
    start = info.header_offset + 30 + len(info.filename) + 40
    data[start : start + 8] = b"\x00" * 8
    zipped.write_bytes(bytes(data))
    src = load(zipped)
    assert [f.code for f in src.findings] == ["bundle-invalid"]
    assert src.findings[0].runs == ["r1-base-nonstream-c8"]
