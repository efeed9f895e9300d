"""Every judge of `clustercheck env`, in the order their findings are listed, and `evaluate`: probe documents
(recorded or fresh) judged as a run of env does, with no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence

from clustercheck.core.result import Finding, run_judges, worst
from clustercheck.core.thresholds import Config
from clustercheck.node.facts import Probed
from clustercheck.node.judges import judge_nodes
from clustercheck.node import gpu_health
from clustercheck.node.neighbours import neighbour_tables
from clustercheck.stages.env import fabric_rules, gpu_held, rules, topology
from clustercheck.stages.env.facts import env_facts
from clustercheck.stages.env.rules import EnvContext

JUDGES: Sequence[Callable[[EnvContext], List[Finding]]] = [
    *rules.JUDGES, gpu_health.gpu_health, gpu_held.held, fabric_rules.ports, fabric_rules.counters, topology.judge, gpu_health.unchecked,
    lambda ctx: neighbour_tables({p.name: p.facts for p in ctx.ok}, len(ctx.probed)),
]


def judge(ctx: EnvContext) -> List[Finding]:
    return run_judges(JUDGES, ctx)


@dataclass
class EnvResult:
    probed: List[Probed]
    values: Dict[str, Dict[str, str]]
    findings: List[Finding]

    @property
    def exit_code(self) -> int:
        return worst(self.findings).exit_code


def evaluate(probed: Sequence[Probed], config: Config) -> EnvResult:
    """Judge probe documents (recorded or fresh) as a run of `env` does: pure, no I/O."""
    facts = env_facts(probed)
    findings = judge_nodes(facts.probed) + judge(EnvContext(facts.probed, facts.values, config.env))
    return EnvResult(facts.probed, facts.values, findings)
