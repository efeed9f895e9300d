"""What the network probes reported (NetFacts): the data net's judges and views read; no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from clustercheck.core.inventory import Node
from clustercheck.node.facts import Probed
from clustercheck.ranks.runs import DEFAULT_RDZV_PORT
from clustercheck.stages.net.sampling import MeshPlan
from clustercheck.transport.base import NodeResult

DEFAULT_MASTER_PORT = 29500   # MASTER_PORT: torch.distributed's env:// and DeepSpeed's launcher


FAILED_STATES = ("refused", "filtered", "unreachable", "unresolved")


@dataclass
class NetFacts:
    """What the probes reported, by node name."""

    nodes: List[Node]
    launch_ports: List[int] = field(default_factory=lambda: [DEFAULT_MASTER_PORT, DEFAULT_RDZV_PORT])
    listeners: Dict[str, Dict] = field(default_factory=dict)    # node -> the listener's ready document
    problems: Dict[str, str] = field(default_factory=dict)      # node -> why it has no listener / results
    outcomes: Dict[str, NodeResult] = field(default_factory=dict)
    mesh: Dict[str, Dict] = field(default_factory=dict)         # from node -> connect document
    links: List[Dict] = field(default_factory=list)             # {"from", "to", "rtt_ms", "mbit_s"} or "error"
    node_ssh: Optional[Dict] = None                             # {"from": node, "results": [...]}
    probed: List[Probed] = field(default_factory=list)          # the node layer's documents, for names/interfaces
    plan: Optional[MeshPlan] = None
    retried: int = 0                                            # attempts that failed once and were tried again
    recovered: int = 0                                          # ... and then succeeded

    @property
    def master(self) -> str:
        return self.nodes[0].name

    def attempts(self) -> List[Tuple[str, str, int, str, Dict]]:
        """(from, to, port, state, raw) for every connection attempt made, in inventory order."""
        rows = []
        for source in [n.name for n in self.nodes if n.name in self.mesh]:
            for entry in self.mesh[source].get("results", []):
                rows.append((source, entry["to"], entry["port"], entry.get("state", "?"), entry))
        return rows

    def failed_attempts(self) -> List[Tuple[str, str, int, str, Dict]]:
        return [r for r in self.attempts() if r[3] in FAILED_STATES or r[3].startswith("error")]

    def launch(self, node: str) -> List[Dict]:
        """The node's launch ports as its listener bound them: {"port", "bound", "error", "holder"}."""
        return (self.listeners.get(node) or {}).get("launch") or []

    def master_bound(self) -> bool:
        return self.master not in self.listeners or all(entry.get("bound") for entry in self.launch(self.master))

    def blocking_failures(self) -> List[Tuple[str, str, int, str, Dict]]:
        """Failed attempts a launch with this master would meet: all but those to another node's
        launch ports (they only say that node cannot be the master)."""
        return [r for r in self.failed_attempts() if r[1] == self.master or r[2] not in self.launch_ports]
