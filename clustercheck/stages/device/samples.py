"""The device stage's figures as metric samples (clustercheck/metrics/schema.py): each device's rate beside its
peers' median and its model's published figure. Pure: from DeviceFacts."""

from __future__ import annotations

from typing import Dict, List

from clustercheck.core.compare import median
from clustercheck.metrics.build import Sample
from clustercheck.stages.device import expected
from clustercheck.stages.device.facts import DeviceFacts

COPIES = {"copy": "d2d", "h2d": "h2d", "d2h": "d2h"}


def device_samples(facts: DeviceFacts) -> List[Sample]:
    devices = [d for d in facts.devices if not d.error]
    groups: Dict = {}
    for device in devices:
        groups.setdefault(device.model, []).append(device)
    samples: List[Sample] = []
    for device in devices:
        peers = [d for d in groups[device.model] if d is not device]
        for metric, value in sorted(device.figures.items()):
            others = [p.figures[metric] for p in peers if metric in p.figures]
            if metric.startswith("gemm."):
                dtype = metric.split(".", 1)[1]
                labels = {"node": device.node, "device": str(device.index), "dtype": dtype}
                samples.append(("clustercheck_device_flops", labels, value))
                if others:
                    samples.append(("clustercheck_device_flops_peers_median", labels, median(others)))
                published = expected.bf16_tflops(device.name) if dtype in ("bfloat16", "bf16") else None
                if published:
                    samples.append(("clustercheck_device_flops_expected", labels, published * 1e12))
            elif metric in COPIES:
                labels = {"node": device.node, "device": str(device.index), "direction": COPIES[metric]}
                samples.append(("clustercheck_device_copy_bytes_per_second", labels, value))
                if others:
                    samples.append(("clustercheck_device_copy_peers_median_bytes_per_second", labels, median(others)))
    return samples
