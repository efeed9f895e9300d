"""Rounds of disjoint pairs (every node in at most one pair per round), and the adaptive search
for slow nodes and slow links that plans them.

Standard library only: the bench worker is shipped to the nodes with this file beside it and
plans its rounds with `Isolation`; the tool replays the measured pairs through the same class to
judge them, so what the worker chose to measure and what the report concludes cannot disagree.

Adaptive isolation (Google's cluster-health-scanner re-tests a suspect against a node that
passed; NVIDIA's cluster-readiness-engine screens with groups before it isolates):
1. screen: one round of disjoint pairs (an odd node out waits). The reference speed is the upper
   median of the screen's pairs; a pair below SLOW x the reference is slow and both its nodes are
   suspects; the nodes of the fast pairs have passed.
2. confirm: each suspect exchanges with a node that passed, a different one each round, until it
   is slow with two of them (a slow node) or fast with one (then its partner or their link was
   slow). Mixed results need two more votes on one side than the other side has; once every
   node that passed has been tried, each slow exchange of the suspect with one of them is
   measured once more (fast the second time: it was noise, and counts as fast), and so is each
   exchange a busy CPU explained (not counted); five tries without a majority, or none left,
   leave the node undecided, which is reported as such.
3. retest: a slow pair whose two nodes both proved fast is measured again: slow twice is a slow
   link, fast the second time was noise.
A few bad nodes cost three rounds whatever N: screen, confirm, confirm. More suspects than nodes
that passed cost more rounds. A link between two nodes that both passed their screen is not
measured: the full round robin (N-1 rounds) measures every pair, for small clusters.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Set, Tuple

SLOW = 0.6          # a pair below this fraction of the reference speed is slow
# An exchange during which a side's threads waited this share of its time for a CPU (the kernel's runqueue wait,
# /proc/self/task/*/schedstat) and that came out slow may have measured the node's busy CPUs, not its link: it is
# not counted (measured with other partners instead). Fast, it counts: the link was at least that fast. (A fast
# exchange over a veth on a 2-core host is CPU-bound and waits 30-40% of its time: that alone says nothing.)
STARVED = 0.25
# ... and only where the wait could explain it: spared the wait (its share of the exchange's time), the exchange
# would have reached a CPU_MARGIN-th of the slow limit. A node whose link is slow and whose CPUs are busy (an
# exchange at a hundredth of the reference that waited 30% of its time) is still slow: the wait cannot explain it.
CPU_MARGIN = 2.0
MAX_VOTES = 5       # a suspect tried with this many partners without a clear majority is undecided

Pair = Tuple[str, str]


def round_robin(names: Sequence[str]) -> List[List[Pair]]:
    """Rounds of disjoint pairs covering every pair once (the circle method)."""
    players = list(names) + ([None] if len(names) % 2 else [])
    rounds = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        rounds.append([(a, b) for a, b in pairs if a is not None and b is not None])
        players = [players[0], players[-1]] + players[1:-1]
    return rounds


def round_limit(count: int) -> int:
    """Rounds the adaptive search may take: 2*ceil(log2 N)+2, at least six."""
    return max(6, 2 * math.ceil(math.log2(max(count, 2))) + 2)


def exchange_gbps(event: Dict) -> float:
    """GB/s each way of one pair's exchange, as the worker reports it ("bytes" in "time_us")."""
    return event["bytes"] / event["time_us"] / 1e3


def cpu_explains(gbps: float, limit: float, wait_share: float) -> bool:
    """Whether a side's wait for a CPU (its share of the exchange's time) could explain an exchange this slow
    (below `limit`): the wait above STARVED, and the exchange spared it within CPU_MARGIN of the limit."""
    if wait_share <= STARVED or gbps >= limit:
        return False
    spared = 1.0 - min(wait_share, 1.0)
    return spared <= 0 or gbps / spared * CPU_MARGIN >= limit


def cpu_wait(event: Dict) -> float:
    """The share of a pair exchange's time its two sides' threads waited for a CPU, added (0 if not said): the two
    wait in turn in an exchange that goes both ways in step, so each side's wait delays the whole."""
    waits = event.get("cpu_wait")
    return sum(w for w in waits.values() if isinstance(w, (int, float))) if isinstance(waits, dict) else 0.0


