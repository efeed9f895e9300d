"""The judges of `clustercheck net`: pure functions from NetFacts to Findings.

Reach, own names, the training interface's existence and MTU are the node layer's
(clustercheck/node/judges.py), judged once per run; the mesh, the rendezvous port, peer
name resolution, the interface to set, node-to-node SSH and link quality are judged here.
The rows of docs/failures.md each rule is for are named in its docstring.
"""

from __future__ import annotations

import ipaddress
import statistics
from typing import Callable, Dict, List, Sequence, Set, Tuple

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status, run_judges
from clustercheck.node.facts import get, is_loopback
from clustercheck.node.judges import nodes_finding
from clustercheck.stages.net.facts import NetFacts


def _port_range(facts: NetFacts, node: str) -> str:
    low, high = get(facts.listeners.get(node), "ephemeral_range", default=[32768, 60999])
    return f"{low}-{high}"


EVIDENCE_MAX = 20


def _capped(lines: List[str]) -> List[str]:
    return lines[:EVIDENCE_MAX] + ([f"... and {len(lines) - EVIDENCE_MAX} more"] if len(lines) > EVIDENCE_MAX else [])


def outbound_culprits(facts: NetFacts) -> Dict[str, str]:
    """Nodes none of whose attempts (to two or more peers) succeeded: their own outbound side is
    blocked, not every peer's inbound. node -> the state its attempts ended in."""
    tried: Dict[str, Set[str]] = {}
    states: Dict[str, Set[str]] = {}
    for source, target, _, state, _ in facts.attempts():
        tried.setdefault(source, set()).add(target)
        states.setdefault(source, set()).add(state)
    return {source: "/".join(sorted(states[source])) for source, targets in tried.items()
            if len(targets) > 1 and "open" not in states[source]}


