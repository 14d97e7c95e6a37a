"""Task files against upstream's real scripts, and server command variants.

`tests/fixtures/upstream_options.json` records, per SGLang-Omni benchmark script, the
option names its argparse parser defines at a given commit. Every `--flag` a task passes
to a recorded script must be one of them. The variants test checks that a side's
worktree picks its server command (first match wins, else `command`).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from runners import task

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "upstream_options.json").read_text())
RECORDED: dict[str, set[str]] = {
    path: set(entry["options"]) for path, entry in FIXTURE["files"].items()
}
UPSTREAM_TASKS = (
    "cosyvoice3",
    "moss-tts",
    "fish-s2-pro",
    "qwen3-tts",
    "qwen3-asr",
    "whisper",
    "moss-td",
    "ming3-tts",
)
# Tasks whose benchmark script has no recorded option list (see `not_recorded`): none now,
# every seed task's script is recorded.
UNRECORDED: set[str] = set()


def _argv(template: str) -> list[str]:
    """The arguments of a command template; an `sh -c` script is split as well."""
    tokens = shlex.split(template)
    if tokens[:2] == ["sh", "-c"]:
        return shlex.split(tokens[2].replace("; ", " ; "))
    return tokens


def _script_flags(template: str) -> tuple[str | None, set[str]]:
    """(upstream file the command runs with `-m`, the `--flags` it passes)."""
    argv = _argv(template)
    if "-m" not in argv:
        return None, set()
    module = argv[argv.index("-m") + 1]
    flags = {a.split("=", 1)[0] for a in argv if a.startswith("--") and a != "--"}
    return module.replace(".", "/") + ".py", flags


def _commands(t: task.Task) -> list[str]:
    out = list(t.benchmark.modes.values())
    if t.accuracy is not None:
        out.append(t.accuracy.command)
    return out


def test_fixture_holds_facts_with_commits() -> None:
    assert FIXTURE["repository"] == "sgl-project/sglang-omni"
    for path, entry in FIXTURE["files"].items():
        assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"]), path
        assert entry["options"]
        assert all(o.startswith("--") for o in entry["options"])
        assert len(set(entry["options"])) == len(entry["options"]), path


@pytest.mark.parametrize("name", UPSTREAM_TASKS)
def test_task_flags_exist_upstream(name: str) -> None:
    t = task.load(name)
    scripts = set()
    for cmd in _commands(t):
        script, flags = _script_flags(cmd)
        assert script is not None, cmd
        scripts.add(script)
        if script not in RECORDED:
            continue
        unknown = sorted(flags - RECORDED[script])
        commit = FIXTURE["files"][script]["commit"][:8]
        assert not unknown, f"{name}: {script} @ {commit} has no option(s) {unknown}"
    recorded = scripts & set(RECORDED)
    assert bool(recorded) == (name not in UNRECORDED), (name, scripts)


@pytest.mark.parametrize(
    "name", ["cosyvoice3", "moss-tts", "fish-s2-pro", "qwen3-tts", "ming3-tts"]
)
def test_tts_accuracy_records_the_measured_mode(name: str) -> None:
    """wer_results.json records --stream and --concurrency: the accuracy step passes the
    measured run's, per mode."""
    t = task.load(name)
    assert t.accuracy is not None
    vals = {"python": "py", "port": 1, "model": "m", "dataset": "d", "out": "/o"}
    for mode in ("streaming", "non-streaming"):
        argv = task.render_command(t.accuracy.command, dict(vals, mode=mode, concurrency=8))
        assert argv[:2] == ["sh", "-c"]
        script = argv[2]
        assert "--concurrency 8" in script
        assert f"if [ {mode} = streaming ]; then set -- --stream;" in script
        assert '--transcribe-only "$@"' in script


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, body in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body)
    return tmp_path


