"""Which node or link is slow, from the pair exchanges: the round robin with its confirmation (`--pairwise
full`) or the adaptive search's rounds, leaving out what a side's wait for a CPU explains.

A node is named only on what its exchanges say next to exchanges measured at the same time: the round robin
names a suspect, its confirmation (the suspect again, with a node that passed) must be slow next to the pairs
that confirmation round measured without it. On a host whose load moves, a pair measured twice can differ by 2x:
a suspect as fast as the others when measured again is said unsteady (WARN), never named.
"""

from __future__ import annotations

import statistics
from typing import Dict, List, Tuple

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.onnode.rounds import SLOW, STARVED, cpu_wait, exchange_gbps
from clustercheck.stages.bench.facts import BenchFacts

SLOW_PAIR_RATIO = SLOW  # a node whose pairs' median is below this fraction of the other pairs' is slow
SLOW_LINK_RATIO = 0.2   # one pair is a single, noisy measurement: slow only when far below the rest

Pair = Tuple[str, str]


def _with(node: str, speeds: Dict[Pair, float]) -> List[float]:
    return [speed for pair, speed in speeds.items() if node in pair]


def _without(nodes, speeds: Dict[Pair, float]) -> List[float]:
    return [speed for pair, speed in speeds.items() if not set(pair) & set(nodes)]


def suspects(matrix: Dict[Pair, float]) -> List[str]:
    """The nodes whose round-robin pairs' median is below SLOW_PAIR_RATIO of the pairs they are not in (with 3
    nodes, two of the three pairs hold the slow node: the overall median would hide it)."""
    nodes = sorted({n for pair in matrix for n in pair})
    return [n for n in nodes if _with(n, matrix) and _without([n], matrix)
            and statistics.median(_with(n, matrix)) < SLOW_PAIR_RATIO * statistics.median(_without([n], matrix))]


def judge_nodes(matrix: Dict[Pair, float], confirm: Dict[Pair, float]) -> Tuple[List[str], List[str]]:
    """(slow nodes, unsteady nodes). A suspect fast with a partner when confirmed is not slow (its slow pair is a
    link's). A suspect slow again next to the round robin's others is slow, unless the pairs measured in the
    confirmation beside it, without any suspect, fell as far: then the speeds moved, and it is unsteady."""
    slow, unsteady = [], []
    named = suspects(matrix)
    for node in named:
        limit = SLOW_PAIR_RATIO * statistics.median(_without([node], matrix))
        again = _with(node, confirm)
        if not all(speed < limit for speed in again):
            continue
        beside = _without(named, confirm)
        if again and beside and not all(speed < SLOW_PAIR_RATIO * statistics.median(beside) for speed in again):
            unsteady.append(node)
        else:
            slow.append(node)
    return slow, unsteady


def unsteady_finding(unsteady: List[str], matrix: Dict[Pair, float], confirm: Dict[Pair, float],
                     evidence: List[str]) -> Finding:
    named = suspects(matrix)
    parts = [f"{n} was slow with its partners in the round robin ({statistics.median(_with(n, matrix)):.3f} GB/s "
             f"against {statistics.median(_without([n], matrix)):.3f} between the others), but measured again it "
             f"reached {statistics.median(_with(n, confirm)):.3f} GB/s against "
             f"{statistics.median(_without(named, confirm)):.3f} for the pair measured beside it" for n in unsteady]
    return Finding("bench.pairwise.unsteady", Status.WARN,
                   f"could not tell whether {fold(unsteady)} {'is' if len(unsteady) == 1 else 'are'} slow: "
                   + "; ".join(parts) + ": the speeds moved between rounds, so no node or link is named", evidence,
                   "something else used the nodes' CPUs or network while they measured (another job, a data loader, "
                   "a busy host): rerun the bench when they are idle; a node slow in every run is the one to drain")


REMEDY_STARVED = ("the named nodes' CPUs were busy or capped while they measured (another job, a data loader, a "
                  "runaway process: top, ps -eo pcpu,comm --sort=-pcpu; a cgroup CPU quota: cpu.max); rerun the "
                  "bench once they are free")