def mesh(facts: NetFacts) -> List[Finding]:
    """Rows 1-2: every node reaches the ports of the nodes the plan gives it, both directions.

    One finding per cause, hosts folded: a node that drops or rejects inbound (every peer that
    tried it failed), a node that cannot connect out (it failed to every peer it tried), and what
    is left, per target. The launch ports (MASTER_PORT, the rendezvous port) are judged by
    launch_ports()."""
    rows = facts.attempts()
    if not rows:
        return []
    plan = facts.plan.describe(len(rows)) if facts.plan else f"{len(rows)} connection attempts"
    retried = (f"; {facts.recovered} failed at first and were open when tried again (slow to answer, not blocked)"
               if facts.recovered else "")
    failed = [r for r in facts.failed_attempts() if r[2] not in facts.launch_ports]
    if not failed:
        return [Finding("net.mesh", Status.OK,
                        f"all connections open between {len(facts.mesh)} nodes: {plan}{retried}")]
    findings = []
    outbound = outbound_culprits(facts)
    if outbound:
        groups: Dict[str, List[str]] = {}
        for node, state in outbound.items():
            groups.setdefault(state, []).append(node)
        for state, nodes in sorted(groups.items()):
            targets = {n: sorted({r[1] for r in rows if r[0] == n}) for n in nodes}
            findings.append(Finding(
                "net.outbound", Status.FAIL,
                f"{fold(nodes)} cannot open TCP connections to any peer ({state}; "
                f"{min(len(t) for t in targets.values())}+ peers tried each)",
                _capped([f"{n} -> {fold(t)}: {state}" for n, t in sorted(targets.items())]),
                f"allow outbound TCP on {fold(nodes)} (iptables -S OUTPUT, nft list ruleset): every rank connects out "
                f"to its peers and to the master", nodes))
    # Inbound: every tester (nodes that can connect out) failed on the target's port.
    testers: Dict[Tuple[str, int], Set[str]] = {}
    for source, target, port, _, _ in rows:
        if source not in outbound and port not in facts.launch_ports:
            testers.setdefault((target, port), set()).add(source)
    by_target: Dict[Tuple[str, int, str], Set[str]] = {}
    for source, target, port, state, _ in failed:
        if source not in outbound:
            by_target.setdefault((target, port, state), set()).add(source)
    inbound: Dict[str, Dict[str, List[int]]] = {}
    explained: Set[Tuple[str, str, int]] = set()
    for (target, port, state), froms in sorted(by_target.items()):
        peers = testers.get((target, port), set())
        if len(peers) > 1 and peers <= froms:
            inbound.setdefault(state, {}).setdefault(target, []).append(port)
            explained.update((s, target, port) for s in peers)
    for state, targets in sorted(inbound.items()):
        nodes = sorted(targets, key=[n.name for n in facts.nodes].index)
        one = len(nodes) == 1
        verb = {"filtered": "drops" if one else "drop", "refused": "rejects" if one else "reject"}.get(
            state, "cannot take")
        evidence = [f"{fold(sorted(testers[(t, p)]))} -> {t}:{p}: {state}" for t in nodes for p in sorted(targets[t])]
        ports = sorted(targets[nodes[0]])
        where = f" on port{'s' if len(ports) > 1 else ''} {', '.join(map(str, ports))}" if one else ""
        findings.append(Finding(
            "net.inbound", Status.FAIL, f"{fold(nodes)} {verb} inbound TCP{where} from every peer that tried ({state})",
            _capped(evidence),
            _open_remedy(facts, fold(nodes), []), nodes))
    rest = [r for r in failed if r[0] not in outbound and (r[0], r[1], r[2]) not in explained]
    pairs: Dict[Tuple[str, str], Dict[str, List[int]]] = {}
    for source, target, port, state, _ in rest:
        pairs.setdefault((target, state), {}).setdefault(source, []).append(port)
    for (target, state), sources in sorted(pairs.items()):
        ports = sorted({p for ps in sources.values() for p in ps})
        findings.append(Finding(
            "net.pair", Status.FAIL,
            f"{fold(sorted(sources))} -> {target}: port{'s' if len(ports) > 1 else ''} "
            f"{', '.join(map(str, ports))} {state}",
            _capped([f"{s} -> {target}:{p}: {state}" for s, ps in sorted(sources.items()) for p in sorted(ps)]),
            _open_remedy(facts, target, ports) + f" (other peers reach {target}: look for a rule naming "
                                                 f"{fold(sorted(sources))} on {target}, or a route between them)",
            sorted(sources) + [target]))
    return findings


def _open_remedy(facts: NetFacts, target: str, ports: Sequence[int]) -> str:
    return (f"allow TCP from the other nodes on {target}: the rendezvous port and the ephemeral range "
            f"{_port_range(facts, target)} that NCCL, Gloo and the c10d store listen on (e.g. iptables -I INPUT -p "
            f"tcp -s <cluster subnet> -j ACCEPT); or narrow the range with sysctl net.ipv4.ip_local_port_range "
            f"and open just that")


def _held(bind: Dict) -> str:
    holder = bind.get("holder") or {}
    return (f" (held by pid {holder['pid']}: {holder.get('command')})" if holder.get("pid")
            else f" ({holder['command']})" if holder.get("command") else "")


