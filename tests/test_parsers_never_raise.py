"""Every parser at the trust boundary gives a value or a clear refusal, never an exception.

Property-based (Hypothesis, derandomised so CI sees the same examples every run): the
`/rsi` command parser, `.github/rsi.yml`, and a bundle whose manifest is edited anywhere
with any JSON value. Before, `/rsi reverify rounds=²` raised in `int()` (`'²'.isdigit()` is
true) before any permission check, once per delivery attempt.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from copy import deepcopy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot import commands, repo_config
from evidence.errors import InputError
from evidence.load import load
from tests.asr_bundles import AsrSpec, write_asr_bundle
from tests.bundles import clean_bundle

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

ARGS = st.sampled_from(
    ["rounds=", "rounds=²", "rounds=٣", "rounds=auto", "all", "h100", "base=main", "0" * 40]
)
COMMENTS = st.one_of(
    st.text(max_size=300),
    st.builds(
        lambda name, args, tail: f"/rsi {name} {' '.join(args)}{tail}",
        st.sampled_from(["reverify", "verify", "status", "help", "REVERIFY", "ünknown"]),
        st.lists(st.one_of(ARGS, st.text(max_size=12)), max_size=4),
        st.text(max_size=20),
    ),
)


def test_rounds_in_any_digits_but_ascii_ones_are_refused_not_raised() -> None:
    for digits in ("²", "٣", "１２", "⑤"):
        cmd = commands.parse(f"/rsi reverify rounds={digits}")
        assert cmd is not None
        assert cmd.rounds is None
        assert cmd.errors == [commands.Mistake("bad-rounds", f"rounds={digits}")]
    cmd = commands.parse("/rsi reverify rounds=12")
    assert cmd is not None
    assert cmd.rounds == 12


@SETTINGS
@given(COMMENTS)
def test_the_command_parser_never_raises(text: str) -> None:
    cmd = commands.parse(text)
    assert cmd is None or isinstance(cmd, commands.Command)


YAML_WORDS = st.sampled_from(
    ["design: ", "control: ", "rounds: ", "gpus: [", "tasks:\n  - ", "watch: ", ": ", "- ", "&a ",
     "*a", "!!python/object ", "{", "}", "'", '"', "\t", "\n", "  ", "auto", "aa", "no", "1e400"]
)  # fmt: skip


@SETTINGS
@given(st.one_of(st.text(max_size=200), st.lists(YAML_WORDS, max_size=30).map("".join)))
def test_the_repository_config_parser_never_raises(text: str) -> None:
    result = repo_config.parse(text)
    assert isinstance(result, repo_config.ConfigResult)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
WHERE = st.sampled_from(
    [
        ("schema",), ("verification_id",), ("gpu",), ("runs",), ("runs", 0), ("runs", 0, "round"),
        ("runs", 0, "files"), ("runs", 0, "files", "speed"), ("runs", 0, "side"),
        ("runs", 0, "wall_clock_s"), ("environment",), ("environment", "base"), ("design",),
        ("design", "paired"), ("design", "servers"), ("control",), ("control", "runs"),
        ("adaptive",), ("adaptive", "decisions"), ("digests",), ("benchmark",), ("isolation",),
    ]
)  # fmt: skip


def _has(cur: Any, key: str | int) -> bool:
    if isinstance(cur, dict):
        return isinstance(key, str) and key in cur
    return isinstance(cur, list) and isinstance(key, int) and len(cur) > key


def _put(doc: Any, where: tuple[str | int, ...], value: Any) -> None:
    """Set `value` at `where` in `doc`, where that place exists (a new key of an object)."""
    cur: Any = doc
    for key in where[:-1]:
        if not _has(cur, key):
            return
        cur = cur[key]
    last = where[-1]
    if _has(cur, last) or (isinstance(cur, dict) and isinstance(last, str)):
        cur[last] = value


@SETTINGS
@given(edits=st.lists(st.tuples(WHERE, JSON), min_size=1, max_size=3))
def test_a_manifest_edited_anywhere_is_read_or_refused_by_name(
    bundle: Path, edits: list[tuple[tuple[str | int, ...], Any]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "b"
        shutil.copytree(bundle, copy)
        doc = json.loads((copy / "manifest.json").read_text())
        for where, value in edits:
            _put(doc, where, value)
        (copy / "manifest.json").write_text(json.dumps(doc))
        refusal: InputError | None = None
        try:
            load(copy)
        except InputError as exc:  # BoundError is one: a refusal that names the file
            refusal = exc
        assert refusal is None or str(copy) in str(refusal)


# ------------------------------------------------------------------ bundle members

SERVING = Path(__file__).parent / "fixtures" / "serving"
DELETE = object()  # an edit that removes the key (or list entry) instead of setting it
MEMBER_VALUES = st.one_of(
    JSON,
    st.sampled_from(
        [
            DELETE,
            10**400,  # Python's JSON reader takes it; no float holds it
            -(10**400),
            float("nan"),  # written as NaN, Infinity: the benchmarks' json.dumps does
            float("inf"),
            -1e308,
            "\ud800",
            [[0.1, 0.2]],
            [0] * 3000,
            {"per_request": []},
        ]
    ),
)


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small clean bundles of every format a run file can take: SGLang-Omni rows (speed,
    accuracy, server), the two parallel-array formats, and both ASR benchmarks."""
    root = tmp_path_factory.mktemp("members")
    out = {"omni": clean_bundle(root / "omni", rounds=1, requests=6)}
    serving = root / "serving"
    shutil.copytree(out["omni"], serving)
    doc = json.loads((serving / "manifest.json").read_text())
    fixtures = ("vllm_bench_serve.json", "sglang_bench_serving.jsonl")
    for run, name in zip(doc["runs"], fixtures, strict=False):
        shutil.copy(SERVING / name, serving / run["files"]["speed"])
    out["serving"] = serving
    for kind in ("seedtts", "td"):
        spec = AsrSpec(kind=kind, modes=("streaming",), rounds=1, requests=6)
        out[kind] = write_asr_bundle(root / kind, spec)
    return out


