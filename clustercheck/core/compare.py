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
