"""Run the device probe (clustercheck/onnode/device_probe.py) on every node at once: every node waits for
one moment (--start-at), so the devices are measured under the same load; each run has its deadline."""

from __future__ import annotations

import time
from typing import Sequence

from clustercheck.core.inventory import Node
from clustercheck.node.facts import interpreter
from clustercheck.node.gather import read_document
from clustercheck.onnode import inline_command
from clustercheck.onnode.device_probe import DCGM_DEADLINE_S, NVBANDWIDTH_DEADLINE_S
from clustercheck.stages.device.facts import DeviceFacts
from clustercheck.stages.device.options import DeviceOptions
from clustercheck.transport.base import NodeResult, Transport
from clustercheck.transport.fanout import Cluster


def gather_devices(cluster: Cluster, nodes: Sequence[Node], options: DeviceOptions) -> DeviceFacts:
    facts = DeviceFacts(list(nodes), seconds=options.seconds)
    started = time.monotonic()
    margin = options.start_margin_s if len(nodes) > 1 else 0.0   # one node has nobody to start with
    start_at = time.time() + margin
    deadline = (margin + options.import_s + 4 * options.seconds + NVBANDWIDTH_DEADLINE_S
                + (DCGM_DEADLINE_S[options.dcgm_level] + 10 if options.dcgm_level else 0))

    def measure(transport: Transport, node: Node) -> NodeResult:
        args = ["--seconds", f"{options.seconds:g}", "--start-at", f"{start_at:.3f}", "--size", str(options.size),
                "--dcgm", str(options.dcgm_level)]
        return transport.run(inline_command(interpreter(node), "device_probe", args), deadline)

    by_name = {node.name: node for node in nodes}
    what = f"measuring every device ({options.seconds:g} s a test; the CPU where there is no GPU)"
    for result in cluster.each(measure, nodes, what=what):
        doc, problem = read_document(by_name[result.node], result)
        if doc is not None:
            facts.documents[result.node] = doc
        if problem or (doc or {}).get("error"):
            facts.problems[result.node] = problem or doc["error"]
    facts.wall_s = time.monotonic() - started
    return facts
