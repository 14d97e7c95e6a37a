"""The environment each side ran in, so a difference of machine shows as one.

Machine facts (GPU name and count, driver, CUDA, GPU clocks, CPU, container image) are
read for each side when it is fingerprinted, for the GPUs CUDA_VISIBLE_DEVICES gives the
job (`runners/devices.py`): a fact one side could not read is missing on that side, not
copied from the other. Python and package versions are read per side by running the
side's own interpreter in its worktree, so they reflect what that side imported. The keys
follow docs/bundle.md; the evidence engine reports any difference between the sides.

The image: `RSI_IMAGE` and `RSI_IMAGE_DIGEST` (the workflow sets them from the job's
container), else the record the runner's machine image provides (`RSI_IMAGE_FILE`,
default /etc/rsi/image.json: `{"image": ..., "digest": ...}`), else a GitHub-hosted
runner's `ImageOS`/`ImageVersion`.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runners import devices
from runners.gpu import Backend, GpuInfo
from runners.host import cpuset

PACKAGES = (
    "torch",
    "sglang",
    "sglang-omni",
    "transformers",
    "vllm",
    "numpy",
    "triton",
    "flashinfer-python",
    "torchaudio",
)

# Run by the side's interpreter: its version, the packages it sees, and where the
# worktree's own top-level packages are imported from.
_PROBE = """
import json, platform, sys
from importlib import metadata, util
names, mods = json.loads(sys.argv[1]), json.loads(sys.argv[2])
pk = {}
for n in names:
    try:
        pk[n] = metadata.version(n)
    except Exception:
        pass
imports = {}
for m in mods:
    try:
        spec = util.find_spec(m)
    except Exception:
        spec = None
    where = None
    if spec is not None:
        where = spec.origin
        if where in (None, "namespace") and spec.submodule_search_locations:
            where = list(spec.submodule_search_locations)[0]
    imports[m] = where
print(json.dumps({"python": platform.python_version(),
                  "implementation": platform.python_implementation(),
                  "packages": pk, "imports": imports}))
"""


def cpu_model(cpuinfo: str | None = None) -> str | None:
    """The CPU's model name from /proc/cpuinfo (x86 `model name`, Arm `Model`/`CPU part`)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip() not in fields:
            fields[k.strip()] = v.strip()
    for k in ("model name", "Model", "Processor", "cpu model", "cpu"):
        if fields.get(k):
            return fields[k]
    if fields.get("CPU part"):
        return f"{fields.get('CPU implementer', '?')}/{fields['CPU part']}"
    return platform.processor() or None


