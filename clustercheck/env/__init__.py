"""`clustercheck env`: what every node really runs, compared.

gather.py runs the probe (clustercheck/probe/env_probe.py) on every node; facts.py
turns its JSON into comparable facts; rules.py judges them; render.py shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from clustercheck.config import Config
from clustercheck.env.gather import Probed, probe_cluster
from clustercheck.env.rules import EnvContext, judge
from clustercheck.fanout import Cluster, FanoutOptions
from clustercheck.inventory import Node
from clustercheck.result import Finding, worst


@dataclass
class EnvResult:
    probed: List[Probed]
    values: Dict[str, Dict[str, str]]   # node -> comparable facts
    findings: List[Finding]

    @property
    def exit_code(self) -> int:
        return worst(self.findings).exit_code


def evaluate(probed: Sequence[Probed], config: Config) -> EnvResult:
    """Judge probe results (recorded or fresh): pure, no I/O."""
    ctx = EnvContext(list(probed), config.env)
    return EnvResult(ctx.probed, ctx.values, judge(ctx))


def check_env(nodes: Sequence[Node], options: FanoutOptions, config: Config, timeout_s: float = 60.0,
              workdir: Optional[str] = None, deep: bool = False) -> EnvResult:
    with Cluster(nodes, options) as cluster:
        probed = probe_cluster(cluster, nodes, timeout_s, workdir=workdir, deep=deep)
    return evaluate(probed, config)