def test_cosyvoice3_variant_by_config_file(tmp_path: Path) -> None:
    t = task.load("cosyvoice3")
    old = _tree(tmp_path / "old", {"examples/configs/cosyvoice3.yaml": "x\n"})
    cmd, info = t.server.choose(old)
    assert "--config" not in cmd
    assert info["variant"] is None
    new = _tree(tmp_path / "new", {"examples/configs/fun_cosyvoice3_0_5b.yaml": "x\n"})
    cmd, info = t.server.choose(new)
    assert "--config examples/configs/fun_cosyvoice3_0_5b.yaml" in cmd
    assert info == {
        "variant": 0,
        "when_exists": "examples/configs/fun_cosyvoice3_0_5b.yaml",
        "command": cmd,
    }
    assert "cosyvoice3.yaml" not in t.server.command


def test_moss_td_variant_by_schema_key(tmp_path: Path) -> None:
    t = task.load("moss-td")
    cfg = "sglang_omni/models/moss_transcribe_diarize/config.py"
    old = _tree(tmp_path / "old", {cfg: "from sglang_omni.config import StageConfig\n"})
    cmd, info = t.server.choose(old)
    assert "--max-running-requests 16 --cuda-graph-max-bs 16" in cmd
    assert "--asr.engine" not in cmd
    assert info["variant"] is None
    new = _tree(tmp_path / "new", {cfg: "from sglang_omni.config import EngineStageConfig\n"})
    cmd, info = t.server.choose(new)
    assert "--asr.engine.max_running_requests 16" in cmd
    assert info["when_contains"] == {"file": cfg, "text": "EngineStageConfig"}


BASE = {
    "name": "t",
    "model": "m",
    "server": {"command": "srv default", "health": "http://127.0.0.1:{port}/health"},
    "benchmark": {
        "concurrencies": [1],
        "requests": 1,
        "modes": {"streaming": {"command": "bench"}},
    },
}


def _with_variants(variants: object) -> dict[str, object]:
    doc: dict[str, object] = json.loads(json.dumps(BASE))
    server = doc["server"]
    assert isinstance(server, dict)
    server["variants"] = variants
    return doc


def test_first_matching_variant_wins(tmp_path: Path) -> None:
    t = task.parse(
        _with_variants(
            [
                {"when_exists": "a", "command": "srv a"},
                {"when_contains": {"file": "b", "text": "key"}, "command": "srv b"},
                {"when_exists": "b", "command": "srv b2"},
            ]
        )
    )
    assert t.server.choose(tmp_path)[0] == "srv default"
    (tmp_path / "b").write_text("no\n")
    assert t.server.choose(tmp_path)[0] == "srv b2"
    (tmp_path / "b").write_text("a key here\n")
    assert t.server.choose(tmp_path)[0] == "srv b"
    (tmp_path / "a").write_text("")
    cmd, info = t.server.choose(tmp_path)
    assert (cmd, info["variant"]) == ("srv a", 0)
    assert t.summary()["server"]["variants"][1] == {
        "when_contains": {"file": "b", "text": "key"},
        "command": "srv b",
    }


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        ({"when_exists": "a", "command": "x"}, "array of tables"),
        ([{"command": "x"}], "only one of them"),
        (
            [{"when_exists": "a", "when_contains": {"file": "a", "text": "t"}, "command": "x"}],
            "only one",
        ),
        ([{"when_exists": "a"}], "`server.variants[0].command` is missing"),
        ([{"when_exists": "/etc/passwd", "command": "x"}], "relative path"),
        ([{"when_exists": "../up", "command": "x"}], "inside the worktree"),
        ([{"when_exists": "{worktree}/a", "command": "x"}], "inside the worktree"),
        (
            [{"when_contains": {"file": "a"}, "command": "x"}],
            "`server.variants[0].when_contains.text`",
        ),
        ([{"when_contains": {"file": "a", "text": "t", "x": 1}, "command": "x"}], "unknown key"),
        ([{"when_exists": "a", "command": "x {nope}"}], "unknown placeholder"),
        ([{"when_exists": "a", "command": "x", "extra": 1}], "unknown key"),
    ],
)
def test_variants_are_validated(variants: object, message: str) -> None:
    with pytest.raises(task.TaskError, match=re.escape(message)):
        task.parse(_with_variants(variants))