def _master_port(facts: NetFacts, bind: Dict, port: int) -> List[Finding]:
    """The master this run would use (the first node, as Slurm's and DeepSpeed's launchers pick it):
    the port is free there, and every worker reaches it."""
    master = facts.master
    kind = "master" if port == facts.launch_ports[0] else "rdzv"   # MASTER_PORT, or the c10d rendezvous
    if not bind.get("bound"):
        holder = bind.get("holder") or {}
        return [Finding(f"net.{kind}.free", Status.FAIL, f"port {port} on {master} is in use{_held(bind)}",
                        [f"{master}: bind {port}: {bind.get('error')}"],
                        f"stop the leftover process{' (kill ' + str(holder['pid']) + ')' if holder.get('pid') else ''}"
                        f", or use another port (--master-port / --rdzv-port here, MASTER_PORT / --rdzv-endpoint for "
                        f"the job)", [master])]
    findings = [Finding(f"net.{kind}.free", Status.OK, f"port {port} is free on {master}")]
    to_master = [r for r in facts.attempts() if r[1] == master and r[2] == port]
    failed = [r for r in to_master if r[3] != "open"]
    if failed:
        findings.append(Finding(
            f"net.{kind}.reach", Status.FAIL,
            f"{fold([r[0] for r in failed])} cannot reach the rendezvous port {master}:{port} "
            f"({', '.join(sorted({r[3] for r in failed}))})",
            [f"{r[0]} -> {master} ({r[4].get('address', '?')}):{port}: {r[3]}" for r in failed],
            f"open TCP port {port} on {master} to the other nodes (e.g. iptables -I INPUT -p tcp "
            f"--dport {port} -s <cluster subnet> -j ACCEPT); MASTER_ADDR must be an address of "
            f"{master} that every node routes to, the same on all nodes", [r[0] for r in failed]))
    elif to_master:
        findings.append(Finding(f"net.{kind}.reach", Status.OK, f"every node reaches {master}:{port}"))
    return findings


def launch_ports(facts: NetFacts) -> List[Finding]:
    """Rows 3 and 17: MASTER_PORT and the rendezvous port, on every node. The master of this run
    fails on them; another node warns, named as one that cannot be MASTER_ADDR: Slurm makes the
    first node of each allocation the master, DeepSpeed the first host of the hostfile."""
    findings: List[Finding] = []
    others: Dict[str, List[str]] = {}
    failed_to: Dict[Tuple[str, int], List[Tuple[str, str, int, str, Dict]]] = {}
    for row in facts.failed_attempts():   # once: at 1,000 nodes the attempts number millions
        if row[2] in facts.launch_ports:
            failed_to.setdefault((row[1], row[2]), []).append(row)
    outbound = outbound_culprits(facts)   # judged by mesh(): their failures say nothing of the target
    testers: Dict[Tuple[str, int], Set[str]] = {}
    for source, target, port, _, _ in facts.attempts():
        if port in facts.launch_ports and source not in outbound:
            testers.setdefault((target, port), set()).add(source)
    for node in [n.name for n in facts.nodes if n.name in facts.listeners]:
        for bind in facts.launch(node):
            port = bind.get("port")
            if node == facts.master:
                findings += _master_port(facts, bind, port)
                continue
            if not bind.get("bound"):
                others.setdefault(node, []).append(f"port {port} in use{_held(bind)}")
                continue
            failed = [r for r in failed_to.get((node, port), []) if r[0] not in outbound]
            peers = testers.get((node, port), set())
            if failed and len(failed) == len(peers) and len({r[3] for r in failed}) == 1:
                others.setdefault(node, []).append(f"inbound {port} {failed[0][3]}")
            elif failed:
                others.setdefault(node, []).append(f"inbound {port} {failed[0][3]} from {fold([r[0] for r in failed])}")
    for node, problems in others.items():
        findings.append(Finding(
            "net.launch", Status.WARN, f"{node} cannot be MASTER_ADDR: {'; '.join(problems)}",
            [f"{node}: {p}" for p in problems],
            f"open TCP {', '.join(map(str, facts.launch_ports))} on {node} to the other nodes (or free them), or "
            f"keep it from being the first node of an allocation or hostfile: the first node is the master",
            [node]))
    if not others and len(facts.listeners) > 1:
        findings.append(Finding("net.launch", Status.OK, f"ports {', '.join(map(str, facts.launch_ports))} are free "
                                                         f"and reachable on every node: any may be the master"))
    return findings


