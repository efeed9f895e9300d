"""Run the env probe on every node and bring back its raw document; no judging here.

The probe travels inside the command (clustercheck.onnode.inline_command) and runs with
the node's own interpreter (python= in the inventory, --python, else python3), through
the same non-interactive SSH path a launcher uses. The clock offset is estimated
from the probe's own timestamps, bounded by when the command was sent and answered.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from clustercheck.core.inventory import Node
from clustercheck.node.facts import Probed, answer_of, interpreter
from clustercheck.onnode import inline_command
from clustercheck.transport.base import NodeResult, Outcome, Transport
from clustercheck.transport.fanout import Cluster

PROBE_FILE = "env_probe.py"
PROBE_SCHEMA = 1
PEERS_PER_NODE = 2   # each node resolves and routes to this many others (the next ones in the list)


@dataclass
class ProbeOptions:
    timeout_s: float = 60.0
    workdir: Optional[str] = None      # checked to exist, free disk measured
    deep: bool = False                 # import torch and deepspeed too


def probe_command(node: Node, peers: Sequence[str], workdir: Optional[str], deep: bool, salt: str = "") -> str:
    args = ["--salt", salt] if salt else []
    if peers:
        args += ["--peers", ",".join(peers)]
    if workdir:
        args += ["--workdir", workdir]
    if deep:
        args.append("--deep")
    return inline_command(interpreter(node), PROBE_FILE, args)


def peers_of(nodes: Sequence[Node], index: int) -> List[str]:
    others = [n.address for n in nodes[index + 1:]] + [n.address for n in nodes[:index]]
    return [name for name in others if name not in ("localhost",)][:PEERS_PER_NODE]


def parse_document(text: Optional[str], schema: int = PROBE_SCHEMA) -> Tuple[Optional[Dict], str]:
    """(document, problem) from a node program's last line of output."""
    if not text:
        return None, "no answer"
    try:
        doc = json.loads(text.strip().splitlines()[-1])
    except ValueError:
        return None, f"unreadable answer: {text.strip()[:200]}"
    if not isinstance(doc, dict):
        return None, "unreadable answer"
    if doc.get("fatal"):
        return None, f"the probe failed: {doc['fatal']}"
    if doc.get("schema") != schema:
        return None, f"the probe answered with schema {doc.get('schema')}"
    return doc, ""


def read_document(node: Node, result: NodeResult, schema: int = PROBE_SCHEMA) -> Tuple[Optional[Dict], str]:
    """(document, problem) from a node program's run: why there is no document, in words."""
    if not result.outcome.reached:
        return None, result.detail or result.outcome.value
    if result.outcome is Outcome.TIMED_OUT:
        return None, f"the probe did not finish ({result.detail})"
    doc, problem = parse_document(result.stdout, schema)
    if doc is None and not problem.startswith(("the probe failed", "the probe answered")):
        err = result.stderr.strip().splitlines()
        problem = f"the probe did not run with {interpreter(node)}: {err[-1] if err else result.detail or problem}"
    return doc, problem


def interpret(node: Node, result: NodeResult, sent: float, answered: float) -> Probed:
    """Facts from the probe's stdout, or the reason there are none."""
    probed = answer_of(node, result)
    facts, probed.problem = read_document(node, result)
    if facts is None:
        return probed
    probed.facts = facts
    start, end = facts.get("started"), facts.get("finished")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)):
        # The probe started after we sent and ended before we heard back, so
        # offset is in [end - answered, start - sent]; take the middle.
        low, high = end - answered, start - sent
        if high < low:  # clocks moved under us; keep the widest honest interval
            low, high = high, low
        probed.clock_offset_s = (low + high) / 2
        probed.clock_uncertainty_s = (high - low) / 2
    return probed


def probe_cluster(cluster: Cluster, nodes: Sequence[Node], options: Optional[ProbeOptions] = None) -> List[Probed]:
    """Probe every node; unreachable nodes come back with their outcome and no facts."""
    options = options or ProbeOptions()
    index_of = {node.name: i for i, node in enumerate(nodes)}
    by_name: Dict[str, Probed] = {}
    salt = secrets.token_hex(8)    # one per run: the fingerprints of hidden values compare within it, never across

    def step(transport: Transport, node: Node) -> NodeResult:
        command = probe_command(node, peers_of(nodes, index_of[node.name]), options.workdir, options.deep,
                                salt)
        sent = time.time()
        result = transport.run(command, options.timeout_s)
        by_name[node.name] = interpret(node, result, sent, time.time())
        return result

    results = cluster.each(step, nodes, what="probing the nodes")
    probed = []
    for node, result in zip(nodes, results):
        probed.append(by_name.get(node.name) or interpret(node, result, 0.0, 0.0))
    return probed
