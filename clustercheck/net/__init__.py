"""`clustercheck net`: can every node reach every other on the ports training uses?

gather.py runs clustercheck/probe/net_probe.py on the nodes (listeners, the mesh of
connection attempts, link quality, SSH between nodes); rules.py judges; render.py shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

from clustercheck.fanout import Cluster, FanoutOptions
from clustercheck.inventory import Node
from clustercheck.net.gather import NetFacts, NetOptions, gather_net
from clustercheck.net.rules import judge_net
from clustercheck.result import Finding, worst


@dataclass
class NetResult:
    facts: NetFacts
    findings: List[Finding]

    @property
    def exit_code(self) -> int:
        return worst(self.findings).exit_code


def check_net(nodes: Sequence[Node], fanout: FanoutOptions, options: NetOptions) -> NetResult:
    with Cluster(nodes, fanout) as cluster:
        facts = gather_net(cluster, nodes, options)
    return NetResult(facts, judge_net(facts, options.master_port))
