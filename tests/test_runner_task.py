"""Task files: the loader's checks, placeholder rendering, and the TOML fallback reader."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from runners import _toml
from runners import task as tasks

GOOD = """
name = "demo"
description = "a demo task"
model = "org/model"
unconfirmed = ["nothing"]
[prepare]
commands = ["{python} -m pip install -e . --no-deps"]
[server]
command = "{python} -m demo.serve --model-path {model} --port {port}"
health = "http://127.0.0.1:{port}/health"
startup_timeout_s = 900
env = { HF_HUB_OFFLINE = "1", DEMO_OUT = "{out}" }
[benchmark]
concurrencies = [1, 8, 16]
requests = 128
warmup_requests = 8
timeout_s = 1800
output = "{out}/speed_results.json"
dataset = "seedtts_testset/en/meta.lst"
[benchmark.modes.streaming]
command = "{python} bench.py --port {port} --max-samples {requests} --stream --output-dir {out}"
[benchmark.modes.non-streaming]
command = "{python} bench.py --port {port} --max-samples {requests} --output-dir {out}"
[accuracy]
command = "{python} wer.py --meta {dataset} --output-dir {out}"
output = "{out}/wer_results.json"
every_round = false
[policy]
on_failure = "stop"
run_timeout_s = 3600
total_timeout_s = 21600
gpu_idle_timeout_s = 600
[metrics]
primary = "throughput_qps"
report = ["throughput_qps", "latency_p95_s"]
[guards]
latency_p95_pct = 10.0
wer_increase = 0.01
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.toml"
    p.write_text(text)
    return p


def test_good_file_loads(tmp_path: Path) -> None:
    t = tasks.load(str(write(tmp_path, GOOD)))
    assert t.name == "demo"
    assert t.model == "org/model"
    assert t.benchmark.concurrencies == (1, 8, 16)
    assert set(t.benchmark.modes) == {"streaming", "non-streaming"}
    assert t.accuracy is not None
    assert t.accuracy.every_round is False
    assert t.accuracy.after_server_stop is False
    assert t.policy.on_failure == "stop"
    assert t.server.env == {"HF_HUB_OFFLINE": "1", "DEMO_OUT": "{out}"}
    assert t.guards == {"latency_p95_pct": 10.0, "wer_increase": 0.01}
    assert t.sha256
    assert len(t.sha256) == 64
    assert t.summary()["commands"]["streaming"].startswith("{python} bench.py")


def test_every_shipped_task_loads() -> None:
    names = tasks.available()
    assert "dry" in names
    for name in names:
        t = tasks.load(name)
        assert t.name == name, f"{name}.toml says name = {t.name!r}"
        assert t.benchmark.modes


def test_unknown_task_name_lists_known() -> None:
    with pytest.raises(tasks.TaskError, match=r"no task named 'nope' \(known: .*dry"):
        tasks.load("nope")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace('name = "demo"\n', ""), "`name` is missing"),
        (lambda s: s.replace('model = "org/model"\n', ""), "`model` is missing"),
        (
            lambda s: s.replace('health = "http://127.0.0.1:{port}/health"\n', ""),
            "`server.health` is missing",
        ),
        (lambda s: s.replace("requests = 128\n", ""), "`benchmark.requests` is missing"),
        (
            lambda s: s.replace("concurrencies = [1, 8, 16]", "concurrencies = []"),
            "`benchmark.concurrencies` must be a non-empty list",
        ),
        (
            lambda s: s.replace("--port {port} --max-samples", "--port {prot} --max-samples"),
            r"`benchmark\.modes\.streaming\.command` uses unknown placeholder\(s\) \{prot\}",
        ),
        (
            lambda s: s.replace("pip install -e .", "pip install -e {port}"),
            r"`prepare\.commands\[0\]` uses unknown placeholder\(s\) \{port\}",
        ),
        (
            lambda s: s.replace("startup_timeout_s = 900", "startup_timeout = 900"),
            "unknown key.*`server.startup_timeout`",
        ),
        (lambda s: s.replace('on_failure = "stop"', 'on_failure = "retry"'), "on_failure"),
        (lambda s: s.replace("requests = 128", 'requests = "128"'), "`benchmark.requests`"),
        (
            lambda s: s.replace("http://127.0.0.1:{port}/health", "127.0.0.1:{port}"),
            "`server.health` must be an http",
        ),
        (lambda s: s.replace("[benchmark.modes.streaming]", "[benchmark.modes.stream]"), "stream"),
        (lambda s: s + "\n[[oops\n", "not valid TOML"),
        (
            lambda s: s.replace(
                "warmup_requests = 8", "warmup_requests = 8\nwarmup_steady_pct = nan"
            ),
            "`benchmark.warmup_steady_pct` must be a finite number",
        ),
        (
            lambda s: s.replace("timeout_s = 1800", "timeout_s = inf"),
            "`benchmark.timeout_s` must be a finite number",
        ),
        (
            lambda s: s.replace(
                "warmup_requests = 8", "warmup_requests = 8\nwarmup_max_passes = 0"
            ),
            "`benchmark.warmup_max_passes` must be an integer",
        ),
        (
            lambda s: s.replace('--output-dir {out}"\n[benchmark', '--x {0}"\n[benchmark', 1),
            "not a valid template|unknown placeholder",
        ),
    ],
)
def test_bad_files_name_the_key(tmp_path: Path, edit: object, message: str) -> None:
    assert callable(edit)
    with pytest.raises(tasks.TaskError, match=message):
        tasks.load(str(write(tmp_path, edit(GOOD))))


