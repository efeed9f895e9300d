"""A run's results as metrics: each stage's findings and figures, the verdict, the time, the healthy and failed
nodes, handed to the metrics package (which builds from findings and samples alone, below the runner); and the
push of them (runner/output.py calls it for every command given --pushgateway)."""

from __future__ import annotations

import time
from typing import List, Sequence

from prometheus_client import CollectorRegistry

from clustercheck.core.result import Finding
from clustercheck.metrics.build import Sample, finding_samples, registry_of, run_samples
from clustercheck.metrics.export import push
from clustercheck.runner.healthy import failed_nodes
from clustercheck.runner.stage import RunResult, Stage


def run_registry(stages: Sequence[Stage], run: RunResult) -> CollectorRegistry:
    samples: List[Sample] = []
    by_name = {s.name: s for s in stages}
    for result in run.stages:
        samples += finding_samples(result.name, result.findings)
        samples.append(("clustercheck_stage_duration_seconds", {"stage": result.name}, result.wall_s))
        stage = by_name.get(result.name)
        if stage is not None and result.ran and result.facts is not None:
            samples += stage.samples(result)
    wall = sum(r.wall_s for r in run.stages)
    samples += run_samples(run.findings, wall, [n.name for n in run.nodes], failed_nodes(run), time.time())
    return registry_of(samples)


def push_run(url: str, stages: Sequence[Stage], run: RunResult, cluster: str) -> Finding:
    """Push the run; what became of the push is a finding of the run (a WARN when the gateway did not take it)."""
    finding = push(url, run_registry(stages, run), cluster)
    run.after.append(finding)
    return finding
