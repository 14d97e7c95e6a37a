"""The environment gate: each side records its own machine (image and digest, driver,
CUDA, GPU clocks, packages), and base and head that differ in it — or that record a fact
on one side only — are told apart."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from evidence.build import Inputs, build
from evidence.model import Evidence, Finding
from runners import fingerprint, gpu
from tests.bundles import clean_bundle, edit_manifest
from tests.test_runner_fingerprint import FIX, fake_pynvml
from tests.test_runner_verify import FAKE_SMI, runner_env, verify


@pytest.fixture
def tmp_path(reachable_tmp: Path) -> Path:
    """Each side runs as its own user, which must reach its worktree (conftest)."""
    return reachable_tmp


def evidence(bundle: Path) -> Evidence:
    ev, _ = build(Inputs(bundles=[bundle]))
    return ev


def env_findings(ev: Evidence) -> list[Finding]:
    return [f for f in ev.audit if f.code == "environment-mismatch"]


# ------------------------------------------------------------------ the audit


def test_a_driver_missing_on_one_side_and_another_digest_are_errors(tmp_path: Path) -> None:
    b = clean_bundle(tmp_path / "b", speedup=0.15)

    def plant(doc: dict[str, Any]) -> None:
        del doc["environment"]["head"]["driver"]
        doc["environment"]["head"]["image_digest"] = "sha256:" + "e" * 64

    edit_manifest(b, plant)
    ev = evidence(b)
    (f,) = [f for f in env_findings(ev) if f.severity == "error"]
    assert f.numbers["fields"] == "driver,image_digest"
    assert "driver (580.159.04 vs not recorded)" in f.message
    assert ev.verdict == "invalid"


def test_a_bundle_labelled_for_another_gpu_than_it_ran_on_is_an_error(tmp_path: Path) -> None:
    """The label decides which GPU the figures are reported for: an H200 bundle that
    calls itself H100 would put H200 figures under an H100 claim."""
    b = clean_bundle(tmp_path / "b", gpu="H200", speedup=0.15)
    edit_manifest(b, lambda d: d.update(gpu="H100"))
    ev = evidence(b)
    (f,) = [f for f in env_findings(ev) if f.severity == "error"]
    assert f.message.startswith("The bundle is labelled H100, but its sides recorded H200")
    assert ev.verdict == "invalid"
    one_side = clean_bundle(tmp_path / "one", gpu="H200", speedup=0.15)
    edit_manifest(one_side, lambda d: d.update(gpu="H100"))
    edit_manifest(one_side, lambda d: d["environment"].pop("head"))
    assert [f.severity for f in env_findings(evidence(one_side))] == ["error", "warning"]
    gh = clean_bundle(tmp_path / "gh", gpu="GH200", speedup=0.15)  # not an [A-Z]ddd name
    for side in ("base", "head"):
        edit_manifest(
            gh, lambda d, s=side: d["environment"][s].update(gpu_name="NVIDIA GH200 480GB")
        )
    assert env_findings(evidence(gh)) == []
    ok = clean_bundle(tmp_path / "ok", gpu="H200", speedup=0.15)
    edit_manifest(ok, lambda d: d["environment"]["base"].update(gpu_name="NVIDIA H200 141GB"))
    edit_manifest(ok, lambda d: d["environment"]["head"].update(gpu_name="NVIDIA H200 141GB"))
    assert env_findings(evidence(ok)) == []


def test_an_image_recorded_on_one_side_only_is_an_error(tmp_path: Path) -> None:
    b = clean_bundle(tmp_path / "b")
    edit_manifest(b, lambda d: d["environment"]["base"].update(image=None))
    (f,) = env_findings(evidence(b))
    assert f.severity == "error"
    assert f.numbers["fields"] == "image"


def test_package_differences_warn_and_list_them(tmp_path: Path) -> None:
    b = clean_bundle(tmp_path / "b")

    def plant(doc: dict[str, Any]) -> None:
        doc["environment"]["head"]["packages"]["flashinfer-python"] = "0.4.1"
        del doc["environment"]["head"]["packages"]["sglang"]

    edit_manifest(b, plant)
    ev = evidence(b)
    (f,) = env_findings(ev)
    assert f.severity == "warning"
    assert "flashinfer-python not recorded vs 0.4.1" in f.message
    assert "sglang 0.5.22 vs not recorded" in f.message
    assert ev.verdict != "invalid"


def test_gpu_clocks_that_differ_warn(tmp_path: Path) -> None:
    b = clean_bundle(tmp_path / "b")

    def plant(doc: dict[str, Any]) -> None:
        doc["environment"]["base"]["gpu_app_clock_mhz"] = 1980
        doc["environment"]["head"]["gpu_app_clock_mhz"] = 1755

    edit_manifest(b, plant)
    (f,) = env_findings(evidence(b))
    assert f.severity == "warning"
    assert "gpu_app_clock_mhz (1980 vs 1755)" in f.message


# ------------------------------------------------------------------ the runner


def test_the_image_comes_from_the_job_the_machine_or_the_hosted_image(tmp_path: Path) -> None:
    rec = tmp_path / "image.json"
    rec.write_text(json.dumps({"image": "ghcr.io/acme/gpu-runner:24.04", "digest": "sha256:ab"}))
    both = {"RSI_IMAGE": "lmsysorg/sglang-omni:dev", "RSI_IMAGE_DIGEST": "sha256:cd"}
    assert fingerprint.image({**both, "RSI_IMAGE_FILE": str(rec)}) == (
        "lmsysorg/sglang-omni:dev",
        "sha256:cd",
    )
    assert fingerprint.image({"RSI_IMAGE_FILE": str(rec)}) == (
        "ghcr.io/acme/gpu-runner:24.04",
        "sha256:ab",
    )
    missing = str(tmp_path / "none.json")
    assert fingerprint.image(
        {"RSI_IMAGE_FILE": missing, "ImageOS": "ubuntu24", "ImageVersion": "20250101.1"}
    ) == ("ubuntu24/20250101.1", None)
    assert fingerprint.image({"RSI_IMAGE_FILE": missing}) == (None, None)
    rec.write_text("[not an object")
    assert fingerprint.image({"RSI_IMAGE_FILE": str(rec)}) == (None, None)


def test_clocks_are_read_through_nvml_and_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fake_pynvml()
    mod.NVML_CLOCK_GRAPHICS, mod.NVML_CLOCK_MEM = 0, 2
    mod.nvmlDeviceGetApplicationsClock = lambda h, kind: {0: 1980, 2: 2619}[kind]
    mod.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    fp = fingerprint.machine(gpu.Nvml(mod), env={"RSI_IMAGE_FILE": os.devnull})
    assert fp["gpu_app_clock_mhz"] == 1980
    assert fp["gpu_app_mem_clock_mhz"] == 2619
    assert fp["gpu_max_clock_mhz"] == 1980
    info = gpu.parse_smi_xml((FIX / "nvidia-smi-q-x.xml").read_text())
    assert (info.app_clock_mhz, info.app_mem_clock_mhz, info.max_clock_mhz) == (1980, 2619, 1980)


def test_each_side_records_the_image_the_runner_machine_provides(tmp_path: Path) -> None:
    rec = tmp_path / "image.json"
    rec.write_text(json.dumps({"image": "ghcr.io/acme/gpu-runner:24.04", "digest": "sha256:ab"}))
    rec.chmod(0o644)
    env = runner_env(
        PATH=f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}",
        RSI_GPU_BACKEND="nvidia-smi",
        FAKE_NVIDIA_SMI="idle",
        RSI_IMAGE_FILE=str(rec),
    )
    _, _, m = verify(tmp_path, {}, {}, "--gpu", "h100", "--rounds", "1", env=env)
    for side in ("base", "head"):
        fp = m["environment"][side]
        assert fp["image"] == "ghcr.io/acme/gpu-runner:24.04"
        assert fp["image_digest"] == "sha256:ab"
        assert fp["driver"]
        assert fp["gpu_app_clock_mhz"] is not None