def _members(bundle: Path) -> list[str]:
    """Every file the manifest names for a run: the members the engine parses."""
    doc = json.loads((bundle / "manifest.json").read_text())
    kinds = ("speed", "records", "wer", "server")
    return sorted({run["files"][k] for run in doc["runs"] for k in kinds if run["files"].get(k)})


def _draw_place(data: st.DataObject, doc: Any) -> list[Any]:
    """A path into `doc` drawn from its own structure, going deeper three times in four."""
    path: list[Any] = []
    cur = doc
    while isinstance(cur, dict | list) and cur and data.draw(st.integers(0, 3)) > 0:
        key = data.draw(st.sampled_from(list(cur) if isinstance(cur, dict) else range(len(cur))))
        path.append(key)
        cur = cur[key]
    return path


def _set(doc: Any, path: list[Any], value: Any) -> Any:
    """`doc` with `value` at `path` (DELETE removes it); the whole document when empty."""
    if not path:
        return {} if value is DELETE else value
    cur = doc
    for key in path[:-1]:
        cur = cur[key]
    if value is DELETE:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return doc


def _read_or_refused(bundle: Path) -> None:
    """`load` gives a value or the engine's own refusal naming the bundle, nothing else."""
    refusal: InputError | None = None
    try:
        load(bundle)
    except InputError as exc:  # BoundError is one
        refusal = exc
    assert refusal is None or str(bundle) in str(refusal)


def _edited(data: st.DataObject, text: str) -> str:
    """A JSON (or JSON Lines) document with up to three values set or removed anywhere."""
    try:
        doc: Any = json.loads(text)
        lines = False
    except json.JSONDecodeError:
        doc, lines = [json.loads(ln) for ln in text.splitlines() if ln.strip()], True
    for _ in range(data.draw(st.integers(1, 3))):
        value = data.draw(MEMBER_VALUES)  # copied: edits must not change the strategy's own
        doc = _set(doc, _draw_place(data, doc), value if value is DELETE else deepcopy(value))
    if lines and isinstance(doc, list):
        return "\n".join(json.dumps(row) for row in doc)
    return json.dumps(doc)


def _mutated(data: st.DataObject, raw: bytes, hot: list[int]) -> bytes:
    """`raw` with a few bytes overwritten or inserted (near the offsets in `hot` half the
    time, where formats keep their headers), or cut short."""
    out = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        near = data.draw(st.sampled_from(hot)) if hot and data.draw(st.booleans()) else 0
        at = min(near + data.draw(st.integers(0, 64 if near else max(len(out) - 1, 0))), len(out))
        piece = data.draw(st.binary(min_size=1, max_size=4))
        if data.draw(st.booleans()):
            out[at : at + len(piece)] = piece
        else:
            out[at:at] = piece
    if data.draw(st.integers(0, 5)) == 0:
        del out[data.draw(st.integers(0, len(out))) :]
    return bytes(out)


