"""`rsi-bot evidence`: files written, exit codes, and errors that name the file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from bot.cli import main
from tests.hostile_configs import HOSTILE

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
H100 = EXAMPLES / "rsi-bundle-v-2c1f0e-h100.zip"
H200 = EXAMPLES / "rsi-bundle-v-2c1f0e-h200.zip"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["evidence", *args])
    return result.exit_code, result.stdout, result.stderr


def test_example_bundles_build_every_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, _ = run(
        str(H100),
        str(H200),
        "--candidate",
        str(EXAMPLES / "candidate.json"),
        "--public-url",
        "https://rsi.example.com/r/v-2c1f0e",
        "--out",
        str(out),
    )
    assert code == 0
    assert stdout.startswith("verdict: improved")
    assert "claim: confirmed" in stdout
    for name in ("evidence.json", "evidence.md", "check.md", "pr-body.md", "report.html"):
        assert (out / name).stat().st_size > 0, name
    ev = orjson.loads((out / "evidence.json").read_bytes())
    assert ev["schema"] == "rsi-evidence/1"
    assert ev["verdict"] == "improved"
    assert set(ev["gpus"]) == {"H100", "H200"}
    assert ev["claim"]["status"] == "confirmed"
    row = ev["study"][0]
    for key in (
        "gpu",
        "mode",
        "concurrency",
        "metric",
        "base",
        "head",
        "delta_pct",
        "ci_low_pct",
        "ci_high_pct",
        "verdict",
        "primary",
    ):
        assert key in row
    assert {p["name"] for p in ev["plots"]} >= {"rounds", "latency", "ttfa", "deltas", "trajectory"}
    assert all(
        p["url"].startswith("https://rsi.example.com/r/v-2c1f0e/plots/") for p in ev["plots"]
    )
    assert all((out / p["path"]).is_file() for p in ev["plots"])
    assert (
        "https://rsi.example.com/r/v-2c1f0e/plots/rounds.png" in (out / "evidence.md").read_text()
    )


def test_threshold_option_changes_the_verdict(tmp_path: Path) -> None:
    code, stdout, _ = run(str(H200), "--threshold", "50", "--out", str(tmp_path))
    assert code == 0
    assert stdout.startswith("verdict: no-change")
    assert orjson.loads((tmp_path / "evidence.json").read_bytes())["threshold_pct"] == 50


def test_corrupt_bundle_exits_2_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "rsi-bundle-x-h200.zip"
    bad.write_bytes(b"not a zip")
    code, stdout, stderr = run(str(bad), "--out", str(tmp_path / "o"))
    assert code == 2
    assert f"{bad}: corrupt zip archive" in stderr
    assert stdout == ""
    assert not (tmp_path / "o").exists()


def test_malformed_candidate_exits_2_naming_the_field(tmp_path: Path) -> None:
    cand = orjson.loads((EXAMPLES / "candidate.json").read_bytes())
    del cand["head"]["sha"]
    path = tmp_path / "candidate.json"
    path.write_bytes(orjson.dumps(cand))
    code, _, stderr = run(str(H200), "--candidate", str(path), "--out", str(tmp_path / "o"))
    assert code == 2
    assert f"{path}: head.sha: Field required" in stderr


def test_malformed_history_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    path.write_text('[{"task": "cosyvoice3"}]')
    code, _, stderr = run(str(H200), "--history", str(path), "--out", str(tmp_path / "o"))
    assert code == 2
    assert "history.json: 0.gpu: Field required" in stderr


def test_invalid_evidence_still_exits_0(tmp_path: Path) -> None:
    from tests.bundles import clean_bundle

    b = clean_bundle(tmp_path / "b", head_audio_scale=0.8)
    code, stdout, _ = run(str(b), "--out", str(tmp_path / "o"))
    assert code == 0
    assert stdout.startswith("verdict: invalid")
    # The audit line, then each error and warning by its code: what made it invalid.
    lines = stdout.split("\n")
    at = next(i for i, x in enumerate(lines) if x.startswith("audit: "))
    assert lines[at + 1].startswith("  error ")
    assert "output-length-shift" in stdout


def test_console_script_is_installed(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("rsi-bot")
    proc = subprocess.run(
        [str(exe), "evidence", "--help"], capture_output=True, text=True, check=True
    )
    assert "--public-url" in proc.stdout


def test_bundles_of_different_verifications_exit_2_with_the_reason(tmp_path: Path) -> None:
    from tests.bundles import clean_bundle

    a = clean_bundle(tmp_path / "a", gpu="H100")
    b = clean_bundle(tmp_path / "b", gpu="H200", verification_id="v-other")
    code, stdout, stderr = run(str(a), str(b), "--out", str(tmp_path / "o"))
    assert code == 2
    assert stdout == ""
    assert stderr.startswith("rsi-bot evidence: not one verification: ")
    assert "bundles of different verifications cannot be compared" in stderr
    assert "v-other" in stderr
    assert not (tmp_path / "o").exists()


def test_the_same_gpu_twice_exits_2_with_the_reason(tmp_path: Path) -> None:
    code, _, stderr = run(str(H200), str(H200), "--out", str(tmp_path / "o"))
    assert code == 2
    assert "a second bundle for GPU H200" in stderr
    assert "one bundle per GPU kind" in stderr


def test_reproduce_covers_every_gpu(tmp_path: Path) -> None:
    code, _, _ = run(str(H100), str(H200), "--out", str(tmp_path))
    assert code == 0
    ev = orjson.loads((tmp_path / "evidence.json").read_bytes())
    lines = ev["reproduce"]["command"].splitlines()
    assert [line.split("--gpu ")[1].split()[0] for line in lines] == ["h100", "h200"]
    md = (tmp_path / "evidence.md").read_text()
    assert all(line in md for line in lines)


def test_example_bundles_say_they_are_synthetic(tmp_path: Path) -> None:
    import zipfile

    for bundle in (H100, H200):
        with zipfile.ZipFile(bundle) as z:
            manifest = orjson.loads(z.read("manifest.json"))
        assert manifest["synthetic"].startswith("Synthetic example:")
        assert manifest["runner"]["name"].startswith("synthetic-")
    assert "synthetic" in (EXAMPLES / "README.md").read_text().lower()
    code, _, _ = run(
        str(H100),
        str(H200),
        "--candidate",
        str(EXAMPLES / "candidate.json"),
        "--out",
        str(tmp_path),
    )
    assert code == 0
    for name in ("evidence.md", "report.html"):
        assert (
            "Synthetic example: generated by examples/make_examples.py"
            in (tmp_path / name).read_text()
        )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--threshold", "nan"], "Invalid value for '--threshold': must be a finite number"),
        (["--public-url", "javascript:x"], "'javascript:x' is not an http(s) URL with a host"),
        (["--github-url", "not a url"], "'not a url' is not an http(s) URL with a host"),
    ],
)
def test_options_that_would_build_a_broken_report_exit_2(
    tmp_path: Path, args: list[str], says: str
) -> None:
    """Before: NaN gave a traceback, and bad URLs were dropped silently (every compare
    link became "#")."""
    code, stdout, stderr = run(str(H200), *args, "--out", str(tmp_path / "o"))
    assert (code, stdout) == (2, "")
    assert says in stderr
    assert not (tmp_path / "o").exists()


def test_an_out_that_cannot_be_a_folder_exits_2_before_any_work(tmp_path: Path) -> None:
    """Before: FileExistsError after the whole computation."""
    file = tmp_path / "taken"
    file.write_text("x")
    code, _, stderr = run(str(H200), "--out", str(file))
    assert code == 2
    assert f"{file} is a file, not a folder" in stderr
    code, _, stderr = run(str(H200), "--out", str(file / "sub"))
    assert code == 2
    assert f"cannot make {file / 'sub'}: {file} is not a folder" in stderr


def test_a_reused_out_keeps_no_plot_of_an_earlier_build(tmp_path: Path) -> None:
    out = tmp_path / "o"
    (out / "plots").mkdir(parents=True)
    (out / "plots" / "trajectory.png").write_bytes(b"an earlier build's plot")
    assert run(str(H200), "--out", str(out))[0] == 0
    assert not (out / "plots" / "trajectory.png").exists()
    assert (out / "plots" / "rounds.png").exists()


def test_a_fifo_given_as_the_bundle_or_the_candidate_exits_2_at_once(tmp_path: Path) -> None:
    """Before: both waited forever on the FIFO."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, stderr = run(str(fifo), "--out", str(tmp_path / "o"))
    assert (code, f"{fifo}: not a regular file or folder" in stderr) == (2, True)
    code, _, stderr = run(str(H200), "--candidate", str(fifo), "--out", str(tmp_path / "o"))
    assert (code, f"{fifo}: not a regular file" in stderr) == (2, True)


