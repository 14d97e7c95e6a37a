"""Every parser at the trust boundary gives a value or a clear refusal, never an exception.

Property-based (Hypothesis, derandomised so CI sees the same examples every run): the
`/rsi` command parser, `.github/rsi.yml`, and a bundle whose manifest is edited anywhere
with any JSON value. Before, `/rsi reverify rounds=²` raised in `int()` (`'²'.isdigit()` is
true) before any permission check, once per delivery attempt.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot import commands, repo_config
from evidence.errors import InputError
from evidence.load import load

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
        assert cmd.errors == [f"`rounds={digits}`: rounds must be a whole number or auto"]
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
