"""The metrics of a run or a node-check, in a prometheus_client registry: every finding's status per node, the
verdicts, the run's time, and the figures each stage measured (the stages' own `samples`). Pure: no I/O."""

from __future__ import annotations

import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from prometheus_client import CollectorRegistry, Gauge

from clustercheck.core.result import Finding, Status, worst
from clustercheck.metrics.schema import METRICS, NAGIOS_VALUE

Sample = Tuple[str, Dict[str, str], float]     # (metric, labels, value)


def nagios(status: Status) -> int:
    return NAGIOS_VALUE[status.name]


def finding_samples(stage: str, findings: Sequence[Finding]) -> List[Sample]:
    """One status per check and node (the worst where a check said several things); a check of the whole
    cluster has node ""."""
    worst_of: Dict[Tuple[str, str], Status] = {}
    for finding in (f for f in findings if f.checked):     # a note is no check: no status of its own
        for node in finding.nodes or [""]:
            key = (finding.check, node)
            worst_of[key] = max(worst_of.get(key, Status.OK), finding.status)
    samples = [("clustercheck_check_status", {"stage": stage, "check": check, "node": node}, nagios(status))
               for (check, node), status in sorted(worst_of.items())]
    if findings:
        samples.append(("clustercheck_stage_status", {"stage": stage}, nagios(worst(findings))))
    return samples


def run_samples(findings: Sequence[Finding], wall_s: float, nodes: Iterable[str], failed: Iterable[str],
                ended: Optional[float] = None) -> List[Sample]:
    failed = set(failed)
    nodes = list(nodes)
    return [("clustercheck_verdict", {}, nagios(worst(findings))),
            ("clustercheck_run_timestamp_seconds", {}, ended if ended is not None else time.time()),
            ("clustercheck_run_duration_seconds", {}, wall_s),
            ("clustercheck_nodes", {"health": "healthy"}, sum(1 for n in nodes if n not in failed)),
            ("clustercheck_nodes", {"health": "failed"}, sum(1 for n in nodes if n in failed))]


def registry_of(samples: Iterable[Sample]) -> CollectorRegistry:
    """The samples as gauges of the schema (a metric or label not in it is a broken invariant)."""
    registry = CollectorRegistry()
    gauges: Dict[str, Gauge] = {}
    for name, labels, value in samples:
        metric = METRICS[name]
        assert set(labels) == set(metric.labels), (name, labels)
        if name not in gauges:
            gauges[name] = Gauge(name, metric.help, metric.labels, registry=registry)
        gauge = gauges[name]
        (gauge.labels(**labels) if metric.labels else gauge).set(value)
    return registry