def peer_names(facts: NetFacts) -> List[Finding]:
    """Rows 4 and 21: each node's name, resolved on every other node, is an address that node has."""
    own: Dict[str, Set[str]] = {}
    for name, doc in facts.listeners.items():
        addrs = set()
        for iface in (get(doc, "net", "interfaces", default={}) or {}).values():
            addrs.update(a.split("/")[0] for a in iface.get("ipv4", []) + iface.get("ipv6", []))
        own[name] = addrs
    bad: Dict[str, str] = {}
    culprits: Set[str] = set()
    for source, doc in facts.mesh.items():
        for name, entry in sorted((doc.get("resolved") or {}).items()):
            target = name if name in own else next((n for n, d in facts.listeners.items()
                                                    if get(d, "host", "hostname") == name), None)
            if target is None or target == source:
                continue
            addrs = entry.get("addresses") or []
            if not addrs:
                bad[f"{source}: {name}"] = f"does not resolve ({entry.get('error', 'no answer')})"
                culprits.add(source)
            elif own.get(target) and not any(a in own[target] and not is_loopback(a) for a in addrs):
                bad[f"{source}: {name}"] = f"resolves to {', '.join(addrs)}, not an address of {target}"
                culprits.add(target)
    if not bad:
        return [Finding("net.names", Status.OK, "every node resolves every peer's name to that peer's address")]
    evidence = [f"{where} {what}" for where, what in sorted(bad.items())]
    return [Finding("net.names", Status.FAIL, f"peer names resolve wrongly or not at all ({len(bad)} lookups)",
                    evidence[:20] + ([f"... and {len(evidence) - 20} more"] if len(evidence) > 20 else []),
                    "make /etc/hosts (or DNS) identical on every node, each name mapping to the node's address on "
                    "the training network", sorted(culprits))]


def interfaces(facts: NetFacts) -> List[Finding]:
    """Rows 1, 13: the interface that routes to the peers, what to set, and two interfaces on one subnet."""
    probed = [p for p in facts.probed if p.facts is not None]
    chosen = {p.name: p.ifname for p in probed}
    chosen = {n: i for n, i in chosen.items() if i}
    findings = []
    if chosen:
        values = sorted(set(chosen.values()))
        if len(values) == 1:
            findings.append(Finding("net.ifname", Status.OK,
                                    f"the peers are reached through {values[0]} on every node: set "
                                    f"NCCL_SOCKET_IFNAME={values[0]} GLOO_SOCKET_IFNAME={values[0]}"))
        else:
            groups: Dict[str, List[str]] = {}
            for node, iface in chosen.items():
                groups.setdefault(iface, []).append(node)
            findings.append(Finding(
                "net.ifname", Status.WARN, "the peers are reached through different interfaces on different nodes",
                [f"{fold(nodes)}: {iface}" for iface, nodes in groups.items()],
                f"set GLOO_SOCKET_IFNAME per node to the value above, and NCCL_SOCKET_IFNAME={','.join(values)}",
                [n for iface, nodes in groups.items() if iface != values[0] for n in nodes]))
    same_subnet = {}
    for p in probed:
        subnets: Dict[str, List[str]] = {}
        for iface, info in (get(p.facts, "net", "interfaces", default={}) or {}).items():
            if iface == "lo" or info.get("state") not in ("up", "unknown"):
                continue
            for addr in info.get("ipv4", []):
                subnets.setdefault(_network(addr), []).append(iface)
        clash = {net: names for net, names in subnets.items() if len(set(names)) > 1}
        if clash:
            same_subnet[p.name] = "; ".join(f"{', '.join(sorted(set(n)))} on {net}" for net, n in clash.items())
    findings += nodes_finding(
        "net.subnet", Status.WARN, same_subnet, "two interfaces on one subnet on {nodes}",
        "give each interface its own subnet, or set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME so the route order "
        "cannot decide", "no node has two interfaces on one subnet")
    return findings