def in_container() -> bool:
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    try:
        cg = Path("/proc/1/cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(w in cg for w in ("docker", "kubepods", "containerd", "libpod"))


def os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text(encoding="utf-8").splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


IMAGE_FILE = "/etc/rsi/image.json"


def image(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(image, digest) of the container or machine image the job runs in."""
    name, digest = env.get("RSI_IMAGE") or None, env.get("RSI_IMAGE_DIGEST") or None
    if name and digest:
        return name, digest
    try:
        doc = json.loads(Path(env.get("RSI_IMAGE_FILE") or IMAGE_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        doc = None
    if isinstance(doc, dict):
        got = doc.get("image"), doc.get("digest")
        name = name or (got[0] if isinstance(got[0], str) and got[0] else None)
        digest = digest or (got[1] if isinstance(got[1], str) and got[1] else None)
    if not name and env.get("ImageOS"):
        name = f"{env['ImageOS']}/{env.get('ImageVersion') or '?'}"
    return name, digest


def machine(backend: Backend, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The machine a side ran on: GPU, driver, CUDA, clocks, container image, CPU."""
    env = os.environ if env is None else env
    img, digest = image(env)
    try:
        gi = backend.info()
    except Exception:
        gi = GpuInfo()
    return {
        "gpu_name": gi.gpu_name,
        "gpu_count": gi.gpu_count if gi.gpu_count is not None else 0,
        "gpu_memory_total_mib": gi.gpu_memory_total_mib,
        "driver": gi.driver,
        "cuda": gi.cuda,
        "gpu_app_clock_mhz": gi.app_clock_mhz,
        "gpu_app_mem_clock_mhz": gi.app_mem_clock_mhz,
        "gpu_max_clock_mhz": gi.max_clock_mhz,
        "gpu_backend": backend.name,
        # The GPUs read, by NVML/nvidia-smi index (None: every GPU, CUDA_VISIBLE_DEVICES
        # unset); CUDA numbers them alike because the runner sets CUDA_DEVICE_ORDER.
        "gpu_indices": backend.indices(),
        "cuda_device_order": devices.ORDER,
        "image": img,
        "image_digest": digest,
        "container": in_container(),
        "cpu_model": cpu_model(),
        "cpu_count": len(cpuset()),
        "cpu_count_host": os.cpu_count(),
        "os": os_release(),
        "kernel": platform.release(),
    }


def top_level_packages(worktree: Path) -> list[str]:
    """The worktree's own importable packages (`pkg/__init__.py` at its root, in src/ or
    python/): the probe checks that the side imports these from its own worktree."""
    names: set[str] = set()
    for base in (worktree, worktree / "src", worktree / "python"):
        if not base.is_dir():
            continue
        for init in base.glob("*/__init__.py"):
            name = init.parent.name
            if name.isidentifier() and name not in (
                "tests",
                "test",
                "docs",
                "benchmarks",
                "examples",
            ):
                names.add(name)
    return sorted(names)


def side(
    python: str,
    worktree: Path,
    env: Mapping[str, str],
    packages: tuple[str, ...] = PACKAGES,
    timeout: float = 120.0,
    launch: Callable[[list[str], Mapping[str, str]], tuple[list[str], dict[str, str]]]
    | None = None,
) -> dict[str, Any]:
    """Python and package versions as the side's interpreter sees them, in its worktree.

    The probe runs the side's interpreter, so it runs as the candidate (`launch`).
    Returns the fingerprint keys (`python`, `packages`) plus `imports` (module → file) and
    `error` when the probe failed.
    """
    mods = top_level_packages(worktree)
    try:
        argv = [python, "-c", _PROBE, json.dumps(list(packages)), json.dumps(mods)]
        cmd, cmd_env = launch(argv, env) if launch else (argv, dict(env))
        r = subprocess.run(
            cmd,
            cwd=worktree,
            env=cmd_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"python": None, "packages": {}, "imports": {}, "error": str(exc)}
    if r.returncode != 0:
        return {
            "python": None,
            "packages": {},
            "imports": {},
            "error": (r.stderr or r.stdout).strip()[-500:] or f"exit code {r.returncode}",
        }
    try:
        doc = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"python": None, "packages": {}, "imports": {}, "error": "unreadable probe output"}
    if not _probe_shape(doc, packages, mods):
        # The side's interpreter answers (a json.py or sitecustomize in its worktree can
        # make it say anything): only the shape asked for is kept.
        return {"python": None, "packages": {}, "imports": {}, "error": "malformed probe output"}
    return {
        "python": doc.get("python"),
        "packages": doc.get("packages") or {},
        "imports": doc.get("imports") or {},
    }


def _text(x: object, most: int = 4096) -> bool:
    """A string that any writer can encode (no lone surrogates) and of sane length."""
    if not isinstance(x, str) or len(x) > most:
        return False
    try:
        x.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _probe_shape(doc: object, packages: tuple[str, ...], mods: list[str]) -> bool:
    """The probe's answer as `_PROBE` writes it: versions of the packages asked for and
    where the worktree's modules import from, all strings."""
    if not isinstance(doc, dict):
        return False
    pk, imports = doc.get("packages") or {}, doc.get("imports") or {}
    return (
        (doc.get("python") is None or _text(doc["python"], 64))
        and (doc.get("implementation") is None or _text(doc["implementation"], 64))
        and isinstance(pk, dict)
        and all(k in packages and _text(v, 128) for k, v in pk.items())
        and isinstance(imports, dict)
        and all(k in mods and (v is None or _text(v)) for k, v in imports.items())
    )


def outside(worktree: Path, imports: Mapping[str, str | None]) -> dict[str, str]:
    """Worktree packages that the side would import from somewhere else."""
    root = worktree.resolve()
    bad: dict[str, str] = {}
    for mod, where in imports.items():
        if not where:
            continue
        try:
            Path(where).resolve().relative_to(root)
        except ValueError:
            bad[mod] = where
    return bad
