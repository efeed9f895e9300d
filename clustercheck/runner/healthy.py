"""The nodes a run found healthy, and the failed ones: what a user launches on next, and excludes.

A node is failed when a FAIL or an UNKNOWN finding names it (it is broken, or could not be checked: neither
is a node to launch on), and every node is when the run checked nothing; a WARN leaves it usable. Slots are
what the run used: slots= of the nodes file, else the GPUs the probe found, else 1."""

from __future__ import annotations

from typing import Dict, List

from clustercheck.core.inventory import fold
from clustercheck.core.result import Status


def failed_nodes(run) -> List[str]:
    """Where the run checked nothing (every stage skipped, notes only), every node: not one was seen healthy."""
    names = [n.name for n in run.nodes]
    if not run.checked_anything:
        return names
    named = {node for f in run.findings if f.status in (Status.FAIL, Status.UNKNOWN) for node in f.nodes}
    return [n for n in names if n in named]


def healthy_nodes(run) -> List[str]:
    failed = set(failed_nodes(run))
    return [n.name for n in run.nodes if n.name not in failed]


def slots_of(run) -> Dict[str, int]:
    gpus: Dict[str, int] = {}
    for result in run.stages:
        for probed in getattr(result.facts, "probed", None) or []:
            if probed.facts is not None and probed.gpu_count:
                gpus[probed.name] = probed.gpu_count
    return {n.name: n.slots or gpus.get(n.name) or 1 for n in run.nodes}


def healthy_files(run) -> Dict[str, str]:
    """suffix -> content of the files written beside a report with a failed node: a nodes file, a DeepSpeed
    hostfile with slots, and Slurm's --exclude= of the failed ones ({} when no node failed)."""
    failed = failed_nodes(run)
    if not failed:
        return {}
    healthy = [n for n in run.nodes if n.name not in set(failed)]
    slots = slots_of(run)
    nodes_file = "".join(
        f"{n.address if n.host else n.name}" + (f":{n.port}" if n.port and n.host else "")
        + f" slots={slots[n.name]}" + (f" python={n.python}" if n.python and n.source != "default" else "")
        + (f" ifname={n.ifname}" if n.ifname else "") + "\n" for n in healthy)
    return {"healthy-nodes.txt": nodes_file,
            "healthy-hostfile": "".join(f"{n.name} slots={slots[n.name]}\n" for n in healthy),
            "exclude.txt": f"--exclude={fold(failed)}\n"}
