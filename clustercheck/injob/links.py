"""The judge of the links while the job trains: from what every rank's sockets carried over one window
(sockets.py: per peer address, the bytes acknowledged and the time spent sending them), which node's link, or
which link between two nodes, moves the job's own traffic far slower than the others. Pure: numbers in, a finding
out.

The rates are those of the job's collectives themselves (Gloo's pairs, NCCL's socket transport), taken while each
link had data to send, so the ranks that only wait in collectives do not lower them. A node is slow when the pairs
it is in move their traffic at under SLOW of the pairs it is not in (as bench's pairwise judge says it: with
three nodes, two of the three pairs hold the slow node, and the median of all would hide it); a link is slow when
it alone is, next to the pairs of nodes that are not slow. With two nodes there is nothing to compare with: the
rate is said, no link is named.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

SLOW = 0.5              # a pair (or a node's pairs) under this fraction of the others' rate is slow
MIN_BYTES = 64 * 1024   # a pair that carried less over the window says nothing of its rate (the store, a barrier)

Pair = Tuple[str, str]  # (sending node, receiving node)


@dataclass
class SlowLink:
    subject: str        # "n2's link" or "n1 <-> n3"
    nodes: List[str]
    summary: str        # the rates, in words
    remedy: str


def pair_rates(window: Mapping[int, Mapping]) -> Dict[Pair, float]:
    """Bytes a second while sending, per (sending node, receiving node) between two nodes, over every rank."""
    host_of = {addr: numbers["host"] for numbers in window.values() for addr in numbers.get("addrs", ())}
    moved: Dict[Pair, List[int]] = {}
    for numbers in window.values():
        for peer, (count, micros) in (numbers.get("links") or {}).items():
            target = host_of.get(peer)
            if target is None or target == numbers["host"]:
                continue        # within the node, or a peer that is not one of the job's ranks
            entry = moved.setdefault((numbers["host"], target), [0, 0])
            entry[0] += count
            entry[1] += micros
    return {pair: count / max(micros, 1) * 1e6 for pair, (count, micros) in moved.items() if count >= MIN_BYTES}


def _mb(rate: float) -> str:
    return f"{rate / 1e6:.3g} MB/s"


def _said(rates: Dict[Pair, float], pairs: List[Pair]) -> str:
    return ", ".join(f"{_mb(rates[p])} {p[0]} -> {p[1]}" for p in sorted(pairs))


def slow_link(window: Mapping[int, Mapping]) -> Optional[SlowLink]:
    """The node whose link is slow, or the slowest link between two nodes that are not, over this window."""
    rates = pair_rates(window)
    nodes = sorted({n for pair in rates for n in pair})
    if len(nodes) < 3:
        return None
    for node in nodes:
        mine = [p for p in rates if node in p]
        others = [p for p in rates if node not in p]
        if not mine or not others:
            continue
        theirs = statistics.median(rates[p] for p in others)
        if statistics.median(rates[p] for p in mine) < SLOW * theirs:
            return SlowLink(f"{node}'s link", [node],
                            f"{node}'s link moves the job's traffic at {_said(rates, mine)} while sending, where the "
                            f"other nodes' pairs move it at {_mb(theirs)} ({_said(rates, others)})",
                            f"check {node}'s NIC (ethtool: speed, errors), cable and switch port, and any traffic "
                            f"shaping (tc qdisc); or drain it")
    for pair in sorted(rates, key=rates.get):
        others = [p for p in rates if set(p) != set(pair)]
        if others and rates[pair] < SLOW * statistics.median(rates[p] for p in others):
            both = [p for p in rates if set(p) == set(pair)]
            a, b = sorted(pair)
            return SlowLink(f"{a} <-> {b}", [a, b],
                            f"the link {a} <-> {b} moves the job's traffic at {_said(rates, both)} while sending, "
                            f"where the other pairs move it at {_mb(statistics.median(rates[p] for p in others))}",
                            f"check the path between {a} and {b}: switch ports, routing, a congested uplink")
    return None
