"""Whether each node's kernel can hold a neighbour (ARP / IPv6 NDISC) entry for every peer it talks to.

On a flat network the kernel keeps one entry per peer address it sends to, per interface. Above gc_thresh3 (1,024
by default) a new peer is refused: "arp_cache: neighbor table overflow!" in the kernel log, connections that time
out, and a job of more than about 1,000 hosts stalls at init (its rank 0 and TCPStore talk to every node).

The rule: a node needs (nodes in the cluster - 1) x (its physical interfaces with an address of that family, at
least one: a bond or bridge is one network) entries; gc_thresh3 under that FAILs (the table overflows as soon as the run talks to all), gc_thresh2 under it
WARNs (the kernel garbage-collects entries older than 5 s above gc_thresh2: ARP churn at init). The remedy gives
gc_thresh1 = need, gc_thresh2 = 2 x need, gc_thresh3 = 4 x need: headroom for the other hosts on the segment
(storage, gateways) and for the collector's hysteresis. A kernel log line of the overflow is a finding of its own.
Pure: probe documents in, findings out; env judges it (stages/env/judges.py).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.node.facts import get

# The sysctls, their kernel defaults and meaning (Documentation/networking/ip-sysctl.rst, "neigh/default/").
SYSCTLS = {
    "gc_thresh1": (128, "below it the garbage collector never runs"),
    "gc_thresh2": (512, "soft maximum: entries above it are collected after 5 s"),
    "gc_thresh3": (1024, "hard maximum: a new neighbour past it is refused (neighbor table overflow)"),
}
FAMILIES = {"ipv4": ("net.ipv4.neigh.default", "ipv4"), "ipv6": ("net.ipv6.neigh.default", "ipv6")}
TABLES = {"ipv4": "neighbour (ARP) table", "ipv6": "IPv6 neighbour (NDISC) table"}
KERNEL_DEFAULT = SYSCTLS["gc_thresh3"][0]


def interfaces_used(doc: Dict, family: str) -> int:
    """The node's physical interfaces that carry an address of the family (link-local IPv6 not counted), at least
    one: each keeps its own entry per peer (RoCE and IPoIB rails resolve their peers too). Virtual ones (a bond,
    a bridge, docker0, veth) are the node's one network at most, never more peers."""
    count = 0
    for name, iface in (get(doc, "net", "interfaces") or {}).items():
        if iface.get("kind") != "physical" or iface.get("state") not in ("up", "unknown", None):
            continue
        addrs = [a for a in iface.get(family) or [] if not str(a).lower().startswith("fe80")]
        count += bool(addrs)
    return count


def _has_address(doc: Dict, family: str) -> bool:
    return any(a for iface in (get(doc, "net", "interfaces") or {}).values() if iface.get("kind") != "loopback"
               for a in iface.get(family) or [] if not str(a).lower().startswith("fe80"))


def _remedy(prefix: str, need: int) -> str:
    return (f"raise it on every node: sysctl -w {prefix}.gc_thresh1={need} {prefix}.gc_thresh2={2 * need} "
            f"{prefix}.gc_thresh3={4 * need}, and keep it in /etc/sysctl.d/ (a container's host sets it)")


