"""The node layer of one run: the probed nodes over one set of connections (see __init__.py)."""

from __future__ import annotations

from typing import List, Optional, Sequence

from clustercheck.core.inventory import Node
from clustercheck.core.result import Finding
from clustercheck.node.facts import Probed
from clustercheck.node.gather import ProbeOptions, probe_cluster
from clustercheck.node.judges import judge_nodes
from clustercheck.transport.fanout import Cluster, FanoutOptions


class NodeLayer:
    """The probed nodes of one run, over one set of connections."""

    def __init__(self, cluster: Cluster, nodes: Sequence[Node]):
        self.cluster = cluster
        self.nodes = list(nodes)
        self._probed: Optional[List[Probed]] = None
        self._sections: Optional[List[Probed]] = None   # a stage's own documents: host / net / env only
        self._judged = False

    def probed(self, options: Optional[ProbeOptions] = None) -> List[Probed]:
        """Every node's probe document (or why there is none); probed on the first call only."""
        if self._probed is None:
            self._probed = probe_cluster(self.cluster, self.nodes, options or ProbeOptions())
        return self._probed

    @property
    def known(self) -> Optional[List[Probed]]:
        """The probe's documents if a stage probed, else a stage's own (offer), else None; nothing is probed."""
        return self._probed or self._sections

    def offer(self, documents: List[Probed]) -> None:
        """Documents a stage's own node program collected with the sections the shared judges read (net's
        listeners: host, net, env). They are judged when nothing was probed yet, so net alone costs no
        extra exec; they never stand for the probe (no packages, no GPUs): probed() still probes."""
        if self._sections is None:
            self._sections = documents

    def take_findings(self) -> List[Finding]:
        """The shared judges' findings, the first time they are asked for once documents exist; then []."""
        if self.known is None or self._judged:
            return []
        self._judged = True
        return judge_nodes(self.known)


def probe_nodes(nodes: Sequence[Node], fanout: FanoutOptions, options: Optional[ProbeOptions] = None) -> List[Probed]:
    """The probe alone, for commands that only need node facts (plan)."""
    with Cluster(nodes, fanout) as cluster:
        return NodeLayer(cluster, nodes).probed(options)
