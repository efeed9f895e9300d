"""Compare by grouping: nodes with the same value go together, the majority is the baseline; and the median
of peers' figures that a measured node is held against."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Dict, Generic, Hashable, List, Sequence, Tuple, TypeVar

from clustercheck.core.inventory import fold

V = TypeVar("V", bound=Hashable)


@dataclass
class Grouping(Generic[V]):
    groups: List[Tuple[V, List[str]]]   # largest first; ties keep inventory order

    @property
    def uniform(self) -> bool:
        return len(self.groups) <= 1

    @property
    def baseline(self) -> V:
        return self.groups[0][0]

    @property
    def baseline_nodes(self) -> List[str]:
        return self.groups[0][1]

    @property
    def odd(self) -> List[Tuple[V, List[str]]]:
        return self.groups[1:]

    @property
    def odd_nodes(self) -> List[str]:
        return [n for _, nodes in self.odd for n in nodes]

    @property
    def clear_majority(self) -> bool:
        """The baseline group is strictly larger than any other: the odd ones out are real outliers."""
        return len(self.groups) == 1 or len(self.groups[0][1]) > len(self.groups[1][1])

    def evidence(self, show=str) -> List[str]:
        return [f"{fold(nodes)}: {show(value)}" for value, nodes in self.groups]

    def odd_first(self, show=str) -> List[str]:
        """The evidence with the odd nodes first and the majority last as "the others"; without a clear majority,
        every group as it is."""
        if self.uniform or not self.clear_majority:
            return self.evidence(show)
        return [f"{fold(nodes)}: {show(value)}" for value, nodes in self.odd] + [
            f"the others ({fold(self.baseline_nodes)}): {show(self.baseline)}"]

    def differs(self, what: str) -> str:
        """"LD_LIBRARY_PATH differs on node03 from the other 2 nodes": the odd nodes alone named where there is a
        clear majority, never the healthy ones as if they were the odd ones."""
        total = sum(len(nodes) for _, nodes in self.groups)
        if self.clear_majority:
            return f"{what} differs on {fold(self.odd_nodes)} from the other {len(self.baseline_nodes)} nodes"
        return f"{what} differs across the {total} nodes, no majority"

    @property
    def at_fault(self) -> List[str]:
        """The nodes a difference blames: the odd ones where there is a clear majority, else every node."""
        return self.odd_nodes if self.clear_majority else [n for _, nodes in self.groups for n in nodes]


def group_by_value(values: Dict[str, V], order: Sequence[str]) -> Grouping[V]:
    """values: node -> value (nodes without a value are left out); order: inventory order."""
    position = {name: i for i, name in enumerate(order)}
    buckets: Dict[V, List[str]] = {}
    for node in sorted(values, key=lambda n: position.get(n, len(position))):
        buckets.setdefault(values[node], []).append(node)
    groups = sorted(buckets.items(), key=lambda item: (-len(item[1]), position.get(item[1][0], 0)))
    return Grouping(groups)


def median(values: List[float]) -> float:
    """The peers' median (0.0 with no peers: nothing to compare against)."""
    return statistics.median(values) if values else 0.0