def _judge_family(docs: Dict[str, Dict], num_nodes: int, family: str) -> Tuple[List[Finding], int]:
    prefix, key = FAMILIES[family]
    small: Dict[str, Tuple[Status, str]] = {}
    unread, needs = [], []
    for node, doc in docs.items():
        used = interfaces_used(doc, key)
        if family == "ipv6" and not _has_address(doc, key):
            continue                        # no IPv6 address in use: its table is not asked
        need = (num_nodes - 1) * max(1, used)
        needs.append(need)
        table = get(doc, "net", "neighbour_table", family) or {}
        if "gc_thresh3" not in table:
            unread.append(node)
            continue
        if table["gc_thresh3"] < need:
            small[node] = (Status.FAIL, f"{prefix}.gc_thresh3 = {table['gc_thresh3']}, under the {need} entries "
                                        f"it needs ({num_nodes - 1} peers x {max(1, used)} interface(s))")
        elif table.get("gc_thresh2", need) < need:
            small[node] = (Status.WARN, f"{prefix}.gc_thresh2 = {table['gc_thresh2']}, under the {need} entries it "
                                        f"needs: collected after 5 s, re-resolved at every step")
    findings = []
    need = max(needs, default=0)
    for status in (Status.FAIL, Status.WARN):
        bad = {n: text for n, (s, text) in small.items() if s is status}
        if bad:
            groups: Dict[str, List[str]] = {}
            for node, text in bad.items():
                groups.setdefault(text, []).append(node)
            findings.append(Finding(f"neigh.{family}", status,
                                    f"the {TABLES[family]} is smaller than the cluster needs on "
                                    f"{fold(list(bad))}", [f"{fold(ns)}: {t}" for t, ns in groups.items()],
                                    _remedy(prefix, need), list(bad)))
    if unread and need > KERNEL_DEFAULT:
        findings.append(Finding(f"neigh.{family}", Status.UNKNOWN,
                                f"the {TABLES[family]} could not be read on {fold(unread)}, and "
                                f"{num_nodes} nodes need {need} entries, more than the kernel default "
                                f"{KERNEL_DEFAULT}", [get(docs[unread[0]], "net", "neighbour_table", family,
                                                          "unreadable") or "no neighbour_table in the probe"],
                                f"read it on the host: sysctl {prefix}.gc_thresh3; " + _remedy(prefix, need),
                                unread))
    return findings, need


def _overflows(docs: Dict[str, Dict], num_nodes: int) -> List[Finding]:
    """An overflow the kernel logged since boot FAILs; WARNs where gc_thresh3 is above the kernel default now (raised
    since, it may be). The table to give it: twice what it held, or the cluster's need if more."""
    findings = []
    for node, doc in docs.items():
        for event in get(doc, "kernel_log", "neigh_overflow") or []:
            family = "ipv6" if event.get("table") == "ndisc_cache" else "ipv4"
            limit = get(doc, "net", "neighbour_table", family, "gc_thresh3")
            raised = isinstance(limit, int) and limit > KERNEL_DEFAULT
            then = f", last {event['last']}" if event.get("last") else ""
            evidence = [f"{node}: {event['line']} (first {event.get('first') or 'at a time not logged'})"]
            if isinstance(limit, int):
                evidence.append(f"{node}: {FAMILIES[family][0]}.gc_thresh3 is {limit} now" +
                                (", above the kernel default: raised after the overflow?" if raised else
                                 f"; other hosts on its network fill it beside the cluster's {num_nodes - 1} peers"
                                 if limit >= num_nodes - 1 else ""))
            findings.append(Finding(
                "neigh.overflow", Status.WARN if raised else Status.FAIL,
                f"{node}'s kernel logged \"{event['line']}\" {event['count']} time(s) since boot{then}", evidence,
                "its neighbour table overflowed: connections to new peers timed out. " +
                _remedy(FAMILIES[family][0], max(num_nodes - 1, 2 * (limit if isinstance(limit, int)
                                                                     else KERNEL_DEFAULT))), [node]))
    return findings


def neighbour_tables(docs: Dict[str, Optional[Dict]], num_nodes: int) -> List[Finding]:
    """Each node's neighbour tables against the cluster's size (num_nodes: every node of the run, reached or not),
    and the kernel's overflow lines; one OK line saying what was read when nothing is wrong."""
    docs = {n: d for n, d in docs.items() if d}
    findings: List[Finding] = []
    needs = {}
    for family in FAMILIES:
        found, needs[family] = _judge_family(docs, num_nodes, family)
        findings += found
    findings += _overflows(docs, num_nodes)
    if findings or not docs:
        return findings
    read = [n for n, d in docs.items() if "gc_thresh3" in (get(d, "net", "neighbour_table", "ipv4") or {})]
    said = "read on every node" if len(read) == len(docs) else \
        f"read on {len(read)} of {len(docs)} nodes; where unread, the kernel default {KERNEL_DEFAULT} would hold them"
    return [Finding("neigh", Status.OK, f"neighbour tables hold the {needs['ipv4']} entries {num_nodes} nodes need "
                                        f"({said})")]
