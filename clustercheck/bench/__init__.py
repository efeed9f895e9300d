"""`clustercheck bench`: collective bandwidth sweeps, reported like nccl-tests, and the slow node.

worker.py runs on the nodes under torchrun; gather.py launches it and collects events;
table.py knows the collectives' bus-bandwidth factors and the nccl-tests table;
rules.py judges; render.py and plots.py show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

from clustercheck.bench.gather import BenchFacts, BenchOptions, gather_bench
from clustercheck.bench.rules import Expectations, judge_bench
from clustercheck.fanout import Cluster, FanoutOptions
from clustercheck.inventory import Node
from clustercheck.result import Finding, worst


@dataclass
class BenchResult:
    facts: BenchFacts
    findings: List[Finding]

    @property
    def exit_code(self) -> int:
        return worst(self.findings).exit_code


def check_bench(nodes: Sequence[Node], fanout: FanoutOptions, options: BenchOptions, expect: Expectations,
                progress: Optional[Callable[[Dict], None]] = None) -> BenchResult:
    with Cluster(nodes, fanout) as cluster:
        facts = gather_bench(cluster, nodes, options, progress=progress)
    return BenchResult(facts, judge_bench(facts, expect, options.timeout_s))
