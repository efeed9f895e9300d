"""The net stage: the probes' listeners and mesh (gather.py), judged (rules.py), shown (render.py)."""

from __future__ import annotations

from typing import List, Sequence

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding
from clustercheck.node.layer import NodeLayer
from clustercheck.runner.stage import RenderedStage, Stage, StageResult
from clustercheck.stages.net import render
from clustercheck.stages.net.facts import NetFacts
from clustercheck.stages.net.gather import gather_net, listener_documents
from clustercheck.stages.net.options import NetOptions
from clustercheck.stages.net.rules import judge_net


class NetStage(RenderedStage):
    options: NetOptions
    name = "net"
    answers = {"links": ("net.link",), "stream_s": ("net.link",), "node_ssh": ("net.ssh",)}
    render = render

    def gather(self, layer: NodeLayer) -> NetFacts:
        facts = gather_net(layer.cluster, layer.nodes, self.options)
        # The listeners report the probe's host / net / env sections: they stand for the probe when
        # no stage probed before (net alone costs one exec fewer per node).
        layer.offer(listener_documents(facts))
        facts.probed = layer.known
        return facts

    def judge(self, facts: NetFacts) -> List[Finding]:
        return judge_net(facts)

    def blocks(self, result: StageResult, later: Stage) -> str:
        """Ranks cannot meet or talk across blocked ports: torchrun stages would hang."""
        facts: NetFacts = result.facts
        if not later.launches_ranks or len(facts.nodes) < 2:
            return ""
        if facts.problems:
            first = next(iter(facts.problems))
            return f"collectives would hang on the network: no listener on {fold(list(facts.problems))} " \
                   f"({first}: {facts.problems[first]})"
        if not facts.master_bound():
            ports = ", ".join(map(str, facts.launch_ports))
            return f"collectives would hang on the network: a launch port ({ports}) is in use on {facts.master}"
        failed = facts.blocking_failures()
        if failed:
            source, target, port, state, _ = failed[0]
            more = f" (and {len(failed) - 1} more failed connections)" if len(failed) > 1 else ""
            return f"collectives would hang on the network: {source} -> {target}:{port} {state}{more}"
        return ""

    def report_section(self, result: StageResult, images: Sequence[str]) -> List[str]:
        matrix = render.matrix_lines(result.facts, "github")
        return ["## Network", "", matrix[0], "", f"`{matrix[1]}`", ""] if matrix else []
