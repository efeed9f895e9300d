"""Run the network probes on every node and bring back raw facts; no judging here.

1. listeners: every node binds the launch ports (MASTER_PORT and torchrun's c10d rendezvous
   port: the master changes with the launcher and the allocation, so every node is tried as
   one) and a sample of its ephemeral range, and reports its names and interfaces;
2. mesh: every node connects to the ports of the nodes the plan gives it (all others up to
   FULL_MESH_MAX nodes, else a sample that still finds every blocked node: sampling.py), at
   once, through the names the inventory gives (what a hostfile or MASTER_ADDR would use);
   what failed is tried once more, alone and with a longer wait, and only what fails twice is
   reported (a listener slow to answer on a loaded host is not a firewall);
3. opt-in: link quality in rounds where each node is in at most one pair, and SSH from
   the first node to the others;
then every listener is stopped (its guard kills it on the node).
"""

from __future__ import annotations

import json
import random
import time
from typing import Dict, List, Optional, Sequence

from clustercheck.core.inventory import Node
from clustercheck.node.facts import Probed, interpreter
from clustercheck.node.gather import parse_document, peers_of, read_document
from clustercheck.onnode import inline_command
from clustercheck.onnode.rounds import round_robin
from clustercheck.stages.net.facts import NetFacts
from clustercheck.stages.net.options import NetOptions
from clustercheck.stages.net.sampling import plan_mesh
from clustercheck.transport.base import NodeResult, Outcome, Running, Transport
from clustercheck.transport.fanout import Cluster

PROGRAM = "net_probe"


def listener_documents(facts: NetFacts) -> List[Probed]:
    """The listeners' reports (they carry the probe's host / net / env sections) as probed nodes."""
    probed = []
    for node in facts.nodes:
        outcome = facts.outcomes[node.name].outcome if node.name in facts.outcomes else Outcome.OK
        probed.append(Probed(node, facts=facts.listeners.get(node.name), problem=facts.problems.get(node.name, ""),
                             outcome=outcome))
    return probed


def gather_net(cluster: Cluster, nodes: Sequence[Node], options: NetOptions) -> NetFacts:
    facts = NetFacts(list(nodes), launch_ports=options.launch_ports)
    running: Dict[str, Running] = {}
    by_name = {n.name: n for n in nodes}
    names = [n.name for n in nodes]
    # A safety net only: the listeners are stopped when the mesh is done, and die with the session.
    hold_s = 900 + len(names) + (len(names) * (options.stream_s + 1) if options.links else 0)
    index_of = {name: i for i, name in enumerate(names)}

    def start_listener(transport: Transport, node: Node) -> NodeResult:
        # The route to two peers gives the training interface, as in env; the connection attempts
        # resolve every peer's name themselves.
        args = ["listen", "--samples", str(options.samples), "--hold", f"{hold_s:.0f}",
                "--peers", ",".join(peers_of(nodes, index_of[node.name])),
                "--launch-ports", ",".join(map(str, options.launch_ports))]
        running[node.name] = transport.start(inline_command(interpreter(node), PROGRAM, args))
        return NodeResult(node.name, Outcome.OK)

    try:
        for result in cluster.each(start_listener, nodes, what="starting a listener on every node"):
            if not result.ok:
                facts.outcomes[result.node] = result
                facts.problems[result.node] = result.detail or result.outcome.value
        # Every listener was started before any is waited for: on a loaded host a slow one gets the
        # whole start_timeout_s from here, not what the others left of it.
        deadline = time.monotonic() + options.start_timeout_s
        for result in cluster.each(lambda t, node: _ready(facts, node, running, deadline),
                                   [by_name[n] for n in names if n in running], what="waiting for the listeners"):
            facts.outcomes[result.node] = result
        listening = [n for n in names if n in facts.listeners]
        facts.plan = plan_mesh(listening, options.mesh, options.mesh_peers, seed=random.randrange(1 << 30))
        cluster.each(lambda t, node: _connect(t, node, facts, facts.plan.targets[node.name], options),
                     [by_name[n] for n in listening], what="connecting every node to its peers")
        _retry(cluster, facts, by_name, options)
        if options.links:
            _links(cluster, facts, by_name, listening, options)
        if options.node_ssh and len(names) > 1 and facts.master in listening:
            _node_ssh(cluster, facts, by_name[facts.master], names[1:])
    finally:
        cluster.each(lambda t, node: NodeResult(node.name, Outcome.OK, stderr=running.pop(node.name).stop()),
                     [by_name[n] for n in list(running)])
    return facts