ASR_OUTPUTS = """output = "{out}/asr.json"
records = "{out}/raw/conc{concurrency}_rep1.jsonl"
accuracy_output = "{out}/accuracy.json"
keep = ["{out}/raw/*.jsonl", "{out}/logs/**/*.txt"]
"""


def _asr(text: str = ASR_OUTPUTS) -> str:
    """GOOD with the ASR output keys and without [accuracy] (which they replace)."""
    head, tail = GOOD.split("[accuracy]")
    head = head.replace('output = "{out}/speed_results.json"\n', text)
    return head + "[policy]" + tail.split("[policy]")[1]


def test_asr_output_keys_load(tmp_path: Path) -> None:
    t = tasks.load(str(write(tmp_path, _asr())))
    assert t.benchmark.records == "{out}/raw/conc{concurrency}_rep1.jsonl"
    assert t.benchmark.accuracy_output == "{out}/accuracy.json"
    assert t.benchmark.keep == ("{out}/raw/*.jsonl", "{out}/logs/**/*.txt")
    assert t.summary()["outputs"]["records"] == t.benchmark.records
    assert t.accuracy is None


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda s: s.replace('records = "{out}/', 'records = "/tmp/'),
            "`benchmark.records` must be a path under",
        ),
        (lambda s: s.replace("{out}/raw/conc", "{out}/../conc"), "must stay under"),
        (lambda s: s.replace("raw/conc{concurrency}", "raw/conc*"), "no glob characters"),
        (
            lambda s: s.replace('"{out}/raw/*.jsonl"', '"raw/*.jsonl"'),
            r"`benchmark\.keep\[0\]` must be a path",
        ),
        (
            lambda s: s.replace("{out}/accuracy.json", "{out}/asr.json"),
            "another file than `output`",
        ),
        (
            lambda s: s.replace("{out}/accuracy.json", "{out}/{nope}.json"),
            r"unknown placeholder\(s\) \{nope\}",
        ),
        (
            lambda s: s.replace('keep = ["{out}/raw/*.jsonl"', "keep = [1"),
            "must be a list of strings",
        ),
    ],
)
def test_bad_asr_output_keys_name_the_key(tmp_path: Path, edit: object, message: str) -> None:
    assert callable(edit)
    with pytest.raises(tasks.TaskError, match=message):
        tasks.load(str(write(tmp_path, edit(_asr()))))


def test_accuracy_output_and_accuracy_table_exclude_each_other(tmp_path: Path) -> None:
    text = GOOD.replace('output = "{out}/speed_results.json"\n', ASR_OUTPUTS, 1)
    with pytest.raises(tasks.TaskError, match=r"\[accuracy\] and `benchmark.accuracy_output`"):
        tasks.load(str(write(tmp_path, text)))


def test_no_modes_is_an_error(tmp_path: Path) -> None:
    text = GOOD.split("[benchmark.modes.streaming]")[0] + "[benchmark.modes]\n"
    with pytest.raises(tasks.TaskError, match="needs a streaming or non-streaming"):
        tasks.load(str(write(tmp_path, text)))


def test_render_command_keeps_values_whole() -> None:
    vals = {"python": "/opt/py thon/bin/python3", "port": 8000, "out": "/tmp/a b"}
    argv = tasks.render_command("{python} x.py --port {port} --output-dir={out}", vals)
    assert argv == ["/opt/py thon/bin/python3", "x.py", "--port", "8000", "--output-dir=/tmp/a b"]
    sh = tasks.render_command("sh -c 'cd {out} && echo ${{HOME}} {port}'", vals)
    assert sh == ["sh", "-c", "cd '/tmp/a b' && echo ${HOME} 8000"]