def upper_median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


class Isolation:
    """Plans rounds of pairs (`plan`), takes their speeds (`record`), and says what it found."""

    def __init__(self, nodes: Sequence[str], max_rounds: Optional[int] = None):
        self.nodes = list(nodes)
        self.max_rounds = max_rounds or round_limit(len(self.nodes))
        self.reference: Optional[float] = None
        self.state: Dict[str, str] = {n: "untested" for n in self.nodes}   # passed, suspect, slow, undecided
        self.slow_with: Dict[str, List[str]] = {n: [] for n in self.nodes}
        self.fast_with: Dict[str, List[str]] = {n: [] for n in self.nodes}
        self.slow_pairs: Set[Pair] = set()           # measured slow, while it may still be a link
        self.links: List[Pair] = []                  # slow twice, both nodes fast with others
        self.noise: List[Pair] = []                  # slow once, fast when measured again
        self.measured: List[Tuple[int, str, str, str, float]] = []   # round, phase, a, b, GB/s
        self.remeasured: Set[Pair] = set()           # a suspect's slow exchange with a passed node, tried again
        self.uncounted: List[Tuple[int, str, str, str, float]] = []  # slow while a side waited for a CPU
        self.rounds = 0
        self._phases: Dict[Pair, str] = {}           # the round planned and not yet recorded

    # ---- planning -----------------------------------------------------------------------------
    def plan(self) -> List[Tuple[str, str, str]]:
        """The next round as (a, b, phase) triples; empty when the search is over."""
        if self._phases:
            raise RuntimeError("the previous round was not recorded")
        if self.rounds == 0:
            pairs = [(self.nodes[i], self.nodes[i + 1], "screen") for i in range(0, len(self.nodes) - 1, 2)]
        elif self.rounds >= self.max_rounds:
            pairs = []
        else:
            pairs = self._next_pairs()
        if not pairs:
            self.close()
            return []
        self._phases = {(a, b): phase for a, b, phase in pairs}
        return pairs

    def _next_pairs(self) -> List[Tuple[str, str, str]]:
        busy: set = set()
        pairs = []
        for a, b in sorted(self.slow_pairs):
            if self.state[a] == "passed" and self.state[b] == "passed" and not {a, b} & busy:
                pairs.append((a, b, "retest"))
                busy |= {a, b}
        good = [n for n in self.nodes if self.state[n] == "passed"]
        uses = {n: 0 for n in good}
        for node in self.nodes:
            if self.state[node] not in ("suspect", "untested") or node in busy:
                continue
            tried = self.partners(node)
            free = [g for g in good if g != node and g not in busy and g not in tried]
            if not free:
                if [g for g in good if g != node and g not in tried]:
                    continue                            # a partner is free next round
                # Every node that passed has been tried and the votes are mixed: a slow exchange with a
                # node that passed is measured once more (noise on a busy host), before "undecided".
                again = [(g, "reconfirm") for g in self.slow_with[node] if g in good and g not in busy
                         and (node, g) not in self.remeasured]
                # ... and an exchange a busy CPU explained (not counted) is tried once more: on a loaded host a
                # node's every exchange may come behind another process's, and the rounds left are spent on it.
                again += [(g, "confirm") for g in self.starved_with(node) if g in good and g not in busy
                          and (node, g) not in self.remeasured]
                if not again:
                    self.state[node] = "undecided"
                    continue
                partner, phase = again[0]
                self.remeasured.add((node, partner))
                pairs.append((node, partner, phase))
                busy |= {node, partner}
                continue
            partner = min(free, key=lambda g: uses[g])
            uses[partner] += 1
            pairs.append((node, partner, "confirm"))
            busy |= {node, partner}
        return pairs

    def partners(self, node: str) -> set:
        """Every node this one has been measured with, or tried and not counted (a busy CPU): a second exchange
        with one tells nothing new, and would hold that partner from the other suspects round after round."""
        return {b if a == node else a for _, _, a, b, _ in self.measured + self.uncounted if node in (a, b)}

    def starved_with(self, node: str) -> List[str]:
        """The nodes this one's exchanges with were not counted (a side waited for a CPU), oldest first."""
        return [b if a == node else a for _, _, a, b, _ in self.uncounted if node in (a, b)]

    # ---- results ------------------------------------------------------------------------------
    def record(self, speeds: Dict[Pair, float], waits: Optional[Dict[Pair, float]] = None) -> None:
        """GB/s of every pair of the round just planned (a pair that did not report is left out), and the share of
        each exchange's time a side waited for a CPU: a slow exchange that wait explains (cpu_explains) is not
        counted, as if it had not reported, and its partner is not tried again while another is left."""
        phases, self._phases = self._phases, {}
        self.rounds += 1
        if self.reference is None:
            screened = [speeds[p] for p, phase in phases.items() if phase == "screen" and p in speeds]
            self.reference = upper_median(screened) if screened else None
        limit = SLOW * self.reference if self.reference is not None else None
        for pair, share in (waits or {}).items():
            if pair in speeds and pair in phases and limit is not None and cpu_explains(speeds[pair], limit, share):
                self.uncounted.append((self.rounds - 1, phases[pair], pair[0], pair[1], speeds[pair]))
                speeds = {p: s for p, s in speeds.items() if p != pair}
        for (a, b), phase in phases.items():
            if (a, b) in speeds:
                self.measured.append((self.rounds - 1, phase, a, b, speeds[(a, b)]))
        if limit is None:
            return
        for (a, b), phase in phases.items():
            if (a, b) not in speeds:
                continue
            slow = speeds[(a, b)] < limit
            if phase == "screen":
                for node in (a, b):
                    self.state[node] = "suspect" if slow else "passed"
                if slow:
                    self.slow_pairs.add((a, b))
            elif phase == "retest":
                self.slow_pairs.discard((a, b))
                (self.links if slow else self.noise).append((a, b))
            elif phase == "reconfirm":
                if not slow:   # fast the second time: the first was noise, and counts as fast
                    self.slow_with[a].remove(b)
                    self.fast_with[a].append(b)
                    self.slow_pairs.discard((a, b))
                    self.noise.append((a, b))
                self._decide(a)
            else:
                (self.slow_with if slow else self.fast_with)[a].append(b)
                if slow:
                    self.slow_pairs.add((a, b))
                self._decide(a)
        # A slow pair is explained once one of its nodes is slow; it is a link only between fast nodes.
        self.slow_pairs = {pair for pair in self.slow_pairs if all(self.state[n] != "slow" for n in pair)}

    def _decide(self, node: str) -> None:
        slow, fast = len(self.slow_with[node]), len(self.fast_with[node])
        if slow >= 2 and slow >= fast + 2 or slow >= 2 and fast == 0:
            self.state[node] = "slow"
        elif fast >= 1 and slow == 0 or fast >= 2 and fast >= slow + 2:
            self.state[node] = "passed"
        elif slow + fast >= MAX_VOTES:
            self.state[node] = "undecided"
        else:
            self.state[node] = "suspect"
        if self.state[node] == "passed":
            # the slow results this node had with nodes that passed were their link, or noise
            for partner in self.slow_with[node]:
                self.slow_pairs.add((node, partner))

    def close(self) -> None:
        """The search ends here (done, out of rounds or out of time): what is still open is undecided."""
        self._phases = {}
        for node, state in self.state.items():
            if state in ("suspect", "untested"):
                self.state[node] = "undecided"

    # ---- what was found -------------------------------------------------------------------------
    def slow_nodes(self) -> List[str]:
        return [n for n in self.nodes if self.state[n] == "slow"]

    def undecided(self) -> List[str]:
        return [n for n in self.nodes if self.state[n] in ("undecided", "suspect", "untested")]

    def open_pairs(self) -> List[Pair]:
        """Pairs measured slow once whose cause was not settled when the search ended."""
        return sorted(self.slow_pairs)


def replay(nodes: Sequence[str], rounds: Sequence[Dict[Pair, float]], max_rounds: Optional[int] = None,
           waits: Sequence[Dict[Pair, float]] = ()) -> Isolation:
    """The search as the worker ran it: its measured rounds, in order, recorded again (with each round's shares
    of time its pairs' sides waited for a CPU)."""
    search = Isolation(nodes, max_rounds)
    for index, speeds in enumerate(rounds):
        planned = search.plan()
        if not planned:
            break
        search.record(speeds, waits[index] if index < len(waits) else None)
    search.close()
    return search
