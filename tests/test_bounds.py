"""Bounded input: every hostile bundle is refused by `rsi-bot evidence` with exit 2 and
the problem named, in seconds, in well under 1 GiB of memory, never with a traceback.

Each case runs the CLI in a process of its own and reads its peak RSS."""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from bot.cli import main
from evidence.errors import BoundError, InputError
from evidence.limits import Limits
from evidence.load import load
from tests.bundles import edit_manifest, edit_run, manifest, run_ids
from tests.hostile import (
    MiB,
    deflated,
    folder_members,
    folder_tar,
    padded,
    run_cli,
    tar_entry,
    tar_header,
    write_targz,
    write_zip,
)

PEAK_MIB = 1024
SERVING = Path(__file__).parent / "fixtures" / "serving"


def _speed_rel(bundle: Path) -> str:
    first = run_ids(bundle)[0]
    run = next(r for r in manifest(bundle)["runs"] if r["id"] == first)
    rel: str = run["files"]["speed"]
    return rel


def _refused(
    tmp: Path, bundle: Path, *needles: str, args: tuple[str, ...] = (), measure: bool = False
) -> None:
    """Exit 2 naming the problem. With `measure`, in a process of its own whose peak RSS
    and time are bounded (the big attacks); else in this one (a few kilobytes of input)."""
    argv = (str(bundle), "--out", str(tmp / "out"), *args)
    if measure:
        got = run_cli(*argv)
        code, stderr = got.code, got.stderr
        assert "Traceback" not in stderr, stderr[-3000:]
        assert 0 < got.peak_mib < PEAK_MIB, got.peak_mib
        assert got.seconds < 60, got.seconds
        print(f"{bundle.name}: refused in {got.seconds:.1f} s, peak {got.peak_mib:.0f} MiB")
    else:
        result = CliRunner().invoke(main, ["evidence", *argv])
        code, stderr = result.exit_code, result.stderr
        assert code == 2, (code, result.exception, stderr)
    assert code == 2, (code, stderr[-3000:])
    assert stderr.startswith("rsi-bot evidence: unreadable input: "), stderr
    for needle in needles:
        assert needle in stderr, stderr
    assert not (tmp / "out").exists()


# ------------------------------------------------------------------------ archives


def test_a_zip_with_a_member_of_one_and_a_half_gigabytes(bundle: Path, tmp_path: Path) -> None:
    """1.6 MB on disk; the speed file is valid JSON followed by 1.5 GB of spaces."""
    speed = _speed_rel(bundle)
    members = [m for m in folder_members(bundle) if m.name != speed]
    members.append(padded(speed, (bundle / speed).read_bytes(), b" " * MiB, 1430))
    bomb = write_zip(tmp_path / "rsi-bundle-bomb-h200.zip", members)
    assert bomb.stat().st_size < 2 * MiB
    _refused(
        tmp_path, bomb, f"member '{speed}' unpacks to 1499", "more than 536870912", measure=True
    )


def test_a_zip_whose_members_each_stay_below_the_member_bound(bundle: Path, tmp_path: Path) -> None:
    """Each kept log is 400 MB of zeros: below 512 MiB each, but 1000:1."""
    members = folder_members(bundle)
    members += [padded(f"logs/l{i}.log", b"", b"\0" * MiB, 400) for i in range(6)]
    bomb = write_zip(tmp_path / "rsi-bundle-logs-h200.zip", members)
    _refused(tmp_path, bomb, "member 'logs/l0.log' is compressed", "more than 200:1", measure=True)


def test_a_tarball_that_unpacks_to_three_gigabytes(bundle: Path, tmp_path: Path) -> None:
    """3 MB on disk, one 3 GB member of zeros after the real files."""
    head = folder_tar(bundle) + tar_header("logs/big.log", 3000 * MiB)
    bomb = write_targz(tmp_path / "rsi-bundle-bomb-h200.tar.gz", head, zeros=3000)
    assert bomb.stat().st_size < 4 * MiB
    _refused(tmp_path, bomb, "'logs/big.log' unpacks to", "more than 536870912", measure=True)


def test_a_tarball_of_many_members_below_the_member_bound(bundle: Path, tmp_path: Path) -> None:
    """Six members of 500 MB: each allowed, together 3 GB at 1000:1."""
    head = folder_tar(bundle) + tar_header("logs/l0.log", 500 * MiB)
    bomb = write_targz(tmp_path / "rsi-bundle-many-h200.tar.gz", head, zeros=500, more=5)
    assert bomb.stat().st_size < 4 * MiB
    _refused(tmp_path, bomb, "is compressed more than 200:1", measure=True)


