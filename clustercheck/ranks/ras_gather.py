"""Asking NCCL's RAS on every node through the transport (onnode/nccl_ras_client.py, no binary needed), judged by
nccl/ras_judge.py: used by `clustercheck stacks` on a user's running job and by bench and smoke when a run stops
moving, beside the stacks. Bounded: each node's client has its deadline, the command a few seconds more."""

from __future__ import annotations

from typing import Dict, List, Sequence

from clustercheck.core.inventory import Node
from clustercheck.core.result import Finding
from clustercheck.node.facts import interpreter
from clustercheck.node.gather import parse_document
from clustercheck.nccl.ras_judge import judge_ras
from clustercheck.onnode import inline_command
from clustercheck.transport.base import Outcome
from clustercheck.transport.fanout import Cluster

RAS_DEADLINE_S = 5.0      # NCCL's own client waits 5 s by default (ncclras -t)
SLACK_S = 5.0             # the interpreter's start and the transport's round trip


def ask_ras(cluster: Cluster, nodes: Sequence[Node], deadline_s: float = RAS_DEADLINE_S) -> Dict[str, Dict]:
    """node -> the RAS client's document; a node not reached or whose client did not answer says why."""
    command = {n.name: inline_command(interpreter(n), "nccl_ras_client", ["--deadline", f"{deadline_s:g}"])
               for n in nodes}
    replies: Dict[str, Dict] = {}
    for result in cluster.each(lambda transport, node: transport.run(command[node.name], deadline_s + SLACK_S), nodes):
        if not result.outcome.reached or result.outcome is Outcome.TIMED_OUT:
            replies[result.node] = {"answered": False, "why": result.detail or result.outcome.value}
            continue
        doc, problem = parse_document(result.stdout, schema=1)
        replies[result.node] = doc if doc is not None else {"answered": False, "why": problem}
    return replies


def ras_findings(cluster: Cluster, nodes: Sequence[Node], deadline_s: float = RAS_DEADLINE_S,
                 hung: bool = False) -> List[Finding]:
    return judge_ras(ask_ras(cluster, nodes, deadline_s), hung)
