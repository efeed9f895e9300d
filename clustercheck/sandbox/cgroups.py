"""A sandbox node with less CPU than the others: its sessions in a cgroup v1 cpu group with a CFS quota.

The node's sshd is moved into the group, so every session it starts (and what they start: probes,
torchrun, ranks) inherits the limit; clear() moves them back and removes the group, and the sandbox's
teardown removes any group it left (cluster.down).
"""

from __future__ import annotations

import os
import time

from clustercheck.sandbox.cluster import Sandbox
from clustercheck.sandbox.processes import read_text, sh

CPU_CGROUP = "/sys/fs/cgroup/cpu"   # cgroup v1 cpu controller
CPU_PERIOD_US = 100000


def cpu_group(box: Sandbox, name: str) -> str:
    return os.path.join(CPU_CGROUP, f"clustercheck-{box.node(name).name}")


def cpu_quota(box: Sandbox, name: str, cpus: float) -> None:
    """On this node only, every new session (its sshd and what that starts) gets at most `cpus` CPUs:
    a node with less CPU than the others (a cgroup v1 CFS quota). Undone by clear()."""
    node = box.node(name)
    group = cpu_group(box, name)
    os.makedirs(group, exist_ok=True)
    with open(os.path.join(group, "cpu.cfs_period_us"), "w") as handle:
        handle.write(str(CPU_PERIOD_US))
    with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as handle:
        handle.write(str(max(1000, int(cpus * CPU_PERIOD_US))))
    with open(os.path.join(group, "cgroup.procs"), "w") as handle:
        handle.write(str(node.sshd_pid))
    box.faults.setdefault(node.name, []).append(f"cpu quota {cpus:g} CPUs")
    box.save()


def release_cpu(box: Sandbox, name: str) -> None:
    """The node's processes back in the root cpu group, its own group removed."""
    group = cpu_group(box, name)
    if not os.path.isdir(group):
        return
    for _ in range(3):   # a process forked meanwhile lands in the group: move again
        for pid in open(os.path.join(group, "cgroup.procs")).read().split():
            try:
                with open(os.path.join(CPU_CGROUP, "cgroup.procs"), "w") as handle:
                    handle.write(pid)
            except OSError:
                pass
        try:
            os.rmdir(group)
            return
        except OSError:
            time.sleep(0.2)


def cpu_quota_running(box: Sandbox, name: str, cpus: float, match: str) -> int:
    """cpu_quota, and the node's processes already running whose command line holds `match` moved under it too: a
    node that loses CPU while the job trains (a noisy neighbour, a throttled host). How many were moved; undone by
    clear()."""
    cpu_quota(box, name, cpus)
    node, group, moved = box.node(name), cpu_group(box, name), 0
    for pid in sh("ip", "netns", "pids", node.netns, check=False).stdout.split():
        if match in read_text(f"/proc/{pid}/cmdline").replace("\0", " "):
            try:
                with open(os.path.join(group, "cgroup.procs"), "w") as handle:
                    handle.write(pid)        # the whole process, every thread of it (cgroup v1's procs file)
                moved += 1
            except OSError:
                continue                     # it ended meanwhile
    return moved
