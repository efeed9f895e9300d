"""The judges every stage shares: could each node be probed, do names resolve, does the training
interface exist with one MTU everywhere. Pure functions over the probed nodes.

Each rule returns Findings (an OK one when it passed, so a report shows what was checked);
docs/failures.md rows each rule exists for are named in its docstring.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence

from clustercheck.core.compare import group_by_value
from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status, run_judges
from clustercheck.node.facts import Probed, get, interpreter, is_loopback
from clustercheck.transport.base import REMEDIES, Outcome


def nodes_finding(check: str, status: Status, bad: Dict[str, str], summary: str, remedy: str,
                  ok_summary: str) -> List[Finding]:
    """A per-node rule's outcome: one finding naming the bad nodes with their evidence, or one OK."""
    if not bad:
        return [Finding(check, Status.OK, ok_summary)] if ok_summary else []
    groups: Dict[str, List[str]] = {}
    for node, evidence in bad.items():
        groups.setdefault(evidence, []).append(node)
    evidence = [f"{fold(nodes)}: {text}" for text, nodes in groups.items()]
    return [Finding(check, status, summary.format(nodes=fold(list(bad)), count=len(bad)), evidence, remedy,
                    list(bad))]


def _documented(probed: Sequence[Probed]) -> List[Probed]:
    return [p for p in probed if p.facts is not None]


def unreachable(probed: Sequence[Probed]) -> List[Finding]:
    """Nodes with no document: not reached, or the probe did not run there (row 7)."""
    findings = []
    for p in probed:
        if p.facts is not None:
            continue
        outcome = p.outcome
        if outcome.reached and outcome is not Outcome.TIMED_OUT:
            remedy = (f"name the interpreter that trains there (python= in the nodes file, or --python): "
                      f"non-interactive SSH found no working {interpreter(p.node)}")
            summary = f"{p.name}: the probe did not run"
        else:
            remedy = REMEDIES.get(outcome, "") or "check the node"
            summary = f"{p.name}: {outcome.value}"
        findings.append(Finding("reach", Status.FAIL, summary, [p.problem], remedy, [p.name]))
    if not findings:
        findings.append(Finding("reach", Status.OK, f"probed all {len(probed)} nodes"))
    return findings


def hostnames(probed: Sequence[Probed]) -> List[Finding]:
    """Rows 4 and 15: unique hostnames that resolve to a reachable (non-loopback) address."""
    ok = _documented(probed)
    names = {p.name: get(p.facts, "host", "hostname") for p in ok if get(p.facts, "host", "hostname")}
    grouping = group_by_value(names, [p.name for p in probed])
    dupes = {node: f"hostname {value}" for value, nodes in grouping.groups if len(nodes) > 1 for node in nodes}
    findings = nodes_finding(
        "hostname.unique", Status.FAIL, dupes, "{count} nodes share a hostname: {nodes}",
        "give every node its own hostname; NCCL and torchrun treat nodes with the same name as one host",
        f"hostnames are unique on {len(names)} nodes")
    bad, loopback = {}, False
    for p in ok:
        for name, entry in (get(p.facts, "host", "resolves", default={}) or {}).items():
            addrs = entry.get("addresses") or []
            if entry.get("error"):
                bad[p.name] = f"{name} does not resolve ({entry['error']})"
            elif addrs and all(is_loopback(a) for a in addrs):
                loopback = True
                if len(probed) > 1:   # one node trains over loopback
                    bad[p.name] = f"{name} resolves to {', '.join(addrs)}"
            if p.name in bad:
                break
    # One node trains over loopback; as soon as there is a second, peers must reach this address.
    # A name that does not resolve at all breaks Gloo even alone.
    findings += nodes_finding(
        "hostname.resolves", Status.FAIL if len(probed) > 1 else Status.WARN, bad,
        "own hostname resolves to loopback or not at all on {nodes}",
        "map the hostname to the node's network address in /etc/hosts (not 127.0.1.1) or DNS; Gloo binds to "
        "what gethostname() resolves to. Or set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME",
        "the node's own hostname resolves (to loopback: enough for a one-node cluster)" if loopback and len(probed) == 1
        else "every node's own hostname resolves to a network address")
    return findings


def training_mtu(probed: Sequence[Probed]) -> List[Finding]:
    """Row 12: the MTU of the interface training uses must be the same everywhere; row 14: it must exist."""
    ifnames, missing, mtus = {}, {}, {}
    for p in _documented(probed):
        ifname = p.ifname
        if not ifname:
            continue
        ifnames[p.name] = ifname
        facts = get(p.facts, "net", "interfaces", ifname)
        if facts is None:
            missing[p.name] = f"{ifname}: no such interface"
        else:
            mtus[p.name] = str(facts.get("mtu"))
    findings = nodes_finding("interface.exists", Status.FAIL, missing, "training interface missing on {nodes}",
                             "name an interface that exists (ip -br link) in ifname= / NCCL_SOCKET_IFNAME",
                             "the training interface exists on every node")
    if not mtus:
        return findings
    grouping = group_by_value(mtus, [p.name for p in probed])
    if grouping.uniform:
        findings.append(Finding("interface.mtu", Status.OK, f"MTU {grouping.baseline} on the training interface "
                                                             f"of all {len(mtus)} nodes"))
        return findings
    odd = "; ".join(f"{fold(nodes)} has {value}" for value, nodes in grouping.odd)
    findings.append(Finding(
        "interface.mtu", Status.FAIL, f"MTU differs on the training interface: {odd} (the others: {grouping.baseline})",
        [f"{fold(nodes)}: MTU {value} on {', '.join(sorted({ifnames[n] for n in nodes}))}"
         for value, nodes in grouping.groups],
        f"set MTU {grouping.baseline} on every node's training interface (ip link set dev IF mtu N, and in the "
        f"network config)", grouping.odd_nodes))
    return findings


def socket_ifname(probed: Sequence[Probed]) -> List[Finding]:
    """Row 14: *_SOCKET_IFNAME must name interfaces that exist; Gloo does not take NCCL's ^ syntax."""
    ok = _documented(probed)
    bad = {}
    for p in ok:
        interfaces = get(p.facts, "net", "interfaces", default={}) or {}
        for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            value = get(p.facts, "env", var)
            if not value:
                continue
            if var.startswith("GLOO") and value.startswith("^"):
                bad[p.name] = f"{var}={value}: Gloo takes interface names, not ^exclusions"
            elif not value.startswith("^"):
                names = [v.lstrip("=") for v in value.split(",") if v]
                absent = [n for n in names if not any(i == n or (not value.startswith("=") and i.startswith(n))
                                                      for i in interfaces)]
                if absent:
                    bad[p.name] = f"{var}={value}: no interface {', '.join(absent)}"
    if not any(get(p.facts, "env", v) for p in ok for v in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")):
        return []
    return nodes_finding("env.ifname", Status.FAIL, bad, "socket interface settings name no interface on {nodes}",
                         "set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to an interface of that node (ip -br addr)",
                         "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME name existing interfaces")


JUDGES: Sequence[Callable[[Sequence[Probed]], List[Finding]]] = [
    unreachable, hostnames, training_mtu, socket_ifname,
]


def judge_nodes(probed: Sequence[Probed]) -> List[Finding]:
    return run_judges(JUDGES, probed)
