"""The GPU runner's container recipe and its actions-runner-controller example: the
Dockerfile passes hadolint (pinned in the test extra) and holds what isolation needs; the
scale-set values pass the chart's values schema; every label example matches the
workflow's `runs-on`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parent.parent
CONTAINER = ROOT / "runners" / "container"
DOCKERFILE = CONTAINER / "Dockerfile"
ENTRYPOINT = CONTAINER / "entrypoint.sh"
ARC_VALUES = CONTAINER / "arc-values-h200.yaml"
ARC_SCHEMA = ROOT / "tests" / "fixtures" / "arc" / "gha-runner-scale-set.values.schema.json"
README = ROOT / "runners" / "README.md"
WORKFLOW = ROOT / "runners" / "workflows" / "rsi-verify.yml"
HADOLINT = Path(sys.executable).parent / "hadolint"

# The top-level keys of gha-runner-scale-set's values.yaml (set or documented there),
# actions/actions-runner-controller charts/gha-runner-scale-set/values.yaml at commit
# 3c761be133c55ef7031ab0917a05f407818466fa, plus `runnerScaleSetLabels`, the name GitHub's
# "Using ARC runners in a workflow" gives the labels value (the chart itself reads
# `scaleSetLabels` into the AutoscalingRunnerSet's runnerScaleSetLabels). Upstream's
# schema leaves them open.
ARC_VALUE_KEYS = {
    "githubConfigUrl",
    "scaleSetLabels",
    "runnerScaleSetLabels",
    "githubConfigSecret",
    "proxy",
    "maxRunners",
    "minRunners",
    "runnerGroup",
    "runnerScaleSetName",
    "githubServerTLS",
    "keyVault",
    "containerMode",
    "listenerTemplate",
    "listenerConfig",
    "listenerMetrics",
    "template",
    "controllerServiceAccount",
}


def test_hadolint_passes_the_dockerfile() -> None:
    assert HADOLINT.is_file(), "install the test extra: .venv/bin/pip install -e '.[test]'"
    done = subprocess.run(
        [str(HADOLINT), "--no-color", str(DOCKERFILE)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""


def test_hadolint_is_a_real_linter_here() -> None:
    # The same linter fails an unpinned base and a root user nobody asked for.
    bad = "FROM ubuntu:latest\nRUN apt-get update && apt-get install -y curl\nUSER root\n"
    done = subprocess.run(
        [str(HADOLINT), "--no-color", "-"], input=bad, capture_output=True, text=True
    )
    assert done.returncode == 1
    for rule in ("DL3007", "DL3008", "DL3009", "DL3002"):
        assert rule in done.stdout


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest))
    return out


def test_the_recipe_holds_what_isolation_and_the_runner_need() -> None:
    ins = _instructions()
    froms = [rest for word, rest in ins if word == "FROM"]
    assert froms == ["${SGLANG_OMNI_IMAGE}:${SGLANG_OMNI_TAG}"]
    args = dict(rest.partition("=")[::2] for word, rest in ins if word == "ARG")
    assert args["SGLANG_OMNI_TAG"] not in ("", "latest")
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["RUNNER_VERSION"])
    assert re.fullmatch(r"[0-9a-f]{64}", args["RUNNER_SHA256"])
    runs = " ".join(rest for word, rest in ins if word == "RUN")
    assert 'echo "${RUNNER_SHA256}  runner.tar.gz" | sha256sum -c -' in runs
    assert "useradd --system --no-create-home --shell /usr/sbin/nologin rsi-base" in runs
    assert "useradd --system --no-create-home --shell /usr/sbin/nologin rsi-head" in runs
    assert "rm -rf /var/lib/apt/lists/*" in runs
    env = " ".join(rest for word, rest in ins if word == "ENV")
    for setting in ("RUNNER_ALLOW_RUNASROOT=1", "HF_HUB_OFFLINE=1", "HF_HOME=/cache/huggingface"):
        assert setting in env
    users = [rest for word, rest in ins if word == "USER"]
    assert users[-1] == "0"  # root: verify switches users and makes cgroups
    entry = [rest for word, rest in ins if word == "ENTRYPOINT"]
    assert entry == ['["/usr/bin/tini", "--", "/usr/local/bin/rsi-runner-entrypoint"]']


def _entrypoint_config_line() -> str:
    text = re.sub(r"\\\n\s*", " ", ENTRYPOINT.read_text(encoding="utf-8"))
    (line,) = [ln for ln in text.splitlines() if "./config.sh" in ln]
    return line


def test_the_entrypoint_registers_one_job_with_the_workflows_labels() -> None:
    line = _entrypoint_config_line()
    assert '--labels "self-hosted,linux,$RSI_GPU"' in line
    for flag in ("--ephemeral", "--unattended", "--disableupdate"):
        assert flag in line
    script = ENTRYPOINT.read_text(encoding="utf-8")
    assert "--jitconfig" in script
    assert "unset RSI_RUNNER_TOKEN" in script
    assert "python3 -m runners sandbox" in script
    done = subprocess.run(["bash", "-n", str(ENTRYPOINT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _runs_on() -> list[str]:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    labels: list[str] = doc["jobs"]["verify"]["runs-on"]
    return labels


def _config_sh_labels(text: str) -> list[list[str]]:
    """The label sets of every `config.sh` example in `text`."""
    text = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in text.splitlines():
        if "config.sh" not in line or "--labels" not in line:
            continue
        labels = re.search(r"--labels[ =]\"?([^\s\"]+)", line)
        assert labels, line
        found = labels.group(1).split(",")
        if "--no-default-labels" not in line:
            found += ["self-hosted", "linux"]
        out.append(found)
    return out


def test_every_label_example_matches_the_workflow() -> None:
    runs_on = _runs_on()
    assert runs_on[:2] == ["self-hosted", "linux"]
    for gpu in ("h100", "h200"):
        wanted = {"self-hosted", "linux", gpu}
        for text in (README.read_text(encoding="utf-8"), ENTRYPOINT.read_text(encoding="utf-8")):
            for labels in _config_sh_labels(text):
                if gpu in labels or "$RSI_GPU" in ",".join(labels):
                    resolved = {x.replace("$RSI_GPU", gpu) for x in labels}
                    assert wanted <= {x.lower() for x in resolved}, labels
    readme = README.read_text(encoding="utf-8")
    assert "--labels h200 --no-default-labels" not in readme
    # The JIT example asks for all three labels.
    for label in ("self-hosted", "linux"):
        assert f"-f 'labels[]={label}'" in readme


def _arc_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(ARC_VALUES.read_text(encoding="utf-8"))
    return values


def test_the_arc_example_passes_the_charts_values_schema() -> None:
    schema = json.loads(ARC_SCHEMA.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    values = _arc_values()
    errors = list(Draft202012Validator(schema).iter_errors(values))
    assert errors == []
    assert set(values) <= ARC_VALUE_KEYS
    # And the same schema refuses what it constrains.
    bad = {**values, "listenerConfig": {"scaler": {"qps": 0}}}
    assert list(Draft202012Validator(schema).iter_errors(bad))


def test_the_arc_example_with_check_jsonschema(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "check-jsonschema"),
            "--schemafile",
            str(ARC_SCHEMA),
            str(ARC_VALUES),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_arc_example_is_an_isolating_runner_pod() -> None:
    values = _arc_values()
    assert values["runnerScaleSetName"] == "h200"
    # ARC registers the scale set's name and its labels, nothing implicit (its
    # buildRunnerScaleSetLabels): together they must be exactly what runs-on asks for.
    wanted = {x.replace("${{ inputs.gpu }}", "h200") for x in _runs_on()}
    for key in ("runnerScaleSetLabels", "scaleSetLabels"):
        assert set(values[key]) | {values["runnerScaleSetName"]} == wanted, key
    spec = values["template"]["spec"]
    (runner,) = [c for c in spec["containers"] if c["name"] == "runner"]
    assert runner["securityContext"]["privileged"] is True
    assert runner["command"] == ["/usr/bin/tini", "--", "/usr/local/bin/rsi-runner-entrypoint"]
    env = {e["name"]: e["value"] for e in runner["env"]}
    assert env["HF_HUB_OFFLINE"] == "1"
    (cache,) = [m for m in runner["volumeMounts"] if m["mountPath"] == env["HF_HOME"]]
    assert cache["readOnly"] is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == cache["name"]]
    assert volume["persistentVolumeClaim"]["readOnly"] is True


def test_the_readme_documents_the_docker_run_flags_and_the_cache() -> None:
    readme = README.read_text(encoding="utf-8")
    for needed in (
        "runners/container/Dockerfile",
        "--cgroupns=private",
        "--privileged",
        "--gpus all",
        "/cache/huggingface:ro",
        "arc-values-h200.yaml",
        "rsi-bot runner-repo",
    ):
        assert needed in readme, needed