def test_the_bounds_are_settable(bundle: Path, tmp_path: Path) -> None:
    zipped = Path(shutil.make_archive(str(tmp_path / "b"), "zip", bundle))
    _refused(tmp_path, zipped, "more than 10000 bytes", args=("--max-bundle-bytes", "10000"))
    _refused(tmp_path, zipped, "members, more than 5", args=("--max-members", "5"))
    _refused(tmp_path, zipped, "more than 1000", args=("--max-member-bytes", "1000"))
    _refused(tmp_path, zipped, "16 runs, more than 3", args=("--max-runs", "3"))
    _refused(
        tmp_path,
        zipped,
        "speed_results.json: field 'inter_chunk_s' of request",
        "values, more than 2",
        args=("--max-list-values", "2"),
    )
    _refused(
        tmp_path, zipped, "per-request values to", "more than 1000", args=("--max-values", "1000")
    )
    _refused(
        tmp_path,
        zipped,
        "manifest.json: ",
        "more than 100 to read",
        args=("--max-json-bytes", "100"),
    )
    tarred = Path(shutil.make_archive(str(tmp_path / "b"), "gztar", bundle))
    _refused(tmp_path, tarred, "compressed more than 1.5:1", args=("--max-ratio", "1.5"))
    # And the defaults read it.
    got = run_cli(str(zipped), "--out", str(tmp_path / "ok"))
    assert got.code == 0, got.stderr


def _zip_with(bundle: Path, tmp: Path, extra: list[object], drop: str = "") -> Path:
    members = [m for m in folder_members(bundle) if m.name != drop]
    members += extra  # type: ignore[arg-type]
    return write_zip(tmp / "rsi-bundle-x-h200.zip", members)


def test_an_encrypted_member(bundle: Path, tmp_path: Path) -> None:
    speed = _speed_rel(bundle)
    m = deflated((bundle / speed).read_bytes(), speed)
    m.flags = 0x1
    _refused(tmp_path, _zip_with(bundle, tmp_path, [m], speed), f"'{speed}' is encrypted")


def test_a_member_of_an_unknown_compression_method(bundle: Path, tmp_path: Path) -> None:
    m = deflated((bundle / "manifest.json").read_bytes(), "manifest.json")
    m.method = 99  # AES, as WinZip writes it
    zipped = _zip_with(bundle, tmp_path, [m], "manifest.json")
    _refused(tmp_path, zipped, "'manifest.json' is compressed with method 99")


def test_a_corrupt_manifest(bundle: Path, tmp_path: Path) -> None:
    m = deflated((bundle / "manifest.json").read_bytes(), "manifest.json")
    m.crc ^= 0xFFFF
    zipped = _zip_with(bundle, tmp_path, [m], "manifest.json")
    _refused(tmp_path, zipped, "manifest.json: unreadable (corrupt member manifest.json")


def test_a_symbolic_link_in_a_zip(bundle: Path, tmp_path: Path) -> None:
    link = deflated(b"/etc/passwd", "runs/passwd")
    link.mode = 0o120777
    zipped = _zip_with(bundle, tmp_path, [link])
    _refused(tmp_path, zipped, "member 'runs/passwd' is not a regular file")


@pytest.mark.parametrize("name", ["../../escaped.txt", "/etc/cron.d/x", "runs\\..\\..\\x"])
def test_a_zip_member_whose_path_escapes(bundle: Path, tmp_path: Path, name: str) -> None:
    zipped = _zip_with(bundle, tmp_path, [deflated(b"x", name)])
    _refused(tmp_path, zipped, "escapes the bundle")


@pytest.mark.parametrize(
    ("kind", "target"),
    [
        (tarfile.SYMTYPE, "../manifest.json"),
        (tarfile.SYMTYPE, "/etc/passwd"),
        (tarfile.LNKTYPE, "manifest.json"),
    ],
)
def test_a_link_in_a_tarball(bundle: Path, tmp_path: Path, kind: bytes, target: str) -> None:
    head = folder_tar(bundle) + tar_header("runs/link.json", 0, kind, target)
    tarred = write_targz(tmp_path / "rsi-bundle-x-h200.tar.gz", head)
    _refused(tmp_path, tarred, "member 'runs/link.json' is not a regular file")