@SETTINGS
@given(data=st.data())
def test_a_run_file_edited_anywhere_is_read_or_refused_by_name(
    templates: dict[str, Path], data: st.DataObject
) -> None:
    """Every run file the engine parses, in every format, with any value set or removed
    at any place of its own structure, or its bytes mutated."""
    name = data.draw(st.sampled_from(sorted(templates)))
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / name
        shutil.copytree(templates[name], bundle)
        member = bundle / data.draw(st.sampled_from(_members(bundle)))
        raw = member.read_bytes()
        if data.draw(st.booleans()):
            member.write_text(_edited(data, raw.decode()))
        else:
            member.write_bytes(_mutated(data, raw, []))
        _read_or_refused(bundle)


def _headers(raw: bytes) -> list[int]:
    """Where a zip's local, central and end records start, and a tarball's gzip header."""
    marks = (b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06", b"\x1f\x8b")
    return sorted(m.start() for mark in marks for m in re.finditer(re.escape(mark), raw))


@SETTINGS
@given(data=st.data(), packing=st.sampled_from(["zip", "gztar"]))
def test_an_archive_mutated_anywhere_is_read_or_refused_by_name(
    templates: dict[str, Path], data: st.DataObject, packing: str
) -> None:
    """A bundle's archive, zip or tarball, with bytes overwritten or inserted anywhere
    (its headers most often) or cut short."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(shutil.make_archive(str(Path(tmp) / "b"), packing, templates["omni"]))
        raw = archive.read_bytes()
        archive.write_bytes(_mutated(data, raw, _headers(raw)))
        _read_or_refused(archive)


# ------------------------------------------------------------------ intake candidates

CANDIDATE_WHERE = st.sampled_from(
    [
        ("candidate_id",), ("repo",), ("task",), ("base_sha",), ("head",), ("head", "repo"),
        ("head", "ref"), ("head", "sha"), ("title",), ("summary",), ("claim",),
        ("claim", "metric"), ("claim", "mode"), ("claim", "gpu"), ("claim", "delta_pct"),
        ("gpus",), ("gpus", 0), ("pull_request",), ("caveats",), ("caveats", 0),
        ("default_behavior_changes",), ("harness",), ("harness", "run_id"), ("unknown",),
    ]
)  # fmt: skip
REMOVE = object()  # an edit that removes the key instead of setting it
CANDIDATE_VALUES = st.one_of(
    JSON,
    st.sampled_from(
        [REMOVE, 10**400, 2**31, 2**64, -1, 0, float("nan"), float("inf"), "\x00", "\ud800",
         "x" * 300, "ѕ/repo", "../..", "x/..", "²", "h\u0130200", "a" * 40, [None], {"": {}}]
    ),
)  # fmt: skip


def _candidate_body(data: st.DataObject) -> bytes:
    """A valid candidate edited at a few places, any JSON value, or any bytes; written as
    Python's `json.dumps` would (NaN and lone surrogates included, which orjson refuses)."""
    from tests import appkit

    kind = data.draw(st.sampled_from(["edited", "edited", "json", "bytes"]))
    if kind == "bytes":
        raw: bytes = data.draw(st.binary(max_size=300))
        return raw
    doc: Any = data.draw(JSON) if kind == "json" else appkit.candidate()
    for _ in range(data.draw(st.integers(1, 3)) if kind == "edited" else 0):
        where, value = data.draw(CANDIDATE_WHERE), data.draw(CANDIDATE_VALUES)
        if value is REMOVE:
            parent = _at(doc, where[:-1])
            if _has(parent, where[-1]):
                del parent[where[-1]]
        else:
            _put(doc, where, value)
    return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _at(doc: Any, where: tuple[str | int, ...]) -> Any:
    for key in where:
        if not _has(doc, key):
            return None
        doc = doc[key]
    return doc


@SETTINGS
@given(data=st.data())
def test_the_intake_candidate_parser_gives_a_candidate_or_a_4xx(data: st.DataObject) -> None:
    """`POST /api/v1/candidates` after its signature: a candidate, or a 4xx whose answer
    says why and can be sent as JSON; never an exception (a 500 and a traceback)."""
    from bot.web import intake
    from evidence.model import Candidate

    got = intake.parse_candidate(_candidate_body(data))
    if isinstance(got, intake.Refused):
        assert 400 <= got.status < 500
        assert isinstance(got.answer["error"], str)
        json.dumps(got.answer, allow_nan=False)
    else:
        assert isinstance(got, Candidate)
