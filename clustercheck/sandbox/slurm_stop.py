"""Stopping the sandbox's Slurm: munged and slurmctld, and the controller's namespace.

Apart from slurm.py so that the sandbox's `down` (cluster.py) can call it while slurm.py
builds on cluster.py: no import circle.
"""

from __future__ import annotations

import os
import signal
import time
from typing import List, Optional

from clustercheck.sandbox.processes import pid_alive, sh


def _kill_pidfile(path: str) -> Optional[int]:
    try:
        with open(path) as handle:
            pid = int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if pid_alive(pid):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return None
    return pid


def stop_slurm(name: str, state_dir: str) -> List[str]:
    """Stop munged and slurmctld (slurmds die with their nodes), remove the controller's namespace."""
    removed = []
    where = os.path.join(state_dir, "slurm")
    ctl_ns = f"{name}-ctl"
    pids = [int(p) for p in sh("ip", "netns", "pids", ctl_ns, check=False).stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    munged = _kill_pidfile(os.path.join(where, "munged.pid"))
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in pids + ([munged] if munged else [])) and time.monotonic() < deadline:
        time.sleep(0.05)
    if sh("ip", "netns", "del", ctl_ns, check=False).returncode == 0:
        removed.append(ctl_ns)
    if sh("ip", "link", "del", f"{name}-ch", check=False).returncode == 0:
        removed.append(f"{name}-ch")
    return removed
