"""The checkpoint's save and load time from the measured rates: every node moves the bytes plan's accounting
says it writes, or its ranks read at a resume (planner/checkpoint.py), at the rate its slots reached
together, and the save ends when the slowest node is done (every rank waits for the last at the save's
barrier). Pure: no I/O."""

from __future__ import annotations

from typing import Dict, Optional

from clustercheck.planner.checkpoint import CheckpointWrites, checkpoint_writes
from clustercheck.stages.storage.coherence import shared
from clustercheck.stages.storage.facts import StorageFacts, Throughput


def writes(facts: StorageFacts) -> CheckpointWrites:
    ranks = {n: facts.ranks.get(n, 1) for n in facts.order}
    return checkpoint_writes(facts.params, facts.mode, ranks, facts.precision, shared(facts) is not False, facts.order)


def rates(facts: StorageFacts, phase: str) -> Dict[str, Throughput]:
    """node -> what its slots reached together in one phase (write, read, data); nodes with nothing left out."""
    found = {}
    for view in facts.views():
        measured = getattr(view, phase)()
        if measured is not None and measured.rate > 0:
            found[view.node] = measured
    return found


def slowest(facts: StorageFacts, phase: str, per_node: Dict[str, int]) -> Optional[float]:
    """Seconds for every node to move its bytes at its measured rate: the slowest node's (None: not measured)."""
    measured = rates(facts, phase)
    if not measured or any(n not in measured for n in per_node if per_node[n]):
        return None
    return max((per_node[n] / measured[n].rate for n in per_node if per_node[n]), default=0.0)


def checkpoint_estimate(facts: StorageFacts) -> Optional[Dict]:
    """{"bytes", "save_s", "load_s", "per_node"}, or None where a node measured nothing."""
    if not facts.views() or facts.problems:
        return None
    plan = writes(facts)
    save, load = slowest(facts, "write", plan.per_node), slowest(facts, "read", plan.reads)
    if save is None or load is None:
        return None
    return {"bytes": plan.total, "save_s": round(save, 3), "load_s": round(load, 3), "per_node": plan.per_node,
            "reads": plan.reads, "shared": plan.shared}
