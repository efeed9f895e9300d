"""RDMA ports (InfiniBand and RoCE), judged per port: down ports, links without a subnet
manager, ports trained at a lower rate, error counters. Rows 9 and 26 of docs/failures.md.

A port that is down is a finding on its own, not only when nodes differ. A port down on
every node may be one nobody cabled: a warning, silenced by naming the ports NCCL should use
in NCCL_IB_HCA. A port down where the same port is up on other nodes, or one NCCL_IB_HCA
asks for, fails.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional, Tuple

from clustercheck.env.rules import EnvContext
from clustercheck.inventory import fold
from clustercheck.node.facts import get
from clustercheck.node.judges import nodes_finding
from clustercheck.result import Finding, Status

# Counters that mean a dirty or flapping link, and how many since the counters were cleared
# (they count from boot or the last `perfquery -x -R`) make a warning.
COUNTER_WARN = {"link_downed": 1, "link_error_recovery": 10, "symbol_error": 100, "port_rcv_errors": 100,
                "port_rcv_remote_physical_errors": 100, "local_link_integrity_errors": 10,
                "excessive_buffer_overrun_errors": 10}


def kind(port: Dict) -> str:
    return "RoCE" if port.get("link_layer") == "Ethernet" else "InfiniBand"


def port_name(port: Dict) -> str:
    return f"{port.get('device')}/{port.get('port')}"


def hca_wanted(env_value: Optional[str], port: Dict) -> Optional[bool]:
    """Does NCCL_IB_HCA (e.g. "mlx5_0:1,mlx5_1", "^mlx5_3", "=mlx5_0") ask for this port?
    None when unset (NCCL then uses every active port)."""
    if not env_value:
        return None
    text = env_value.strip()
    exclude = text.startswith("^")
    exact = text.lstrip("^").startswith("=")
    named = False
    for item in text.lstrip("^").lstrip("=").split(","):
        device, _, number = item.strip().partition(":")
        hit = port.get("device") == device if exact else str(port.get("device", "")).startswith(device)
        if hit and (not number or number == str(port.get("port"))):
            named = True
    return not named if exclude else named


def _ports(ctx: EnvContext) -> Dict[str, List[Dict]]:
    return {p.name: get(p.facts, "infiniband") or [] for p in ctx.ok if get(p.facts, "infiniband") is not None}


def ports(ctx: EnvContext) -> List[Finding]:
    """Each RDMA port not ACTIVE, each port at a lower rate than the same port elsewhere."""
    by_node = _ports(ctx)
    active_somewhere = {port_name(q) for ports_ in by_node.values() for q in ports_ if q.get("state") == "ACTIVE"}
    rates = Counter((port_name(q), q.get("rate")) for ports_ in by_node.values() for q in ports_
                    if q.get("state") == "ACTIVE")
    down_fail: Dict[str, List[str]] = {}
    down_warn: Dict[str, List[str]] = {}
    slow: Dict[str, List[str]] = {}
    for p in ctx.ok:
        wanted_env = get(p.facts, "env", "NCCL_IB_HCA")
        for port in by_node.get(p.name, []):
            name, state = port_name(port), port.get("state")
            if state != "ACTIVE":
                wanted = hca_wanted(wanted_env, port)
                text = f"{kind(port)} {name} is {state or 'in no state'} (physical: {port.get('phys_state')})"
                if port.get("phys_state") == "LinkUp":
                    text += ": the link is up but no subnet manager configured it"
                if wanted is False:
                    continue
                elif wanted or name in active_somewhere or port.get("phys_state") == "LinkUp":
                    down_fail.setdefault(p.name, []).append(text + (" and NCCL_IB_HCA names it" if wanted else ""))
                else:
                    down_warn.setdefault(p.name, []).append(text)
                continue
            usual = max((r for (n, r) in rates if n == name), key=lambda r: rates[(name, r)])
            if port.get("rate") != usual and rates[(name, port.get("rate"))] < rates[(name, usual)]:
                slow.setdefault(p.name, []).append(f"{name} runs at {port.get('rate')} (others: {usual})")
    findings = nodes_finding(
        "rdma.port.down", Status.FAIL, {n: "; ".join(t) for n, t in down_fail.items()},
        "RDMA ports down on {nodes}",
        "bring the port up (ibstat; check the cable and the switch port; start opensm or the fabric's subnet "
        "manager for ports stuck in INIT), or leave the node out; NCCL hangs or slows on a missing rail", "")
    findings += nodes_finding(
        "rdma.port.unused", Status.WARN, {n: "; ".join(t) for n, t in down_warn.items()},
        "RDMA ports down on every node that has them: {nodes}",
        "cable them, or name the ports training uses in NCCL_IB_HCA (e.g. mlx5_0:1,mlx5_1:1) to say these are "
        "unused", "")
    findings += nodes_finding(
        "rdma.port.rate", Status.WARN, {n: "; ".join(t) for n, t in slow.items()},
        "RDMA ports at a lower rate than the same port elsewhere on {nodes}",
        "reseat or replace the cable or transceiver; check the switch port's speed (ibstat, ibportstate)", "")
    if by_node and not findings and any(by_node.values()):
        count = sum(len(v) for v in by_node.values())
        findings.append(Finding("rdma.ports", Status.OK, f"all {count} RDMA ports on {fold(list(by_node))} are "
                                                         f"ACTIVE at the same rate as elsewhere"))
    return findings


def counters(ctx: EnvContext) -> List[Finding]:
    """Error counters of active ports: a flapping or dirty link drops NCCL's connections."""
    bad: Dict[str, List[str]] = {}
    for node, ports_ in _ports(ctx).items():
        for port in ports_:
            raised: List[Tuple[str, int]] = [(c, v) for c, v in (port.get("counters") or {}).items()
                                             if c in COUNTER_WARN and v >= COUNTER_WARN[c]]
            if raised:
                bad.setdefault(node, []).append(f"{port_name(port)}: " + ", ".join(f"{c} {v}" for c, v in raised))
    return nodes_finding(
        "rdma.counters", Status.WARN, {n: "; ".join(t) for n, t in bad.items()},
        "RDMA port error counters raised on {nodes}",
        "the link flapped or is dirty: check the cable and switch port; clear the counters (perfquery -x -R) "
        "and look again after a bench run", "")