@pytest.mark.parametrize("packing", ["zip", "gztar", "folder"])
def test_a_second_manifest_is_refused(bundle: Path, tmp_path: Path, packing: str) -> None:
    """A nested `x/manifest.json` could be what another reader takes for the manifest."""
    other = manifest(bundle)
    other["verification_id"] = "v-someone-else"
    (bundle / "x").mkdir()
    (bundle / "x" / "manifest.json").write_bytes(orjson.dumps(other))
    target = bundle
    if packing != "folder":
        target = Path(shutil.make_archive(str(tmp_path / "b"), packing, bundle))
    _refused(tmp_path, target, "more than one manifest.json (also 'x/manifest.json')")


# ---------------------------------------------------------------------- JSON and runs


def test_a_manifest_of_two_hundred_thousand_runs(bundle: Path, tmp_path: Path) -> None:
    def many(doc: dict[str, object]) -> None:
        runs = doc["runs"]
        assert isinstance(runs, list)
        doc["runs"] = [
            {"id": f"r{i}", "side": "base", "round": 1, "mode": "streaming", "concurrency": 8}
            for i in range(200_000)
        ]

    edit_manifest(bundle, many)
    assert (bundle / "manifest.json").stat().st_size < 64 * MiB
    _refused(tmp_path, bundle, "manifest.json: 200000 runs, more than 10000", measure=True)


def test_json_nested_a_hundred_thousand_deep(bundle: Path, tmp_path: Path) -> None:
    speed = _speed_rel(bundle)
    (bundle / speed).write_bytes(b"[" * 100_000 + b"]" * 100_000)
    _refused(tmp_path, bundle, f"{speed}: JSON nested deeper than 1024 levels", measure=True)


