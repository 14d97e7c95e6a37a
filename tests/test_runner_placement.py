"""Server and client on disjoint cores (runners/placement.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runners import placement


def test_cpulists() -> None:
    assert placement.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert placement.parse_cpulist("") == set()


def test_halves_are_disjoint_and_near_the_gpu_first() -> None:
    p = placement.plan([0, 1, 2, 3, 4, 5, 6, 7], near={4, 5, 6, 7}, node=1)
    assert p is not None
    assert p.server == {4, 5}
    assert p.client == {6, 7}
    assert p.describe() == {"mode": "split", "server": "4-5", "client": "6-7", "numa_node": 1}
    odd = placement.plan([0, 1, 2])
    assert odd is not None
    assert odd.server == {0, 1}
    assert odd.client == {2}
    assert placement.plan([3]) is None
    # a NUMA node with none of the job's cores: the job's cores, not nothing
    far = placement.plan([0, 1], near={8, 9})
    assert far is not None
    assert far.server | far.client == {0, 1}


def test_a_pinned_process_and_its_children_keep_to_their_cores() -> None:
    mine = sorted(os.sched_getaffinity(0))
    target = frozenset(mine[:1])
    # The child reads its cores only once told it has been pinned (a line on stdin), so a
    # slow test machine cannot let it look before the pin, as a sleep would.
    code = (
        "import os, subprocess, sys; sys.stdin.readline(); "
        "print(sorted(os.sched_getaffinity(0))); sys.stdout.flush(); "
        "subprocess.run([sys.executable, '-c', "
        "'import os; print(sorted(os.sched_getaffinity(0)))'])"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    placement.pin(p.pid, target)
    out, _ = p.communicate("pinned\n", timeout=30)
    assert out.split("\n")[:2] == [str(sorted(target))] * 2


def test_the_cores_of_a_numa_node_from_sysfs(tmp_path: Path) -> None:
    node = tmp_path / "devices" / "system" / "node" / "node1"
    node.mkdir(parents=True)
    (node / "cpulist").write_text("8-15\n")
    assert placement.node_cpus(1, tmp_path) == set(range(8, 16))
    assert placement.node_cpus(3, tmp_path) == set()
