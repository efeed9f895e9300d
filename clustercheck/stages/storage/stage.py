"""The storage stage: every node's checkpoint (and data) directory measured at once (gather.py), judged
(rules.py, coherence.py), shown (render.py)."""

from __future__ import annotations

from typing import List, Sequence

from clustercheck.core.compare import median
from clustercheck.core.result import Finding, Status
from clustercheck.node.layer import NodeLayer
from clustercheck.node.readiness import ranks_per_node
from clustercheck.runner.stage import RenderedStage, Stage, StageResult
from clustercheck.stages.storage import render
from clustercheck.stages.storage.facts import StorageFacts
from clustercheck.stages.storage.gather import gather_storage
from clustercheck.stages.storage.options import StorageOptions
from clustercheck.stages.storage.rules import judge_storage
from clustercheck.stages.storage.estimate import rates


class StorageStage(RenderedStage):
    options: StorageOptions
    name = "storage"
    answers = {"params": ("storage.estimate",), "model": ("storage.estimate",), "preset": ("storage.estimate",),
               "mode": ("storage.estimate",), "precision": ("storage.estimate",),
               "step_seconds": ("storage.estimate",), "save_every": ("storage.estimate",),
               "checkpoint_dir": ("storage.estimate", "storage.space"), "keep": ("storage.space",),
               "data_dir": ("storage.data",)}
    render = render

    def gather(self, layer: NodeLayer) -> StorageFacts:
        probed = layer.probed()
        reached = [p for p in probed if p.facts is not None]
        ranks = ranks_per_node(reached, self.options.nproc_per_node, any(p.gpu_count for p in reached))
        facts = gather_storage(layer.cluster, [p.node for p in reached], ranks, self.options)
        facts.problems.update({p.name: p.problem or "not reached" for p in probed if p.facts is None})
        facts.nodes = [p.node for p in probed]
        return facts

    def judge(self, facts: StorageFacts) -> List[Finding]:
        return judge_storage(facts)

    def blocks(self, result: StageResult, later: Stage) -> str:
        """A checkpoint that cannot be written, or will not fit, makes training pointless: nobody trains."""
        failed = [f for f in result.findings
                  if f.check in ("storage.write", "storage.space") and f.status is Status.FAIL]
        if not later.launches_ranks or not failed:
            return ""
        return f"storage: {failed[0].summary}"

    def report_section(self, result: StageResult, images: Sequence[str]) -> List[str]:
        rows = render.table(result.facts, "github")
        return ["## Storage", "", render.headline(result.facts), "", *rows, ""] if rows else []

    def samples(self, result: StageResult):
        """Each node's write, read and data rate beside the other nodes' median (those measured enough to judge)."""
        if result.facts is None:
            return []
        found = []
        for phase in ("write", "read", "data"):
            measured = rates(result.facts, phase)
            for node, throughput in measured.items():
                found.append(("clustercheck_storage_bytes_per_second", {"node": node, "phase": phase},
                              throughput.rate))
                others = [t.rate for n, t in measured.items() if n != node]
                if others:
                    found.append(("clustercheck_storage_peers_median_bytes_per_second",
                                  {"node": node, "phase": phase}, median(others)))
        return found
