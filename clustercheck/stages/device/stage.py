"""The device stage: every node's devices measured at once (gather.py), judged (rules.py), shown (render.py)."""

from __future__ import annotations

from typing import List, Sequence

from clustercheck.core.result import Finding
from clustercheck.node.layer import NodeLayer
from clustercheck.runner.stage import RenderedStage, StageResult
from clustercheck.stages.device import render
from clustercheck.stages.device.facts import METRICS, DeviceFacts
from clustercheck.stages.device.gather import gather_devices
from clustercheck.stages.device.options import DeviceOptions
from clustercheck.stages.device.rules import judge_devices
from clustercheck.stages.device.samples import device_samples

# the checks that hold measured figures: what --size asks for
FIGURES = tuple(sorted({f"device.{metric.split('.')[0]}" for metric, *_ in METRICS})) + ("device.measured",)


class DeviceStage(RenderedStage):
    options: DeviceOptions
    name = "device"
    answers = {"size": FIGURES}     # --seconds is how long, not a figure asked for
    render = render

    def gather(self, layer: NodeLayer) -> DeviceFacts:
        return gather_devices(layer.cluster, layer.nodes, self.options)

    def judge(self, facts: DeviceFacts) -> List[Finding]:
        return judge_devices(facts)

    def report_section(self, result: StageResult, images: Sequence[str]) -> List[str]:
        rows = render.table(result.facts, "github")
        return ["## Devices", "", render.headline(result.facts), "", *rows, ""] if rows else []

    def samples(self, result: StageResult):
        return device_samples(result.facts) if result.facts is not None else []