def test_check_config_says_each_problem_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "rsi.yml"
    bad.write_text("rounds: 1\nround: 5\ngpus: [a100]\n")
    got = CliRunner().invoke(main, ["check-config", str(bad)])
    assert got.exit_code == 1
    lines = got.output.splitlines()
    why = "at least 3 rounds a side are needed for an interval (got `1`)"
    assert lines[0] == f"{bad}: line 1, column 9: rounds: {why}"
    assert "did you mean `rounds`?" in lines[1]
    assert "must be 'H100' or 'H200'" in lines[2]


def test_check_config_summarises_a_good_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "rsi.yml").write_text("rounds: 5\ngpus: [h100]\n")
    got = CliRunner().invoke(main, ["check-config"])
    assert got.exit_code == 0, got.output
    assert got.output.startswith(".github/rsi.yml: ok: GPUs H100; 5 rounds a side (a command")
    missing = CliRunner().invoke(main, ["check-config", "nope.yml"])
    assert missing.exit_code == 2
    assert "cannot read nope.yml" in missing.output


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_check_config_refuses_a_hostile_file_with_one_problem_line(
    tmp_path: Path, name: str
) -> None:
    text, code = HOSTILE[name]
    f = tmp_path / "rsi.yml"
    f.write_text(text)
    got = CliRunner().invoke(main, ["check-config", str(f)])
    assert got.exit_code == 1, got.output
    [line] = got.output.splitlines()
    assert line.startswith(f"{f}: ")
    said = {
        "yaml_too_many_nodes": "more than 5000 values, counting each alias",
        "yaml_too_deep": "nested more than 24 levels deep",
        "number_too_long": "too long to read (more than 40 characters)",
        "yaml_too_large": "larger than 65536 bytes",
    }
    assert said[code] in line


def test_check_config_on_a_billion_laughs_stays_small(tmp_path: Path) -> None:
    """The whole command, in its own process: exit 1 well under 200 MiB (it expanded to
    hours and gigabytes before the reader was bounded)."""
    f = tmp_path / "rsi.yml"
    f.write_text(HOSTILE["billion-laughs"][0])
    probe = (
        "import resource, subprocess, sys;"
        "r = subprocess.run([sys.executable, '-m', 'bot.cli', 'check-config', sys.argv[1]],"
        " capture_output=True, text=True);"
        "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
        "print(r.stderr, end='')"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(f)], capture_output=True, text=True, check=True
    ).stdout
    rc, kib = map(int, out.splitlines()[0].split())
    assert rc == 1, out
    assert kib < 200 * 1024, out
    assert "more than 5000 values" in out
