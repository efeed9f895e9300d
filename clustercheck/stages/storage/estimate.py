"""The checkpoint's save and load time from the measured rates: every node moves the bytes plan's accounting
says it writes, or its ranks read at a resume (planner/checkpoint.py), at the rate its slots reached
together, and the save ends when the slowest node is done (every rank waits for the last at the save's
barrier). Pure: no I/O."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from clustercheck.planner.checkpoint import CheckpointWrites, checkpoint_writes
from clustercheck.stages.storage.coherence import shared
from clustercheck.stages.storage.facts import StorageFacts, Throughput


def writes(facts: StorageFacts) -> CheckpointWrites:
    ranks = {n: facts.ranks.get(n, 1) for n in facts.order}
    return checkpoint_writes(facts.params, facts.mode, ranks, facts.precision, shared(facts) is not False, facts.order)


ENOUGH_SHARE = 0.25     # a node's bytes per slot below this share of the most any node moved per slot: too little


def measured(facts: StorageFacts, phase: str) -> Dict[str, Throughput]:
    """node -> what its slots moved together in one phase (write, read, data); nodes that moved nothing left out."""
    found = {}
    for view in facts.views():
        moved = getattr(view, phase)()
        if moved is not None and moved.rate > 0:
            found[view.node] = moved
    return found


def too_little(facts: StorageFacts, phase: str) -> Dict[str, str]:
    """node -> why its figure in this phase means nothing: it stopped early on a small share of what another node
    moved per slot (a nearly full disk caps what the probe may write: 4 MB read back in a few ms is no rate). A slow
    node moves less too, but over the whole time: its rate stands."""
    moved = measured(facts, phase)
    per_slot = {n: t.bytes / max(1, facts.ranks.get(n, 1)) for n, t in moved.items()}
    most_bytes = max(per_slot.values(), default=0)
    longest = max((t.seconds for t in moved.values()), default=0)
    return {node: f"{t.bytes / 1e6:,.1f} MB in {t.seconds:.3f} s from {facts.ranks.get(node, 1)} slot(s), where "
                  f"another node moved {most_bytes / 1e6:,.1f} MB per slot over {longest:.1f} s"
            for node, t in moved.items()
            if per_slot[node] < ENOUGH_SHARE * most_bytes and t.seconds < ENOUGH_SHARE * longest}


def rates(facts: StorageFacts, phase: str) -> Dict[str, Throughput]:
    """node -> what its slots reached together in one phase, where enough was moved for the rate to mean
    something (too_little says where not)."""
    small = too_little(facts, phase)
    return {n: t for n, t in measured(facts, phase).items() if n not in small}


def slowest(facts: StorageFacts, phase: str, per_node: Dict[str, int]) -> Optional[Tuple[float, str]]:
    """(seconds, node) for every node to move its bytes at its measured rate: the slowest node's, which sets
    the time (None: not measured)."""
    measured = rates(facts, phase)
    if not measured or any(n not in measured for n in per_node if per_node[n]):
        return None
    times = [(per_node[n] / measured[n].rate, n) for n in per_node if per_node[n]]
    return max(times, key=lambda t: t[0], default=(0.0, ""))


def checkpoint_estimate(facts: StorageFacts) -> Optional[Dict]:
    """{"bytes", "save_s", "save_node", "load_s", "load_node", "per_node", ...}, or None where a node measured
    nothing. save_node and load_node: the slowest node, whose time the run waits for."""
    if not facts.views() or facts.problems:
        return None
    plan = writes(facts)
    save, load = slowest(facts, "write", plan.per_node), slowest(facts, "read", plan.reads)
    if save is None or load is None:
        return None
    return {"bytes": plan.total, "save_s": round(save[0], 3), "save_node": save[1], "load_s": round(load[0], 3),
            "load_node": load[1], "per_node": plan.per_node, "reads": plan.reads, "shared": plan.shared}


def what_it_means(facts: StorageFacts, save_s: float) -> str:
    """The save time in the run's terms: its share of the time between two saves (--save-every steps of
    --step-seconds), or without a step time what every --save-every steps cost."""
    if not facts.save_every:
        return "give --save-every and --step-seconds for what it costs the run"
    said = f"{save_s:,.1f} s" if save_s >= 1 else f"{save_s:.2f} s"
    if facts.step_seconds:
        between = facts.save_every * facts.step_seconds
        return (f"{save_s / between:.1%} of the run's time: {said} of every {between:,.0f} s between saves "
                f"(--save-every {facts.save_every} steps of --step-seconds {facts.step_seconds:g})")
    return (f"the run pauses about {said} every {facts.save_every} steps (--save-every); give "
            f"--step-seconds for its share of the run's time")