def test_placeholders_and_literal_braces() -> None:
    assert tasks.placeholders("{python} -c 'print({{1: 2}})' {port}") == {"python", "port"}
    with pytest.raises(ValueError, match="plain placeholder"):
        tasks.placeholders("{port:>5}")


# ------------------------------------------------------------------ the TOML fallback


TRICKY = r'''
# comment
title = "a \"quoted\" \u00e9 string" # trailing comment
lit = 'C:\path\no escapes'
multi = """
first line \
    joined
second "line" ""quoted""
"""
mlit = \'\'\'
raw \n stays
\'\'\'
ints = [1, -2, +3, 1_000, 0x1F, 0o17, 0b101]
floats = [1.5, -0.25, 6.02e23, 1e-3, inf, -inf]
bools = [true, false]
nested = [[1, 2], ["a", "b"], []]
multiline_array = [
    "x",  # one
    "y",
]
inline = { a = 1, b.c = "d", e = { f = [1] } }
"quoted key" = 1
dotted.key.here = true

[table]
x = 1
[table.sub-table]
y = "z"
[a."b c".d]
e = 2

[[arr]]
n = 1
[[arr]]
n = 2
[arr.inner]
m = 3
'''.replace("\\'", "'")


def test_fallback_reader_matches_tomllib_on_tricky_input() -> None:
    assert _toml.fallback_loads(TRICKY) == tomllib.loads(TRICKY)


def test_fallback_reader_matches_tomllib_on_every_task_file() -> None:
    files = sorted(tasks.TASKS_DIR.glob("*.toml"))
    assert files
    for f in files:
        text = f.read_text()
        assert _toml.fallback_loads(text) == tomllib.loads(text), f.name


def test_fallback_reader_loads_the_sample_task() -> None:
    assert _toml.fallback_loads(GOOD) == tomllib.loads(GOOD)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a = 1\na = 2\n", "defined twice"),
        ("[t]\n[t]\n", "defined twice"),
        ('a = "open\n', "unterminated"),
        ("a = [1, 2\n", "expected"),
        ("a = 1 b = 2\n", "end of the line"),
        ("= 1\n", "expected a key"),
    ],
)
def test_fallback_reader_errors(text: str, message: str) -> None:
    with pytest.raises(_toml.TOMLError, match=message):
        _toml.fallback_loads(text)
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(text)


def test_fallback_reader_refuses_dates() -> None:
    """Valid TOML, but no task needs a date: the fallback says so instead of guessing."""
    with pytest.raises(_toml.TOMLError, match="dates and times are not supported"):
        _toml.fallback_loads("a = 1979-05-27\n")


def test_candidate_hosts_and_inherited_names_are_checked(tmp_path: Path) -> None:
    """`[candidate]`: the hosts a task's candidates may reach (through the runner's proxy)
    and more of the runner's variables by name — never a credential-like one."""
    ok = GOOD + '[candidate]\nhosts = ["huggingface.co:443", "[::1]:8080"]\ninherit = ["SGL_X"]\n'
    t = tasks.load(str(write(tmp_path, ok)))
    assert t.candidate.hosts == ("huggingface.co:443", "[::1]:8080")
    assert t.candidate.inherit == ("SGL_X",)
    assert t.summary()["candidate"] == {
        "hosts": ["huggingface.co:443", "[::1]:8080"],
        "inherit": ["SGL_X"],
    }
    assert tasks.load(str(write(tmp_path, GOOD))).candidate == tasks.Candidate()
    for body, why in (
        ('hosts = ["huggingface.co"]', r"`candidate.hosts\[0\]` must be host:port"),
        ('hosts = ["a.b:70000"]', r"`candidate.hosts\[0\]` must be host:port"),
        ('hosts = ["http://a.b:443"]', r"`candidate.hosts\[0\]` must be host:port"),
        ('inherit = ["HF_TOKEN"]', r"`candidate.inherit\[0\]` names a credential-like"),
        ('inherit = ["DATABASE_URL"]', r"`candidate.inherit\[0\]` names a credential-like"),
        ('inherit = ["A B"]', r"`candidate.inherit\[0\]` must be a variable name"),
        ('network = "host"', r"unknown key\(s\) `candidate.network`"),
    ):
        with pytest.raises(tasks.TaskError, match=why):
            tasks.load(str(write(tmp_path, GOOD + f"[candidate]\n{body}\n")))