def starved_said(facts: BenchFacts) -> List[str]:
    """One line per exchange not counted because a side's threads waited for a CPU, naming that side."""
    lines = []
    for event in facts.figures.starved:
        waits = event.get("cpu_wait") or {}
        node, share = max(waits.items(), key=lambda item: item[1]) if isinstance(waits, dict) and waits else ("?", 0)
        lines.append(f"round {event.get('round', 0) + 1} ({event.get('phase')}): {event['a']} <-> {event['b']}: not "
                     f"counted ({exchange_gbps(event):.3f} GB/s), {node}'s threads waited {share:.0%} of the exchange "
                     f"for a CPU (both sides {cpu_wait(event):.0%}, above {STARVED:.0%}), enough to explain that "
                     "speed: it measured busy or capped CPUs (another process, a cgroup quota), not the link")
    return lines


def search_verdict(facts: BenchFacts) -> List[Finding]:
    """What the adaptive search found: slow nodes, slow links, and what it could not settle."""
    search = facts.figures.search
    if search is None:
        return []
    if search.reference is None:
        if not facts.figures.starved and not facts.figures.rounds:
            return []
        return [Finding("bench.pairwise.undecided", Status.UNKNOWN,
                        "could not tell whether any node or link is slow: no exchange of the first round measured "
                        "a link" + (" (the nodes' CPUs were busy)" if facts.figures.starved else ""),
                        starved_said(facts), REMEDY_STARVED if facts.figures.starved else
                        "rerun with a larger --stage-budget", sorted(search.nodes))]
    reference = search.reference
    slow_ones = [m for m in search.measured if m[4] < SLOW * reference]
    fast_ones = [m[4] for m in search.measured if m[4] >= SLOW * reference]
    evidence = [f"round {r + 1} ({phase}): {a} <-> {b}: {gbps:.3f} GB/s (slow)" for r, phase, a, b, gbps in slow_ones]
    evidence += starved_said(facts)
    if fast_ones:
        evidence.append(f"{len(fast_ones)} other exchange{'s' * (len(fast_ones) > 1)} fast: "
                        f"{min(fast_ones):.3f} to {max(fast_ones):.3f} GB/s")
    basis = (f"reference {reference:.3f} GB/s, the screen's upper median; slow below {SLOW:.0%} of it; "
             f"{search.rounds} round{'s' * (search.rounds != 1)}")
    findings = []
    slow = search.slow_nodes()
    if slow:
        mine = [gbps for _, phase, a, b, gbps in search.measured if phase == "confirm" and a in slow]
        findings.append(Finding(
            "bench.pairwise.node", Status.FAIL,
            f"slow node{'s' * (len(slow) > 1)}: {fold(slow)} (slow with two nodes that passed: "
            f"{statistics.median(mine):.3f} GB/s against a reference of {reference:.3f} GB/s)", evidence,
            "check that node's NIC (ethtool / ibstat: speed, errors), cable and switch port, and any traffic "
            "shaping (tc qdisc); or drain it", slow))
    if search.links:
        findings.append(Finding(
            "bench.pairwise.link", Status.FAIL,
            "slow link" + "s" * (len(search.links) > 1) + ": " + ", ".join(f"{a} <-> {b}" for a, b in search.links)
            + " (slow twice; both nodes fast with others)", evidence,
            "check the path between those two nodes: switch ports, routing, a congested uplink",
            sorted({n for pair in search.links for n in pair})))
    undecided, open_pairs = search.undecided(), search.open_pairs()
    if undecided or open_pairs:
        stopped = [e["reason"] for e in facts.figures.budget if e.get("stage") == "pairs"]
        why = stopped[0] if stopped else f"{search.rounds} rounds (the most the search takes for " \
                                          f"{len(search.nodes)} nodes) or no untried partner left"
        subjects = undecided + [f"{a} <-> {b}" for a, b in open_pairs if a not in undecided and b not in undecided]
        findings.append(Finding(
            "bench.pairwise.undecided", Status.UNKNOWN,
            f"could not tell whether {', '.join(subjects)} {'is' if len(subjects) == 1 else 'are'} slow: "
            f"the search stopped ({why})", evidence,
            REMEDY_STARVED if facts.figures.starved else
            "rerun with a larger --stage-budget, or --pairwise full on these nodes", undecided))
    if not findings:
        checked = len({n for _, _, a, b, _ in search.measured for n in (a, b)})
        findings.append(Finding(
            "bench.pairwise", Status.OK,
            f"no slow node among {checked}: every node within {SLOW:.0%} of the reference with a partner that "
            f"passed ({basis}; links between nodes that passed are not all measured: --pairwise full measures "
            "every pair)", evidence))
    return findings


