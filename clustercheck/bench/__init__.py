"""`clustercheck bench`: collective bandwidth sweeps, reported like nccl-tests, and the slow node.

worker.py runs on the nodes under torchrun; gather.py launches it and collects events;
table.py knows the collectives' bus-bandwidth factors and the nccl-tests table;
rules.py judges; render.py and plots.py show.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence

from clustercheck.bench.gather import BenchOptions, gather_bench
from clustercheck.bench.rules import Expectations, judge_bench
from clustercheck.fanout import Cluster, FanoutOptions
from clustercheck.inventory import Node
from clustercheck.result import CheckResult


def check_bench(nodes: Sequence[Node], fanout: FanoutOptions, options: BenchOptions, expect: Expectations,
                progress: Optional[Callable[[Dict], None]] = None) -> CheckResult:
    with Cluster(nodes, fanout) as cluster:
        facts = gather_bench(cluster, nodes, options, progress=progress)
    return CheckResult(facts, judge_bench(facts, expect, options.timeout_s))