def _ready(facts: NetFacts, node: Node, running: Dict[str, Running], deadline: float) -> NodeResult:
    """The listener's first line: what it bound, and the node's names and interfaces."""
    handle = running[node.name]
    line = handle.readline(max(0.1, deadline - time.monotonic()))
    doc, problem = parse_document(line)
    if doc is None:
        err = handle.stop().strip().splitlines()
        running.pop(node.name, None)
        if line is None and err:
            problem = f"the listener did not start with {interpreter(node)}: {err[-1]}"
        elif line is None:
            problem = "the listener did not report ready in time"
        facts.problems[node.name] = problem
        return NodeResult(node.name, Outcome.COMMAND_FAILED, detail=problem)
    facts.listeners[node.name] = doc
    return NodeResult(node.name, Outcome.OK)


def _connect(transport: Transport, node: Node, facts: NetFacts, to: Sequence[str], options: NetOptions,
             ports_of=None, timeout_s: Optional[float] = None) -> NodeResult:
    """One node's connection attempts to the listeners of `to` (all their ports, or ports_of[target])."""
    targets = []
    for other in to:
        if other == node.name or other not in facts.listeners:
            continue
        if ports_of is not None:
            ports = ports_of[other]
        else:
            ports = [e["port"] for e in facts.launch(other) if e.get("bound")]
            ports += list(facts.listeners[other]["ports"]["ephemeral"])
        targets += [[other, other, port] for port in ports]
    timeout_s = timeout_s or options.attempt_timeout_s
    hostnames = sorted({(facts.listeners[o].get("host") or {}).get("hostname") or o for o in to
                        if o in facts.listeners})
    args = ["connect", "--timeout", f"{timeout_s:g}", "--resolve", ",".join(hostnames)]
    result = transport.run(inline_command(interpreter(node), PROGRAM, args + ["--targets", json.dumps(targets)]),
                           timeout_s + 30)
    doc, problem = read_document(node, result)
    if doc is None:
        facts.problems.setdefault(node.name, f"connection attempts: {problem}")
    elif ports_of is None:
        facts.mesh[node.name] = doc
    else:   # a retry: its answers replace the first ones, which are kept as first_state
        again = {(e["to"], e["port"]): e for e in doc.get("results", [])}
        for entry in facts.mesh[node.name]["results"]:
            retry = again.get((entry["to"], entry["port"]))
            if retry is not None:
                entry["first_state"] = entry.get("state")
                entry.update({k: v for k, v in retry.items() if k in ("state", "ms", "error", "address")})
    return result


def _retry(cluster: Cluster, facts: NetFacts, by_name: Dict[str, Node], options: NetOptions) -> None:
    """Every failed attempt once more, with a longer wait and only the failures in flight."""
    failed: Dict[str, Dict[str, List[int]]] = {}
    for source, target, port, _, _ in facts.failed_attempts():
        failed.setdefault(source, {}).setdefault(target, []).append(port)
    if not failed:
        return
    facts.retried = sum(len(p) for t in failed.values() for p in t.values())
    timeout_s = max(5.0, 2 * options.attempt_timeout_s)
    cluster.each(lambda t, node: _connect(t, node, facts, list(failed[node.name]), options,
                                          ports_of=failed[node.name], timeout_s=timeout_s),
                 [by_name[n] for n in failed])
    facts.recovered = facts.retried - sum(1 for r in facts.failed_attempts() if "first_state" in r[4])


def _node_ssh(cluster: Cluster, facts: NetFacts, first: Node, others: Sequence[str]) -> None:
    def ssh_step(transport: Transport, node: Node) -> NodeResult:
        args = ["ssh", "--hosts", ",".join(others), "--timeout", "5"]
        return transport.run(inline_command(interpreter(node), PROGRAM, args), 60)

    [result] = cluster.each(ssh_step, [first])   # a connection lost here is a result, like any step's
    doc, problem = read_document(first, result)
    facts.node_ssh = {"from": first.name, **(doc or {"error": problem})}


def listening_port(listener: Dict) -> Optional[int]:
    """A port the node's listener serves (the link test talks to it)."""
    ports = listener["ports"]["ephemeral"]
    if ports:
        return ports[0]
    bound = [e["port"] for e in listener.get("launch") or [] if e.get("bound")]
    return bound[0] if bound else None


def _links(cluster: Cluster, facts: NetFacts, by_name: Dict[str, Node], listening: List[str],
           options: NetOptions) -> None:
    for pairs in round_robin(listening):
        partner = dict(pairs)

        def link_step(transport: Transport, node: Node, partner: Dict[str, str] = partner) -> NodeResult:
            other = partner[node.name]
            port = listening_port(facts.listeners[other])
            args = ["link", "--host", other, "--port", str(port), "--stream-s", f"{options.stream_s:g}"]
            result = transport.run(inline_command(interpreter(node), PROGRAM, args), options.stream_s + 30)
            doc, problem = read_document(node, result)
            entry = {"from": node.name, "to": other}
            entry.update({"rtt_ms": doc.get("rtt_ms"), "mbit_s": doc.get("mbit_s")} if doc else {"error": problem})
            facts.links.append(entry)
            return result

        cluster.each(link_step, [by_name[a] for a, b in pairs if listening_port(facts.listeners[b])])
