"""`clustercheck preflight`: env, net, bench and smoke in that order, over one set of connections.

A stage whose premise failed is skipped with the reason: no bench or smoke when a node
could not be probed or lacks torch (torchrun would wait for it), nor when the mesh has
blocked ports (collectives would hang); no smoke when the bench's ranks failed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from clustercheck import __version__
from clustercheck.bench.gather import BenchOptions, gather_bench
from clustercheck.bench.rules import Expectations, judge_bench
from clustercheck.config import Config
from clustercheck.env import evaluate
from clustercheck.env.gather import probe_cluster
from clustercheck.fanout import Cluster, FanoutOptions
from clustercheck.inventory import Node
from clustercheck.net.gather import NetOptions, gather_net
from clustercheck.net.rules import judge_net
from clustercheck.result import Finding, Status, worst
from clustercheck.smoke.gather import SmokeOptions, gather_smoke
from clustercheck.smoke.rules import judge_smoke

STAGES = ("env", "net", "bench", "smoke")


def short_sweep(max_bytes: int = 16 * 2 ** 20, pairwise: bool = True, timeout_s: float = 600.0) -> BenchOptions:
    """preflight's bench: all_reduce from 1 MiB (or less) to max_bytes, then pairwise rounds of 1 MiB."""
    return BenchOptions(collectives=("all_reduce",), min_bytes=min(2 ** 20, max_bytes), max_bytes=max_bytes,
                        step_factor=4, iters=5, warmup=2, pairwise=pairwise, pair_bytes=2 ** 20, timeout_s=timeout_s)


@dataclass
class PreflightOptions:
    stages: Sequence[str] = STAGES
    config: Config = field(default_factory=Config)
    env_timeout_s: float = 60.0
    workdir: Optional[str] = None
    net: NetOptions = field(default_factory=NetOptions)
    bench: BenchOptions = field(default_factory=short_sweep)
    smoke: SmokeOptions = field(default_factory=SmokeOptions)


@dataclass
class StageResult:
    name: str
    findings: List[Finding] = field(default_factory=list)
    facts: object = None
    skipped: str = ""            # why it did not run
    wall_s: float = 0.0
    command: str = ""            # the single command that reproduces this stage

    @property
    def status(self) -> Status:
        return worst(self.findings)


@dataclass
class PreflightResult:
    nodes: List[Node]
    stages: Dict[str, StageResult]
    version: str = __version__

    @property
    def findings(self) -> List[Finding]:
        return [f for stage in self.stages.values() for f in stage.findings]

    @property
    def exit_code(self) -> int:
        return worst(self.findings).exit_code


def stage_commands(nodes_arg: str, options: PreflightOptions) -> Dict[str, str]:
    b, s, n = options.bench, options.smoke, options.net
    nodes_arg = f" {nodes_arg}" if nodes_arg else ""
    return {
        "env": f"clustercheck env{nodes_arg}",
        "net": f"clustercheck net{nodes_arg} --master-port {n.master_port} --samples {n.samples} "
               f"--attempt-timeout {n.attempt_timeout_s:g}",
        "bench": f"clustercheck bench{nodes_arg} -c {','.join(b.collectives)} -b {b.min_bytes} -e {b.max_bytes} "
                 f"-f {b.step_factor} -n {b.iters} -w {b.warmup}" + (f" --pairwise --pair-bytes {b.pair_bytes}"
                                                                    if b.pairwise else ""),
        "smoke": f"clustercheck smoke{nodes_arg} --mode {s.mode} --preset {s.preset} --steps {s.steps}",
    }


def blocking(stage: StageResult, checks: Sequence[str]) -> List[Finding]:
    return [f for f in stage.findings if f.status is Status.FAIL and any(f.check.startswith(c) for c in checks)]


def run_preflight(nodes: Sequence[Node], fanout: FanoutOptions, options: PreflightOptions, nodes_arg: str = "",
                  progress: Optional[Callable[[str, str], None]] = None) -> PreflightResult:
    say = progress or (lambda stage, text: None)
    commands = stage_commands(nodes_arg, options)
    results: Dict[str, StageResult] = {}
    with Cluster(nodes, fanout) as cluster:
        probed = None
        for name in STAGES:
            result = StageResult(name, command=commands[name])
            results[name] = result
            if name not in options.stages:
                result.skipped = "not selected"
                continue
            reason = _skip_reason(name, results, len(nodes))
            if reason:
                result.skipped = reason
                say(name, f"skipped: {reason}")
                continue
            say(name, "running")
            start = time.monotonic()
            if name == "env":
                probed = probe_cluster(cluster, nodes, options.env_timeout_s, workdir=options.workdir)
                env = evaluate(probed, options.config)
                result.facts, result.findings = env, env.findings
            elif name == "net":
                facts = gather_net(cluster, nodes, options.net)
                result.facts, result.findings = facts, judge_net(facts, options.net.master_port)
            elif name == "bench":
                facts = gather_bench(cluster, nodes, options.bench, probed=probed)
                result.facts, result.findings = facts, judge_bench(facts, Expectations(), options.bench.timeout_s)
            else:
                facts = gather_smoke(cluster, nodes, options.smoke, probed=probed)
                result.facts, result.findings = facts, judge_smoke(facts, options.smoke.timeout_s)
            seen = {(f.check, f.summary) for done in results.values() if done is not result for f in done.findings}
            result.findings = [f for f in result.findings if (f.check, f.summary) not in seen]  # net re-judges names
            result.wall_s = time.monotonic() - start
            say(name, f"{result.status.name} in {result.wall_s:.1f} s")
    return PreflightResult(list(nodes), results)


def _skip_reason(name: str, results: Dict[str, StageResult], num_nodes: int) -> str:
    env, net, bench = results.get("env"), results.get("net"), results.get("bench")
    if name in ("bench", "smoke") and env is not None:
        blockers = blocking(env, ("reach", "required."))
        if blockers:
            return f"env found nodes that cannot run torch: {blockers[0].summary}"
    if name in ("bench", "smoke") and net is not None and num_nodes > 1:
        blockers = blocking(net, ("net.inbound", "net.pair", "net.master", "reach"))
        if blockers:
            return f"collectives would hang on the network: {blockers[0].summary}"
    if name == "smoke" and bench is not None:
        blockers = blocking(bench, ("bench.sweep", "bench.pairwise.stage", "bench.node"))
        if blockers:
            return f"the bench's ranks failed: {blockers[0].summary}"
    return ""