def pairwise_verdict(facts: BenchFacts) -> List[Finding]:
    """Name the slow node (slow with every partner) or the slow link (slow only together)."""
    if facts.figures.pair_mode == "adaptive":
        return search_verdict(facts)
    matrix = facts.figures.pairs.get("matrix", {})
    confirm = facts.figures.pairs.get("confirm", {})
    if not matrix:
        return [Finding("bench.pairwise.undecided", Status.UNKNOWN, "could not tell whether any node or link is slow: "
                        "no exchange of the round robin measured a link (the nodes' CPUs were busy)",
                        starved_said(facts), REMEDY_STARVED, [])] if facts.figures.starved else []
    median = statistics.median(matrix.values())
    nodes = sorted({n for pair in matrix for n in pair})
    # A node is slow when its pairs are slow next to the pairs it is not in (with 3 nodes, two of
    # the three pairs hold the slow node: the overall median would hide it).
    slow_nodes, unsteady = judge_nodes(matrix, confirm)
    slow_pairs = set()
    for pair, speed in matrix.items():
        if set(pair) & set(unsteady):
            continue    # a pair of a node measured unsteadily says nothing of its link either
        rest = [s for p, s in matrix.items() if p != pair and not set(p) & set(slow_nodes)]
        limit = SLOW_PAIR_RATIO if set(pair) & set(slow_nodes) else SLOW_LINK_RATIO
        if speed < limit * (statistics.median(rest) if rest else median):
            slow_pairs.add(pair)
    slow_links = [pair for pair in slow_pairs if not set(pair) & set(slow_nodes)]
    evidence = [f"{a} <-> {b}: {speed:.3f} GB/s" + (" (slow)" if (a, b) in slow_pairs else "")
                for (a, b), speed in sorted(matrix.items())]
    evidence += [f"confirm {a} <-> {b}: {speed:.3f} GB/s" for (a, b), speed in sorted(confirm.items())]
    evidence += starved_said(facts)
    findings = []
    if slow_nodes:
        mine = statistics.median(s for p, s in matrix.items() if set(p) & set(slow_nodes))
        rest = [s for p, s in matrix.items() if not set(p) & set(slow_nodes)]
        findings.append(Finding(
            "bench.pairwise.node", Status.FAIL,
            f"slow node{'s' if len(slow_nodes) > 1 else ''}: {fold(slow_nodes)} ({mine:.3f} GB/s with its "
            f"partners; {statistics.median(rest) if rest else median:.3f} GB/s between the others)", evidence,
            "check that node's NIC (ethtool / ibstat: speed, errors), cable and switch port, and any traffic "
            "shaping (tc qdisc); or drain it", slow_nodes))
    if slow_links:
        findings.append(Finding(
            "bench.pairwise.link", Status.FAIL,
            "slow link" + ("s" if len(slow_links) > 1 else "") + ": " +
            ", ".join(f"{a} <-> {b}" for a, b in sorted(slow_links)) +
            f" (below {SLOW_LINK_RATIO:.0%} of the other pairs; both nodes are fast with others)",
            evidence, "check the path between those two nodes: switch ports, routing, a congested uplink",
            sorted({n for pair in slow_links for n in pair})))
    if unsteady:
        findings.append(unsteady_finding(unsteady, matrix, confirm, evidence))
    if not findings:
        findings.append(Finding("bench.pairwise", Status.OK,
                                f"every pair within {SLOW_PAIR_RATIO:.0%} of the median {median:.3f} GB/s "
                                f"({len(matrix)} pairs)", evidence))
    return findings
