"""`clustercheck env`: what every node really runs, compared.

The node layer runs the probe (clustercheck/probe/env_probe.py) on every node; facts.py
turns each document into comparable facts; rules.py judges them; render.py shows them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import click

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status, worst
from clustercheck.core.thresholds import Config, load_config
from clustercheck.node import NodeLayer
from clustercheck.node.facts import Probed, gpu_count
from clustercheck.node.gather import ProbeOptions
from clustercheck.node.judges import judge_nodes
from clustercheck.node.readiness import missing_packages, readiness_problems
from clustercheck.node.slurm import SlurmView, read_slurm
from clustercheck.onnode.env_probe import PACKAGES
from clustercheck.runner.options import opt
from clustercheck.runner.stage import Stage, StageResult
from clustercheck.stages.env import render, topology
from clustercheck.stages.env.facts import comparable
from clustercheck.stages.env.judges import judge
from clustercheck.stages.env.rules import EnvContext
from clustercheck.stages.env.slurm_rules import judge_slurm
from clustercheck.stages.env.storage import judge_shared, probe_shared


@dataclass
class EnvOptions:
    deep: bool = opt("--deep", is_flag=True, default=False,
                     help="Also import torch and deepspeed on every node (slower: seconds).")
    workdir: Optional[str] = opt("--workdir", help="Directory training runs in on the nodes: checked to exist, free "
                                                    "disk measured. Default: the SSH login directory.")
    timeout_s: float = opt("--timeout", default=60.0, type=click.FloatRange(1),
                           help="Deadline in seconds for the probe on each node.")
    config_path: Optional[str] = opt("--config", type=click.Path(dir_okay=False),
                                     help="Thresholds file (TOML); default ./clustercheck.toml when present.")
    shared_dir: Optional[str] = opt("--shared-dir", help="A directory meant for data or checkpoints: say whether it "
                                                         "is one filesystem for every node or a disk per node.")

    required: Sequence[str] = opt("--require", multiple=True, default=(), type=click.Choice(PACKAGES),
                                  help="A Python package every node must have (repeat it; the ones the probe reads): "
                                       "preflight asks for transformers with --model, peft with --lora.")

    def probe(self) -> ProbeOptions:
        return ProbeOptions(timeout_s=self.timeout_s, workdir=self.workdir, deep=self.deep)


@dataclass
class EnvFacts:
    probed: List[Probed]
    values: Dict[str, Dict[str, str]]   # node -> comparable facts
    shared: Dict[str, Dict[str, str]] = field(default_factory=dict)   # directory -> node -> what it saw
    slurm: Optional[SlurmView] = None   # what Slurm says of the nodes (run inside an allocation)


def env_facts(probed: Sequence[Probed]) -> EnvFacts:
    return EnvFacts(list(probed), {p.name: comparable(p) for p in probed if p.facts is not None})


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


class EnvStage(Stage):
    name = "env"

    def __init__(self, options: EnvOptions):
        super().__init__(options)
        self.config = load_config(options.config_path)   # bad input stops before any node is contacted

    def gather(self, layer: NodeLayer) -> EnvFacts:
        facts = env_facts(layer.probed(self.options.probe()))
        reached = [p.node for p in facts.probed if p.facts is not None]
        for directory in filter(None, (self.options.workdir, self.options.shared_dir)):
            if reached and (len(reached) > 1 or directory == self.options.shared_dir):   # none: reach says why
                facts.shared[directory] = probe_shared(layer.cluster, reached, directory, self.options.timeout_s)
        if layer.cluster.options.srun_job or any(n.source == "SLURM_JOB_NODELIST" for n in layer.nodes):
            facts.slurm = read_slurm([n.name for n in layer.nodes])
        return facts

    def judge(self, facts: EnvFacts) -> List[Finding]:
        findings = judge(EnvContext(facts.probed, facts.values, self.config.env))
        findings += required_packages(facts.probed, self.options.required)
        for directory, views in facts.shared.items():
            findings += judge_shared(directory, views, [n for n in (p.name for p in facts.probed) if n in views])
        if facts.slurm is not None:
            findings += judge_slurm(facts.slurm, [p.name for p in facts.probed],
                                    {p.name: gpu_count(p.facts) for p in facts.probed if p.facts is not None})
        return findings

    def blocks(self, result: StageResult, later: Stage) -> str:
        problems = readiness_problems(result.facts.probed)
        if not later.launches_ranks or not problems:
            return ""
        first = next(iter(problems))
        return f"env found nodes that cannot run torch: {fold(list(problems))} ({first}: {problems[first]})"

    def to_json(self, result: StageResult) -> Dict:
        return render.to_json(result.facts.probed, result.facts.values, result.findings, self.config)

    def render_terminal(self, result: StageResult, verbose: bool) -> str:
        return render.render_terminal(result.facts.probed, result.facts.values, result.findings, verbose)

    def render_markdown(self, result: StageResult, command: str, images: Sequence[str]) -> str:
        return render.render_markdown(result.facts.probed, result.facts.values, result.findings, self.config,
                                      command)

    def report_section(self, result: StageResult, images: Sequence[str]) -> List[str]:
        return ["## Versions and settings", "", render.facts_markdown(result.facts.probed, result.facts.values), "",
                *topology.markdown(result.facts.probed)]

    def report_json(self, result: StageResult) -> Dict:
        return {"versions": result.facts.values}


def required_packages(probed: Sequence[Probed], required: Sequence[str]) -> List[Finding]:
    """One finding per missing package set, its nodes folded; an OK line names what every node has."""
    if not required:
        return []
    by_missing: Dict[tuple, List[str]] = {}
    for node, names in missing_packages(probed, required).items():
        by_missing.setdefault(tuple(names), []).append(node)
    findings = [Finding("env.required", Status.FAIL, f"{' and '.join(names)} not installed on {fold(nodes)}", [],
                        "install with each node's interpreter (`<python> -m pip install "
                        f"{' '.join(required)}`), the same version everywhere", nodes)
                for names, nodes in by_missing.items()]
    reached = [p.name for p in probed if p.facts is not None]
    if not findings and reached:
        findings.append(Finding("env.required", Status.OK, f"{', '.join(required)} installed on all {len(reached)} "
                                                           f"reached nodes"))
    return findings
