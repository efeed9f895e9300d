"""Every judge of `clustercheck env`, in the order their findings are listed."""

from __future__ import annotations

from typing import Callable, List, Sequence

from clustercheck.core.result import Finding
from clustercheck.stages.env import fabric_rules, gpu_rules, topology
from clustercheck.stages.env.rules import RULES, EnvContext

JUDGES: Sequence[Callable[[EnvContext], List[Finding]]] = [
    *RULES, gpu_rules.gpu_health, fabric_rules.ports, fabric_rules.counters, topology.judge, gpu_rules.unchecked,
]


def judge(ctx: EnvContext) -> List[Finding]:
    findings: List[Finding] = []
    for rule in JUDGES:
        findings += rule(ctx)
    return findings
