"""The env stage: gathers every node's probe (and shared directories, and Slurm's view), judges, shows."""

from __future__ import annotations

from typing import Dict, List, Sequence

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status, note, worst
from clustercheck.core.thresholds import load_config
from clustercheck.node.layer import NodeLayer
from clustercheck.node.readiness import readiness_problems
from clustercheck.node.slurm import read_slurm
from clustercheck.runner.stage import Stage, StageResult
from clustercheck.stages.env import render, topology
from clustercheck.stages.env.facts import EnvFacts, env_facts
from clustercheck.stages.env.baseline import baseline_document, read_baseline, write_baseline
from clustercheck.stages.env.judges import judge
from clustercheck.stages.env.options import EnvOptions
from clustercheck.stages.env.packages import package_view
from clustercheck.stages.env.rules import EnvContext
from clustercheck.stages.env.slurm_rules import judge_slurm
from clustercheck.stages.env.storage import judge_shared, probe_shared


class EnvStage(Stage):
    name = "env"
    answers = {"required": ("required",), "baseline": ("baseline",), "shared_dir": ("storage",)}

    def __init__(self, options: EnvOptions):
        super().__init__(options)
        self.config = load_config(options.config_path)   # bad input stops before any node is contacted
        self.baseline = read_baseline(options.baseline) if options.baseline else None

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
        findings = judge(EnvContext(facts.probed, facts.values, self.config.env, list(self.options.wanted),
                                    self.baseline))
        for directory, views in facts.shared.items():
            findings += judge_shared(directory, views, [n for n in (p.name for p in facts.probed) if n in views])
        if facts.slurm is not None:
            findings += judge_slurm(facts.slurm, [p.name for p in facts.probed],
                                    {p.name: p.gpu_count for p in facts.probed if p.facts is not None})
        return findings

    def write(self, result: StageResult) -> List[Finding]:
        """--save-baseline, once judged (the judge writes nothing)."""
        return [self.save_baseline(result.facts, result.findings)] if self.options.save_baseline else []

    def save_baseline(self, facts: EnvFacts, findings: List[Finding]) -> Finding:
        """--save-baseline: the environment of a READY run (with warnings at most), else not written."""
        path = self.options.save_baseline
        if worst(findings) > Status.WARN:
            return Finding("baseline.saved", Status.WARN, f"baseline not written to {path}: this run is not READY",
                           [], "fix what failed, then save the baseline from a READY run")
        view = package_view(facts.probed)
        try:
            write_baseline(path, baseline_document(view, facts.values, [p.name for p in facts.probed]))
        except OSError as exc:
            return Finding("baseline.saved", Status.WARN, f"baseline not written to {path}: {exc.strerror}", [],
                           "choose a writable path for --save-baseline")
        count = len({n for dists in view.dists.values() for n in dists})
        return note("baseline.saved", f"baseline of {count} packages on {len(view.dists)} nodes written to {path}")

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
