"""What a bench run brought back (BenchFacts): the data its judges and views read; no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from clustercheck.core.inventory import Node
from clustercheck.node.facts import Probed
from clustercheck.ranks.runs import RanksRun
from clustercheck.stages.bench.expected import Expected
from clustercheck.stages.bench.figures import BenchFigures, compute_figures


@dataclass
class BenchFacts:
    nodes: List[Node]
    probed: List[Probed]
    backend: str = "gloo"
    nproc: Dict[str, int] = field(default_factory=dict)
    stages: List[RanksRun] = field(default_factory=list)   # the torchrun launch (pair rounds, then sweep)
    problems: Dict[str, str] = field(default_factory=dict)     # node -> why it could not take part
    expected: Optional[Expected] = None                         # what all_reduce's busbw should reach
    _figures: Optional[BenchFigures] = field(default=None, repr=False)

    @property
    def figures(self) -> BenchFigures:
        """Bandwidths from the launches' events, computed once (the launches are complete by then)."""
        if self._figures is None:
            self._figures = compute_figures(self.stages)
        return self._figures

    def failed_launches(self) -> List[RanksRun]:
        return [s for s in self.stages if any(r.exit_code != 0 for r in s.runs.values())]
