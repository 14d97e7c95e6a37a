"""Which GPUs a run uses: those CUDA_VISIBLE_DEVICES gives it, mapped to NVML/nvidia-smi.

NVML and nvidia-smi ignore CUDA_VISIBLE_DEVICES and always list every GPU of the machine,
numbered by PCI bus id. The server only sees the GPUs the variable names, so the idle
check, the sampling and the fingerprint must look at exactly those, or a job given GPU 2
of eight would wait for (and record) its neighbours' load.

An entry is an index, a `GPU-<uuid>` or a `MIG-<uuid>` (a unique prefix is enough, as for
CUDA). An index counts in CUDA's enumeration order, which is fastest-first unless
CUDA_DEVICE_ORDER=PCI_BUS_ID: then CUDA's index i is the i-th GPU by PCI bus id, which
is NVML's and nvidia-smi's index i. So the runner sets CUDA_DEVICE_ORDER=PCI_BUS_ID for
every process it starts (`ORDER_ENV`) and records it in the manifest; UUIDs name the same
device whatever the order. As CUDA does, parsing stops at the first entry that names no
device (it and every entry after it are ignored), an empty value hides every GPU, and an
unset one shows them all. An index on a GPU in MIG mode is taken as the whole GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

VISIBLE_VAR = "CUDA_VISIBLE_DEVICES"
ORDER_VAR = "CUDA_DEVICE_ORDER"
ORDER = "PCI_BUS_ID"
ORDER_ENV = {ORDER_VAR: ORDER}


@dataclass(frozen=True)
class Gpu:
    """A GPU as NVML or nvidia-smi lists it."""

    index: int  # NVML / nvidia-smi index: PCI bus order
    uuid: str  # GPU-…
    migs: tuple[str, ...] = ()  # MIG-… UUIDs of its MIG devices, in order


@dataclass(frozen=True)
class Target:
    """One device the run may use: a whole GPU, or one MIG device on it."""

    index: int  # the (parent) GPU's index
    uuid: str  # the GPU's or the MIG device's UUID
    mig: bool = False


@dataclass(frozen=True)
class Selection:
    targets: tuple[Target, ...]
    limited: bool  # CUDA_VISIBLE_DEVICES was set
    note: str | None = None  # an entry that named no device, as CUDA would ignore it

    @property
    def indices(self) -> list[int]:
        """The GPUs to read, by index, once each, in the order named."""
        return list(dict.fromkeys(t.index for t in self.targets))


def entries(value: str | None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of entries; None when unset (every GPU)."""
    if value is None:
        return None
    return [e.strip() for e in value.split(",")] if value.strip() else []


def _match(entry: str, gpus: list[Gpu]) -> Target | None:
    if entry.isdigit():
        i = int(entry)
        return next((Target(g.index, g.uuid) for g in gpus if g.index == i), None)
    if entry.startswith("GPU-"):
        hits = [g for g in gpus if g.uuid.startswith(entry)]
        return Target(hits[0].index, hits[0].uuid) if len(hits) == 1 else None
    if entry.startswith("MIG-"):
        found = [Target(g.index, m, mig=True) for g in gpus for m in g.migs if m.startswith(entry)]
        return found[0] if len(found) == 1 else None
    return None


def select(gpus: list[Gpu], env: Mapping[str, str]) -> Selection:
    """The devices CUDA_VISIBLE_DEVICES in `env` names among `gpus`."""
    want = entries(env.get(VISIBLE_VAR))
    if want is None:
        return Selection(tuple(Target(g.index, g.uuid) for g in gpus), limited=False)
    out: list[Target] = []
    note = None
    for pos, entry in enumerate(want):
        t = _match(entry, gpus)
        if t is None or t in out:
            what = "a duplicate" if t is not None else "no device of this machine"
            note = (
                f"{VISIBLE_VAR} entry {pos + 1} ({entry[:12] or 'empty'}) names {what}: "
                "it and the entries after it are ignored, as CUDA ignores them"
            )
            break
        out.append(t)
    if not out and note is None:
        note = f"{VISIBLE_VAR} is empty: the run sees no GPU"
    return Selection(tuple(out), limited=True, note=note)


def parse_smi_list(text: str) -> list[Gpu]:
    """`nvidia-smi -L`: `GPU 0: NVIDIA H100 … (UUID: GPU-…)`, each followed by its
    `  MIG 1g.10gb Device  0: (UUID: MIG-…)` lines."""
    gpus: list[Gpu] = []
    for line in text.splitlines():
        stripped = line.strip()
        uuid = stripped.rsplit("(UUID: ", 1)[-1].rstrip(")") if "(UUID: " in stripped else None
        if uuid is None:
            continue
        if stripped.startswith("GPU ") and uuid.startswith("GPU-"):
            idx = stripped[4:].split(":", 1)[0]
            if idx.isdigit():
                gpus.append(Gpu(int(idx), uuid))
        elif stripped.startswith("MIG ") and uuid.startswith("MIG-") and gpus:
            last = gpus[-1]
            gpus[-1] = Gpu(last.index, last.uuid, (*last.migs, uuid))
    return gpus
