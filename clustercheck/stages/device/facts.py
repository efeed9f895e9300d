"""What the device probes reported (DeviceFacts) and each device's figures in one shape: the data the
device judges and views read; no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from clustercheck.core.inventory import Node
from clustercheck.stages.device import nvbandwidth

# (metric, how it is said, unit, scale from the probe's figure): the figures judged against peers
METRICS: List[Tuple[str, str, str, float]] = [
    ("gemm.bfloat16", "bf16 matmul", "TFLOPS", 1e-12), ("gemm.float16", "fp16 matmul", "TFLOPS", 1e-12),
    ("gemm.tf32", "tf32 matmul", "TFLOPS", 1e-12), ("gemm.float32", "fp32 matmul", "GFLOPS", 1e-9),
    ("gemm.fp8", "fp8 matmul", "TFLOPS", 1e-12),
    ("copy", "memory copy", "GB/s", 1e-9), ("h2d", "host to device", "GB/s", 1e-9),
    ("d2h", "device to host", "GB/s", 1e-9),
    # nvbandwidth's figures where it is installed: one GPU at a time, so never compared with the probe's own
    ("nvbw.h2d", "host to device (nvbandwidth)", "GB/s", 1e-9),
    ("nvbw.d2h", "device to host (nvbandwidth)", "GB/s", 1e-9),
]
UNIT = {metric: (text, unit, scale) for metric, text, unit, scale in METRICS}


@dataclass
class Device:
    """One GPU (or a CPU-only node) and what it did."""

    node: str
    index: int
    kind: str                        # cuda or cpu
    name: str
    pci: str = ""
    figures: Dict[str, float] = field(default_factory=dict)     # metric -> the probe's figure (FLOP/s, B/s)
    checksums: Dict[str, str] = field(default_factory=dict)     # dtype -> SHA-256 prefix of a seeded matmul
    samples: List[Dict] = field(default_factory=list)           # clocks, power, throttle, PCIe while loaded
    error: str = ""
    build: str = ""                  # torch (and CUDA) that computed it: bits are compared within one build
    not_measured: Dict[str, str] = field(default_factory=dict)  # what the probe left out and why (fp8 on an A100)

    @property
    def label(self) -> str:
        where = f" ({self.pci})" if self.pci else ""
        return f"{self.node}" if self.kind == "cpu" else f"GPU {self.index} on {self.node}{where}"

    @property
    def model(self) -> Tuple[str, str]:
        return self.kind, self.name


def devices_of(node: str, doc: Dict) -> List[Device]:
    found = []
    measured_by_nvbandwidth = nvbandwidth.figures(doc.get("nvbandwidth") or "")
    for entry in doc.get("devices") or []:
        figures = {f"gemm.{dtype}": rate for dtype, rate in (entry.get("gemm_flops") or {}).items()}
        for key, metric in (("copy_bytes_s", "copy"), ("h2d_bytes_s", "h2d"), ("d2h_bytes_s", "d2h")):
            if isinstance(entry.get(key), (int, float)):
                figures[metric] = entry[key]
        for metric in ("h2d", "d2h"):     # nvbandwidth's copy-engine figure, where it ran: a metric of its own
            row = measured_by_nvbandwidth.get(metric) or []
            index = int(entry.get("index", 0))
            if index < len(row) and row[index] is not None:
                figures[f"nvbw.{metric}"] = row[index] * 1e9
        found.append(Device(node, int(entry.get("index", 0)), entry.get("kind", doc.get("kind", "")),
                            entry.get("name", "?"), entry.get("pci_bus_id", ""), figures,
                            dict(entry.get("checksum") or {}), list(entry.get("samples") or []),
                            entry.get("error", ""), f"torch {doc.get('torch')} cuda {doc.get('cuda')}",
                            dict(entry.get("not_measured") or {})))
    return found


@dataclass
class DeviceFacts:
    nodes: List[Node]
    documents: Dict[str, Dict] = field(default_factory=dict)    # node -> the probe's document
    problems: Dict[str, str] = field(default_factory=dict)      # node -> why there is no document
    seconds: float = 0.0
    wall_s: float = 0.0

    @property
    def devices(self) -> List[Device]:
        return [d for node in self.nodes for d in devices_of(node.name, self.documents.get(node.name) or {})]

    def peers_matrix(self, node: str) -> List[List[Optional[float]]]:
        """Bytes/s of GPU i -> GPU j copies: nvbandwidth's where it ran, else the probe's."""
        doc = self.documents.get(node) or {}
        measured = nvbandwidth.figures(doc.get("nvbandwidth") or "").get("peers")
        matrix = ([[None if v is None else v * 1e9 for v in row] for row in measured] if measured
                  else doc.get("peers_bytes_s") or [])
        # a GPU's copy to itself is no link (nvbandwidth before v0.2 prints it as 0.00, later as N/A)
        return [[None if i == j else v for j, v in enumerate(row)] for i, row in enumerate(matrix)]
