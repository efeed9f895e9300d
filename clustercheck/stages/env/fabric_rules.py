"""RDMA ports (InfiniBand and RoCE), judged per port: down ports, links without a subnet
manager, ports trained at a lower rate, error counters. Rows 9 and 26 of docs/failures.md.

A port that is down is a finding on its own, not only when nodes differ. A port down where
the same port is up on other nodes, one NCCL_IB_HCA asks for, or one whose link is up without
a subnet manager, fails. A port down on every node that has it warns: it may be unused (a dual-port HCA's
second port) or uncabled everywhere; naming the ports NCCL should use in NCCL_IB_HCA says
which, and then a port left out is no finding.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional, Tuple

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.node.facts import get
from clustercheck.node.judges import nodes_finding
from clustercheck.stages.env.rules import EnvContext

# Counters count since they were cleared (boot, or the last `perfquery -x -R`). A link that went down or
# retrained needs looking at however busy the port is: that many make a warning, listed first.
LINK_EVENTS = {"link_downed": 1, "link_error_recovery": 10}
# Error counters, and the traffic each is judged against: a handful over a busy port's life is noise
# (the H100 recording: 15 buffer overruns in 3.2e11 packets received), so one warns only at this count
# and at ERROR_RATE_WARN of the packets, or at the count alone where the probe read no traffic.
ERROR_COUNTS = {"symbol_error": 100, "port_rcv_errors": 100, "port_rcv_remote_physical_errors": 100,
                "local_link_integrity_errors": 10, "excessive_buffer_overrun_errors": 10}
TRAFFIC = "port_rcv_packets"   # all of ERROR_COUNTS are errors on what the port received
ERROR_RATE_WARN = 1e-6         # one packet in a million


def kind(port: Dict) -> str:
    return "RoCE" if port.get("link_layer") == "Ethernet" else "InfiniBand"


def port_name(port: Dict) -> str:
    return f"{port.get('device')}/{port.get('port')}"


NAMED, EXCLUDED, UNSAID = "named", "excluded", "unsaid"


def hca_mention(env_value: Optional[str], port: Dict) -> str:
    """What NCCL_IB_HCA (e.g. "mlx5_0:1,mlx5_1", "^mlx5_3", "=mlx5_0") says of this port: NAMED
    (NCCL is told to use it), EXCLUDED (told not to, or not in a list of the ports to use), or
    UNSAID (unset, or an exclusion list that does not name it: NCCL uses it when it is active)."""
    if not env_value or not env_value.strip():
        return UNSAID
    text = env_value.strip()
    exclude = text.startswith("^")
    body = text.lstrip("^")
    exact = body.startswith("=")
    named = False
    for item in body.lstrip("=").split(","):
        device, _, number = item.strip().partition(":")
        hit = port.get("device") == device if exact else str(port.get("device", "")).startswith(device)
        if device and hit and (not number or number == str(port.get("port"))):
            named = True
    if exclude:
        return EXCLUDED if named else UNSAID
    return NAMED if named else EXCLUDED


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
                mention = hca_mention(wanted_env, port)
                text = f"{kind(port)} {name} is {state or 'in no state'} (physical: {port.get('phys_state')})"
                if port.get("phys_state") == "LinkUp":
                    text += ": the link is up but no subnet manager configured it"
                if mention == EXCLUDED:
                    continue   # NCCL_IB_HCA keeps NCCL off it
                if mention == NAMED or name in active_somewhere or port.get("phys_state") == "LinkUp":
                    down_fail.setdefault(p.name, []).append(text + (" and NCCL_IB_HCA names it"
                                                                    if mention == NAMED else ""))
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
        "RDMA ports down on every node that has them (unused, or uncabled everywhere?): {nodes}",
        "cable them; or, if they are not meant for training (a dual-port HCA's second port), name the ports "
        "training uses in NCCL_IB_HCA (e.g. mlx5_0:1,mlx5_1:1): NCCL then leaves these alone and so does this "
        "check", "")
    findings += nodes_finding(
        "rdma.port.rate", Status.WARN, {n: "; ".join(t) for n, t in slow.items()},
        "RDMA ports at a lower rate than the same port elsewhere on {nodes}",
        "reseat or replace the cable or transceiver; check the switch port's speed (ibstat, ibportstate)", "")
    if not findings and any(by_node.values()):
        count = sum(1 for ports_ in by_node.values() for q in ports_ if q.get("state") == "ACTIVE")
        summary = f"{count} RDMA ports on {fold(list(by_node))} are ACTIVE at the same rate as elsewhere"
        if count < sum(map(len, by_node.values())):
            summary += " (the others excluded by NCCL_IB_HCA)"
        else:
            summary = "all " + summary
        findings.append(Finding("rdma.ports", Status.OK, summary))
    return findings


def raised_counters(counters: Dict[str, int]) -> List[str]:
    """What needs looking at in one port's counters, link downs first: 'link_downed 255',
    'port_rcv_errors 40000000 (1.3e-04 of 317548853677 packets received)'."""
    raised = [f"{name} {counters[name]}" for name, least in LINK_EVENTS.items() if counters.get(name, 0) >= least]
    packets = counters.get(TRAFFIC)
    for name, least in ERROR_COUNTS.items():
        count = counters.get(name, 0)
        if count < least:
            continue
        if not packets:   # traffic not read (or none): the count alone
            raised.append(f"{name} {count}")
        elif count / packets >= ERROR_RATE_WARN:
            raised.append(f"{name} {count} ({count / packets:.1e} of {packets} packets received)")
    return raised


def counters(ctx: EnvContext) -> List[Finding]:
    """Error counters of active ports: a flapping or dirty link drops NCCL's connections. Ports whose
    link went down come first, so that a Nagios line of 200 characters still names them."""
    bad: Dict[str, List[str]] = {}
    for node, ports_ in _ports(ctx).items():
        texts: List[Tuple[bool, str]] = []
        for port in ports_:
            if port.get("state") != "ACTIVE":   # a down port's counters tell of its going down, judged above
                continue
            port_counters = {c: v for c, v in (port.get("counters") or {}).items() if isinstance(v, int)}
            raised = raised_counters(port_counters)
            if raised:
                went_down = any(port_counters.get(c, 0) >= least for c, least in LINK_EVENTS.items())
                texts.append((not went_down, f"{port_name(port)}: " + ", ".join(raised)))
        if texts:
            bad[node] = [text for _, text in sorted(texts, key=lambda t: t[0])]
    return nodes_finding(
        "rdma.counters", Status.WARN, {n: "; ".join(t) for n, t in bad.items()},
        "RDMA port error counters raised on {nodes}",
        "the link flapped or is dirty: check the cable and switch port; clear the counters (perfquery -x -R) "
        "and look again after a bench run", "")
