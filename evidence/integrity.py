"""Whether the measurement was out of the candidate's reach, as the runner reports it.

The runner runs each side's code as its own user in a cgroup per run, runs the
benchmark client from a trusted tree, and lists the SHA-256 of every file of the bundle
in the manifest (runners/sandbox.py, runners/bundle.py). Here the engine checks what it
can: a candidate run without isolation, a process that outlived its run, or a file that
is not the one the runner wrote makes the study invalid; a head that changes the
benchmark scripts is said plainly, since its change to them was not what was measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from evidence.model import Finding, Manifest, Run


def check(
    digest: Callable[[str], str], manifest: Manifest, gpu: str, control: Sequence[Run] = ()
) -> list[Finding]:
    """Findings about isolation, survivors, the trusted tree and the files' digests
    (`digest(rel)`: a file's SHA-256, streamed; FileNotFoundError when absent). The null
    control's runs (`control`, as read) are held to the same: their files must be listed
    too, and a survivor of theirs escaped like any other."""
    out = _isolation(manifest, gpu)
    out += _survivors(manifest, gpu, control)
    out += _benchmark_tree(manifest, gpu)
    out += _digests(digest, manifest, gpu, control)
    return out


def _isolation(m: Manifest, gpu: str) -> list[Finding]:
    iso = m.isolation
    if iso is None:
        return []  # a runner from before isolation; nothing it could say
    if iso.get("mode") == "none" or iso.get("error"):
        return [
            Finding(
                code="unisolated",
                severity="error",
                message=(
                    "The candidate's code ran as the runner's own user, without isolation "
                    "(--isolation none): it could have changed the other side's code, the "
                    "benchmark client or the records, so no figure of this bundle can be "
                    "trusted."
                ),
                gpu=gpu,
            )
        ]
    return []


def _survived(run: Run) -> bool:
    return bool(run.survivors) or run.failure == "process-survived"


def _survivors(m: Manifest, gpu: str, control: Sequence[Run]) -> list[Finding]:
    every = [*m.runs, *control]
    runs = [r.id for r in every if _survived(r)]
    if not runs and not m.survivors:
        return []
    n = sum(len(r.survivors) for r in every) + len(m.survivors)
    return [
        Finding(
            code="process-survived",
            severity="error",
            message=(
                f"{n} process(es) of a candidate's user outlived their run outside its "
                "cgroup: candidate code escaped its sandbox and could have changed what "
                "was measured afterwards."
            ),
            gpu=gpu,
            runs=runs,
            numbers={"processes": n},
        )
    ]


def _benchmark_tree(m: Manifest, gpu: str) -> list[Finding]:
    tree = m.benchmark_tree or {}
    changed = [str(x) for x in tree.get("changed_by_head") or []]
    if not changed:
        return []
    sha = str(tree.get("sha") or "")[:12]
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return [
        Finding(
            code="benchmark-changed",
            severity="warning",
            message=(
                f"The head changes the benchmark scripts ({shown}). Both sides were measured "
                f"with the trusted copy ({tree.get('source') or 'base'} {sha}), so what the "
                "head changes in them is not part of this evidence; review it by hand."
            ),
            gpu=gpu,
            numbers={"files": len(changed)},
        )
    ]


def _referenced(m: Manifest, control: Sequence[Run]) -> set[str]:
    refs: set[str] = set()
    for r in [*m.runs, *control]:
        f = r.files
        refs.update(x for x in (f.speed, f.records, f.wer, f.server) if x)
        refs.update(f.kept)
        refs.update(v for v in r.logs.values() if v)
    return refs


def _digests(
    digest: Callable[[str], str], m: Manifest, gpu: str, control: Sequence[Run]
) -> list[Finding]:
    if m.digests is None:
        return []  # a runner from before digests
    bad: list[str] = []
    for rel in sorted(_referenced(m, control) - set(m.digests)):
        bad.append(f"{rel} is not listed")
    for rel, want in sorted(m.digests.items()):
        try:
            got = digest(rel)
        except FileNotFoundError:
            bad.append(f"{rel} is missing")
            continue
        except (OSError, ValueError) as exc:
            bad.append(f"{rel} cannot be read ({exc})")
            continue
        if got != str(want).lower():
            bad.append(f"{rel} differs")
    if not bad:
        return []
    shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
    return [
        Finding(
            code="digest-mismatch",
            severity="error",
            message=(
                "Files of the bundle are not the ones the runner wrote when it finished "
                f"(the manifest's SHA-256 digests): {shown}."
            ),
            gpu=gpu,
            numbers={"files": len(bad)},
        )
    ]
