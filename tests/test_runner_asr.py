"""`rsi-runner verify` with the ASR-shaped dry task: the benchmark's other files (the
per-request JSONL of benchmark_asr_seedtts, MOSS-TD's raw results and CER file) land in
the bundle as `files.records` / `files.wer` / `files.kept`, and the evidence engine
reads them. Real processes and a real bundle, as in test_runner_verify.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from evidence.build import Inputs
from runners.task import TASKS_DIR
from tests.test_runner_verify import ROOT, build, make_repo, runner_cmd, runner_env

DRY_ASR = TASKS_DIR / "dry-asr.toml"


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    """Each side runs as its own user, which must reach its worktree (conftest)."""
    return reachable_tmp


def verify_asr(
    tmp_path: Path,
    task: Path,
    head_cfg: dict[str, Any],
    modes: str = "streaming,non-streaming",
) -> tuple[subprocess.CompletedProcess[str], Path, dict[str, Any]]:
    b, h = make_repo(tmp_path / "repo", {"char_ms": 2.0}, {"char_ms": 2.0, **head_cfg})
    out = tmp_path / "bundle"
    cmd = runner_cmd(tmp_path / "repo", b, h, out)
    cmd[cmd.index("--task") + 1] = str(task)
    cmd[cmd.index("--modes") + 1] = modes
    r = subprocess.run(cmd, cwd=ROOT, env=runner_env(), capture_output=True, text=True, timeout=180)
    assert (out / "manifest.json").is_file(), r.stderr
    return r, out, json.loads((out / "manifest.json").read_text())


def td_task(tmp_path: Path) -> Path:
    """dry-asr in MOSS-TD's shape: three files, the CER file as `accuracy_output`."""
    text = DRY_ASR.read_text()
    text = text.replace('output = "{out}/asr_seedtts_results.json"', "")
    text = text.replace(
        'records = "{out}/raw/conc{concurrency}_rep1.jsonl"\nkeep = ["{out}/raw/*.jsonl"]',
        'output = "{out}/transcribe_diarize_speed_results.json"\n'
        'records = "{out}/transcribe_diarize_asr_results.json"\n'
        'accuracy_output = "{out}/transcribe_diarize_results.json"\n'
        'keep = ["{out}/transcribe_diarize_*.json"]',
    )
    text = text.replace("--shape seedtts", "--shape td").replace("--warmup ", "--warmup 2 ")
    text = text.replace(
        "--save-raw-dir {out}/raw --output {out}/asr_seedtts_results.json", "--output-dir {out}"
    )
    path = tmp_path / "dry-td.toml"
    path.write_text(text)
    return path


def test_seedtts_shape_keeps_the_raw_rows_and_reads_them(tmp_path: Path) -> None:
    # A head four times faster: the verdict stays decided on a loaded host (at twice
    # as fast, 2 ms a character, CI once read it inconclusive).
    r, out, m = verify_asr(tmp_path, DRY_ASR, {"speed": 4.0})
    assert r.returncode == 0, r.stderr
    assert m["complete"] is True
    assert len(m["runs"]) == 8
    for run in m["runs"]:
        assert run["status"] == "ok", run.get("error")
        files = run["files"]
        rel = f"runs/{run['id']}"
        assert files["speed"] == f"{rel}/asr_seedtts_results.json"
        assert files["records"] == f"{rel}/raw/conc4_rep1.jsonl"
        assert files["kept"] == [files["records"]]
        rows = [json.loads(x) for x in (out / files["records"]).read_text().splitlines()]
        assert len(rows) == 20
        assert {"id", "is_success", "wer", "ref_norm", "latency_s", "text_ttft_s"} <= set(rows[0])
        streamed = run["mode"] == "streaming"
        assert all((row["text_ttft_s"] is not None) == streamed for row in rows)
        sweep = json.loads((out / files["speed"]).read_text())
        rep = sweep["results"][0]["per_repeat"][0]
        # The client's own timing of the measured pass, not the runner's (which would
        # include --warmup's discarded pass).
        assert run["wall_clock_source"] == "client-summary"
        assert run["wall_clock_s"] == rep["wall_clock_s"]
        assert run["wall_clock_s"] < run["runner_wall_s"]
    ev, _ = build(Inputs([out]))
    assert [f.message for f in ev.audit if f.severity == "error"] == []
    assert ev.verdict == "improved"
    rows = {(r.mode, r.metric): r for r in ev.study}
    assert rows[("non-streaming", "throughput_qps")].delta_pct > 30  # type: ignore[operator]
    assert ("streaming", "text_ttft_p95_s") in rows
    assert rows[("streaming", "wer_corpus")].base == 0.0


def test_td_shape_keeps_its_three_files(tmp_path: Path) -> None:
    r, out, m = verify_asr(tmp_path, td_task(tmp_path), {"wer_noise": 0.2}, modes="streaming")
    assert r.returncode == 0, r.stderr
    for run in m["runs"]:
        assert run["status"] == "ok", run.get("error")
        rel = f"runs/{run['id']}"
        assert run["files"]["speed"] == f"{rel}/transcribe_diarize_speed_results.json"
        assert run["files"]["records"] == f"{rel}/transcribe_diarize_asr_results.json"
        assert run["files"]["wer"] == f"{rel}/transcribe_diarize_results.json"
        assert len(run["files"]["kept"]) == 3
        assert run["wall_clock_source"] == "client-config"
    ev, _ = build(Inputs([out]))
    cer = next(r for r in ev.study if r.metric == "cer_mean")
    assert cer.head is not None
    assert cer.base is not None
    assert cer.head > cer.base  # head mishears 20% of the words
    assert not any(r.metric in ("wer_mean", "wer_corpus") for r in ev.study)


def test_a_failed_td_run_keeps_what_the_client_wrote(tmp_path: Path) -> None:
    cfg = {"crash_after": 12, "fail_rounds": [2]}
    r, out, m = verify_asr(tmp_path, td_task(tmp_path), cfg, modes="non-streaming")
    assert r.returncode == 0, r.stderr
    failed = [run for run in m["runs"] if run["status"] == "failed"]
    assert [run["id"] for run in failed] == ["r2-head-nonstream-c4"]
    files = failed[0]["files"]
    assert files["records"] == "runs/r2-head-nonstream-c4/transcribe_diarize_asr_results.json"
    doc = json.loads((out / files["records"]).read_text())
    assert any(not o["is_success"] for o in doc["outputs"])