def test_a_manifest_nested_a_hundred_thousand_deep(bundle: Path, tmp_path: Path) -> None:
    (bundle / "manifest.json").write_bytes(b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    _refused(tmp_path, bundle, "manifest.json: JSON nested deeper", measure=True)


# ------------------------------------------------------------- values, not only bytes


def _gaps_everywhere(bundle: Path, rows: int, gaps: int) -> bytes:
    """One streaming run's speed file, its first `rows` rows each with `gaps` zeros."""
    rid = run_ids(bundle, mode="streaming")[0]
    doc = orjson.loads((bundle / f"runs/{rid}/speed_results.json").read_bytes())
    given = doc["per_request"]
    doc["per_request"] = [
        {**given[i % len(given)], "id": f"s{i}", "inter_chunk_s": [0] * gaps} for i in range(rows)
    ]
    return orjson.dumps(doc)


def test_a_bundle_of_800_runs_of_long_lists_is_refused(bundle: Path, tmp_path: Path) -> None:
    """5 MB of zip, 754 MiB unpacked: each run's speed file has 128 rows of 3,627
    `inter_chunk_s` zeros, just under 1 MiB, so below where the ratio is judged. It was
    read whole, every run's gaps held (3.1 GB, 35 s); the values budget refuses it."""
    speed = deflated(_gaps_everywhere(bundle, 128, 3627), "")
    assert speed.size < MiB  # the ratio is not judged
    doc = manifest(bundle)
    run = next(r for r in doc["runs"] if r["mode"] == "streaming")
    runs, members = [], []
    for i in range(800):
        rel = f"runs/r{i}/speed_results.json"
        side = ("base", "head")[i % 2]
        files = {"speed": rel}
        runs.append({**run, "id": f"r{i}", "side": side, "round": i // 2 + 1, "files": files})
        members.append(replace(speed, name=rel))
    doc["runs"] = runs
    members.append(deflated(orjson.dumps(doc), "manifest.json"))
    crafted = write_zip(tmp_path / "rsi-bundle-v-crafted-h200.zip", members)
    assert crafted.stat().st_size < 6 * MiB
    got = run_cli(str(crafted), "--out", str(tmp_path / "out"))
    assert got.code == 2, got.stderr[-3000:]
    assert "/speed_results.json: field 'inter_chunk_s': 128 requests and" in got.stderr
    assert "per-request values to 5" in got.stderr
    assert "more than 50000000" in got.stderr


def test_a_request_list_longer_than_its_bound(bundle: Path, tmp_path: Path) -> None:
    """A head streaming 100,001 chunks for one request: no real request has so many."""
    rid = run_ids(bundle, mode="streaming")[0]
    req = ""

    def long(rows: list[dict[str, object]], _run: dict[str, object]) -> None:
        nonlocal req
        rows[5]["inter_chunk_s"] = [0.001] * 100_001
        req = str(rows[5]["id"])

    edit_run(bundle, rid, long, resummarize=False)
    _refused(
        tmp_path,
        bundle,
        f"runs/{rid}/speed_results.json: field 'inter_chunk_s' of request {req!r} holds "
        "100001 values, more than 100000",
    )


def test_the_list_of_the_parallel_array_formats_is_named(bundle: Path) -> None:
    """vLLM's `itls`: the bound is the same, the field is named as the file names it."""
    shutil.copy(SERVING / "vllm_bench_serve.json", bundle / _speed_rel(bundle))
    with pytest.raises(BoundError, match=r"field 'itls' of request '\d+' holds \d+ values, more"):
        load(bundle, Limits(max_list_values=3))


def test_a_bundle_holds_no_gaps_once_its_runs_are_measured(bundle: Path) -> None:
    """The pooled gaps serve only each run's inter-chunk p95: taken, then dropped, so
    memory grows with requests, not with the chunks a head streams."""
    src = load(bundle)
    streaming = [lr for lr in src.runs if lr.run.mode == "streaming"]
    assert streaming
    for lr in streaming:
        doc = orjson.loads((bundle / str(lr.run.files.speed)).read_bytes())
        pooled = [g for r in doc["per_request"] if r["is_success"] for g in r["inter_chunk_s"]]
        assert pooled
        assert lr.metrics["inter_chunk_p95_s"] == pytest.approx(np.percentile(pooled, 95))
        assert lr.records is not None
        assert lr.records.gaps.size == 0


# ------------------------------------------------------------------ physical ranges


def _row(field: str, value: object) -> Callable[[list[dict[str, object]], dict[str, object]], None]:
    def fn(rows: list[dict[str, object]], _run: dict[str, object]) -> None:
        rows[3][field] = value

    return fn


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("latency_s", 1e308, "field 'latency_s' holds 1e+308, outside the physical range"),
        ("latency_s", -2.5, "field 'latency_s' holds -2.5"),
        ("audio_ttfp_s", -0.1, "field 'audio_ttfp_s' holds -0.1"),
        ("completion_tokens", 1e300, "field 'completion_tokens' holds 1e+300"),
        ("latency_s", float("nan"), "field 'latency_s' holds nan, which no measurement is"),
        ("latency_s", float("inf"), "field 'latency_s' holds inf"),
    ],
)
def test_a_request_figure_outside_its_physical_range(
    bundle: Path, tmp_path: Path, field: str, value: float, needle: str
) -> None:
    rid = run_ids(bundle)[0]
    edit_run(bundle, rid, _row(field, value), resummarize=False)
    speed = _speed_rel(bundle)
    if value != value or value in (float("inf"), float("-inf")):
        # orjson cannot write them; the benchmarks' own json.dumps does.
        doc = orjson.loads((bundle / speed).read_bytes())
        doc["per_request"][3][field] = value
        (bundle / speed).write_text(json.dumps(doc))
    _refused(tmp_path, bundle, f"{speed}: {needle}", measure=value == 1e308)


@pytest.mark.parametrize(
    ("value", "needle"),
    [(1e-300, "holds 1e-300"), (-5.0, "holds -5.0"), (1e308, "holds 1e+308")],
)
def test_a_wall_clock_outside_its_physical_range(
    bundle: Path, tmp_path: Path, value: float, needle: str
) -> None:
    def fn(doc: dict[str, object]) -> None:
        runs = doc["runs"]
        assert isinstance(runs, list)
        runs[2]["wall_clock_s"] = value

    edit_manifest(bundle, fn)
    _refused(tmp_path, bundle, f"manifest.json: field 'runs[2].wall_clock_s' {needle}")


# ------------------------------------------------------------------ the library


def test_the_reader_refuses_in_the_library_too(bundle: Path, tmp_path: Path) -> None:
    """The same refusals reach a caller of `load` (the App) as BoundError/InputError."""
    from evidence.bundle import Bundle
    from evidence.errors import BoundError
    from evidence.limits import Limits

    zipped = Path(shutil.make_archive(str(tmp_path / "b"), "zip", bundle))
    with pytest.raises(BoundError, match="66 members, more than 3"):
        load(zipped, Limits(max_members=3))
    with pytest.raises(BoundError, match="more than 100 bytes"):
        Bundle(zipped, Limits(max_bytes=100))
    assert len(load(zipped).runs) == 16
    import hashlib

    with Bundle(zipped, Limits(max_json_bytes=10)) as b:  # hashing is not parsing
        want = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
        assert b.sha256("manifest.json") == want
    tar = tmp_path / "t.tar.gz"
    write_targz(tar, tar_entry("manifest.json", b"{}") + tar_entry("a/manifest.json", b"{}"))
    with pytest.raises(InputError, match=r"more than one manifest\.json"):
        Bundle(tar)
