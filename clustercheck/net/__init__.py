"""`clustercheck net`: can every node reach every other on the ports training uses?

gather.py runs clustercheck/probe/net_probe.py on the nodes (listeners, the mesh of
connection attempts, link quality, SSH between nodes); rules.py judges; render.py shows.
"""

from __future__ import annotations

from typing import Sequence

from clustercheck.fanout import Cluster, FanoutOptions
from clustercheck.inventory import Node
from clustercheck.net.gather import NetOptions, gather_net
from clustercheck.net.rules import judge_net
from clustercheck.result import CheckResult


def check_net(nodes: Sequence[Node], fanout: FanoutOptions, options: NetOptions) -> CheckResult:
    with Cluster(nodes, fanout) as cluster:
        facts = gather_net(cluster, nodes, options)
    return CheckResult(facts, judge_net(facts, options.master_port))