def _network(cidr: str) -> str:
    return str(ipaddress.ip_interface(cidr).network)


def node_ssh(facts: NetFacts) -> List[Finding]:
    """Row 19: the pdsh / DeepSpeed launcher logs in from the first node to every other, non-interactively."""
    if facts.node_ssh is None:
        return []
    source = facts.node_ssh["from"]
    if facts.node_ssh.get("error"):
        return [Finding("net.ssh", Status.FAIL, f"could not test SSH from {source}", [facts.node_ssh["error"]],
                        "check the interpreter on the first node", [source])]
    bad = {r["host"]: r.get("error") or f"exit {r.get('exit_code')}" for r in facts.node_ssh["results"]
           if not r.get("ok")}
    if not bad:
        return [Finding("net.ssh", Status.OK, f"{source} logs in to every other node without a password")]
    texts = " ".join(bad.values())
    if "Permission denied" in texts:
        remedy = f"install {source}'s public key (ssh-copy-id) in the other nodes' authorized_keys"
    elif "Host key verification failed" in texts:
        remedy = f"add the nodes' host keys to {source}'s known_hosts (ssh-keyscan, after checking them)"
    else:
        remedy = f"make sshd reachable from {source} on the other nodes"
    return nodes_finding("net.ssh", Status.FAIL, bad,
                                    f"{source} cannot log in without a password to {{nodes}} (BatchMode)",
                                    remedy + "; DeepSpeed's pdsh launcher needs it, torchrun does not", "")


def links(facts: NetFacts) -> List[Finding]:
    """Link quality: name the node whose every link is slow, or whose round trips are long."""
    if not facts.links:
        return []
    errors = {f"{e['from']}->{e['to']}": e["error"] for e in facts.links if e.get("error")}
    findings = []
    if errors:
        findings += nodes_finding("net.link", Status.FAIL, errors, "link test failed for {nodes}",
                                             "see the mesh findings: the pair cannot talk", "")
    good = [e for e in facts.links if e.get("mbit_s")]
    if len(good) < 3:  # with fewer pairs no node can be singled out
        if good and not errors:
            findings.append(Finding("net.link", Status.OK, "link: " + "; ".join(
                f"{e['from']}->{e['to']} {e['mbit_s']:.0f} Mb/s, {e['rtt_ms']:.2f} ms" for e in good)))
        return findings
    median_mbit = statistics.median(e["mbit_s"] for e in good)
    median_rtt = statistics.median(e["rtt_ms"] for e in good)
    per_node: Dict[str, List[Dict]] = {}
    for e in good:
        per_node.setdefault(e["from"], []).append(e)
        per_node.setdefault(e["to"], []).append(e)
    slow = {}
    for node, entries in per_node.items():
        node_mbit = statistics.median(e["mbit_s"] for e in entries)
        node_rtt = statistics.median(e["rtt_ms"] for e in entries)
        if node_mbit < 0.5 * median_mbit:
            slow[node] = f"{node_mbit:.0f} Mb/s on its links (median of all pairs {median_mbit:.0f} Mb/s)"
        elif node_rtt > 3 * median_rtt and node_rtt - median_rtt > 0.5:
            slow[node] = f"round trip {node_rtt:.2f} ms (median of all pairs {median_rtt:.2f} ms)"
    findings += nodes_finding(
        "net.link", Status.WARN, slow, "slow links on {nodes}",
        "check the node's NIC (ethtool: speed, errors), its cable and switch port, and any traffic shaping (tc)",
        f"link speeds even: median {median_mbit:.0f} Mb/s, round trip {median_rtt:.2f} ms over {len(good)} pairs")
    return findings


JUDGES: Sequence[Callable[[NetFacts], List[Finding]]] = [
    launch_ports, mesh, peer_names, interfaces, node_ssh, links,
]


def judge_net(facts: NetFacts) -> List[Finding]:
    return run_judges(JUDGES, facts)
