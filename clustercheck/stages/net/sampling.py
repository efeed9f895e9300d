"""Which node connects to which: the full mesh, or a sample that still finds every blocked node.

A full mesh is N x (N - 1) ordered pairs: a million at 1,000 nodes. The sample gives every
node exactly `peers` sources and `peers` targets (a random order of the nodes, then each node
connects to the nodes 1, 2, ... peers places after it, wrapping round), so a node that drops
a port inbound is seen failing from all of its `peers` testers, and one that cannot connect
out fails to all of its targets: found with certainty, not with a probability. Every node
also connects to the master (the first node: MASTER_ADDR of this run), as a launch would.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, List, Sequence

FULL_MESH_MAX = 128        # nodes; above it, `auto` samples
DEFAULT_PEERS = 8          # sources and targets per node in a sample


@dataclass
class MeshPlan:
    mode: str                          # "full" or "sampled"
    peers: int                         # targets per node (N - 1 for a full mesh)
    targets: Dict[str, List[str]]      # source -> the nodes it connects to

    @property
    def pairs(self) -> int:
        return sum(len(t) for t in self.targets.values())

    def describe(self, attempts: int) -> str:
        if self.mode == "full":
            return f"full mesh: every node to every other ({attempts} connection attempts)"
        return (f"sampled: each node to {self.peers} random peers and from {self.peers} others, every node to the "
                f"master ({attempts} connection attempts instead of a full mesh's "
                f"{len(self.targets) * (len(self.targets) - 1)} pairs)")


def plan_mesh(names: Sequence[str], mode: str = "auto", peers: int = DEFAULT_PEERS, seed: int = 0) -> MeshPlan:
    """The plan for these nodes; names[0] is the master. mode: auto, full or sampled."""
    names = list(names)
    count = len(names)
    if mode == "full" or (mode == "auto" and count <= FULL_MESH_MAX) or peers >= count - 1:
        return MeshPlan("full", max(count - 1, 0), {s: [t for t in names if t != s] for s in names})
    order = names[:]
    random.Random(seed).shuffle(order)
    targets: Dict[str, List[str]] = {}
    for index, source in enumerate(order):
        chosen = [order[(index + step) % count] for step in range(1, peers + 1)]
        if source != names[0] and names[0] not in chosen:
            chosen.append(names[0])
        targets[source] = chosen
    return MeshPlan("sampled", peers, {s: targets[s] for s in names})
