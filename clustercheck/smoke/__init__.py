"""`clustercheck smoke`: prove the cluster by training on it.

gather.py ships reference_train/ to every node and runs it under torchrun; rules.py
judges the run (or classifies its failure); render.py shows it.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence

from clustercheck.fanout import Cluster, FanoutOptions
from clustercheck.inventory import Node
from clustercheck.result import CheckResult
from clustercheck.smoke.gather import SmokeOptions, gather_smoke
from clustercheck.smoke.rules import judge_smoke


def check_smoke(nodes: Sequence[Node], fanout: FanoutOptions, options: SmokeOptions,
                progress: Optional[Callable[[str, Dict], None]] = None) -> CheckResult:
    with Cluster(nodes, fanout) as cluster:
        facts = gather_smoke(cluster, nodes, options, progress)
    return CheckResult(facts, judge_smoke(facts, options.timeout_s))
