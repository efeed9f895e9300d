"""The all_reduce bus bandwidth a healthy cluster of this kind reaches, from published figures.

Selected from what the node layer found (GPU model and count, active InfiniBand / RoCE ports
and their rate); `[bench] expected_busbw` in clustercheck.toml or --expect-busbw overrides it.
A run below `expected_fraction` of it (default 0.9, as nccl-tests' own NCCL_TESTS_MIN_BW check,
which fails an average below 0.9x the value given) is a finding. Figures are for large
messages (8-16 GB); a sweep that stops below that is compared at its largest size, and says so.

One node, NVLink/NVSwitch (the ring figure when the run forced NCCL_ALGO=Ring):
- 8x H100 SXM: ~480 GB/s with NVLS (NCCL maintainer, github.com/NVIDIA/nccl-tests/issues/212;
  Azure measured 478.87 at 8 GB, github.com/Azure/AI-benchmarking-guide Azure_Results/
  ND_H100_v5_results.md); ~370 GB/s with NCCL_ALGO=Ring (same issue; NVIDIA/nccl/issues/1442).
- 8x H200: Azure measured 479.98 at 8 GB (AI-benchmarking-guide ND_H200_v5_results.md).
- 8x A100 SXM: ~230 GB/s at 8 GB (NCCL maintainer, NVIDIA/nccl-tests/issues/149; Azure measured
  231.58, ND_A100_v4_results.md).
- 8x V100 SXM: 110 GB/s, Azure's pass threshold at 8 GB (Azure/azurehpc-health-checks
  conf/nd40rs_v2.conf `check_nccl_allreduce 110.0`): a minimum, no typical figure was found.
- 4x GB200 (one compute tray of an NVL72, the GPUs a node holds): Azure ND GB200 v6 measured 679.61
  with NCCL_ALGO=Ring at 8 GB, NCCL 2.25.1 (AI-benchmarking-guide Azure_Results/ND_GB200_v6_results.md;
  Azure's pass threshold is 432 at 16 GB, azurehpc-health-checks conf/nd128isr_ndr_gb200_v6.conf). No
  NVLS figure for 4 GPUs was found: the Ring figure stands for both, as NCCL keeps to Ring at 4 GPUs (on
  4 GPUs of an HGX B200 it picked Ring with NVLS enabled: 673.2, and 673.8 without; ml-engineering below).
  Across the trays of one NVL72 the traffic stays on NVLink (72 GPUs measured 834.57-846.82 at 8 GB,
  coreweave/nccl-tests pull 43); the NIC figure below is then only a floor far under what the rack does.
- 8x B200 (HGX): ml-engineering measured 838.0 with NVLS (NCCL's choice) and 682.2 with NCCL_NVLS_ENABLE=0
  (the ring) at 8 GiB, nccl-tests on an AWS p6-b200.48xlarge, NCCL 2.27.7 (github.com/stas00/ml-engineering
  network/README.md, section "SHARP", at 744d01e18b79512572f64a6bbd8b5f4a725203a7; its all_reduce_bench.py
  on the same node type: 839.07 at 8 GiB, 845.67 at 16 GiB). One node, one measurement: no maintainer figure
  for B200 was found (a user reported "830+" on 8 B200, NVIDIA/nccl/issues/1807). Its NVLS figure rises only
  from 8 GiB (740.64 at 4 GiB, 723.34 at 1 GiB, same page): a sweep that stops below 8 GiB (the default 1G)
  is held to 740.6, never to a size it did not run (SMALLER_SWEEP).
Across nodes, the network is the bottleneck: per NIC, 12 GB/s at 100 Gb/s, 24 at 200 Gb/s
(NCCL maintainer, NVIDIA/nccl-tests/issues/119), 46-49 at 400 Gb/s NDR, ConnectX-7 (NVIDIA/nccl-tests/
issues/267, /290, /319: "up to ~396" for 8x 400G with Ring; Azure's GB200 trays check 48 GB/s per 400G
NIC in loopback, conf/nd128isr_ndr_gb200_v6.conf), ~95 at 800 Gb/s, ConnectX-8 (8x B300 + 8x CX8
per node: ~760 with Ring over 2-16 nodes, NVIDIA/nccl/issues/2035): 0.96x the line rate in bytes,
times the active ports per node (at most one per GPU: a ConnectX-8 split into two 400G planes counts
as one of them, so the figure is then low, never high). No figure is claimed for TCP sockets
or for Gloo on CPUs: there the report says there is none, and how to give one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from clustercheck.node.facts import Probed, get, gpus, sxm_model_word

PER_NIC_OF_LINE_RATE = 0.96

# (model, GPUs, busbw default algorithm, busbw with NCCL_ALGO=Ring or None, source); the model is a word
# of the GPU's name, of an SXM part only (sxm_model)
SINGLE_NODE = [
    ("GB200", 4, 679.6, 679.6, "4x GB200 (one NVL72 compute tray): Azure ND GB200 v6 measured 679.61 GB/s with "
                               "Ring at 8 GB (github.com/Azure/AI-benchmarking-guide ND_GB200_v6_results.md); "
                               "no NVLS figure for 4 GPUs published: the Ring figure stands for both"),
    ("B200", 8, 838.0, 682.2, "8x B200 (HGX): ml-engineering measured 838.0 GB/s with NVLS and 682.2 with "
                              "NCCL_NVLS_ENABLE=0 (the ring) at 8 GiB, nccl-tests, NCCL 2.27.7, AWS p6-b200.48xlarge "
                              "(github.com/stas00/ml-engineering network/README.md, SHARP)"),
    ("H200", 8, 480.0, None, "8x H200: Azure ND H200 v5 measured 479.98 GB/s at 8 GB "
                             "(github.com/Azure/AI-benchmarking-guide)"),
    ("H100", 8, 480.0, 370.0, "8x H100 SXM: ~480 GB/s with NVLS, ~370 with Ring (NCCL maintainer, "
                              "github.com/NVIDIA/nccl-tests/issues/212)"),
    ("A100", 8, 230.0, None, "8x A100 SXM: ~230 GB/s at 8 GB (NCCL maintainer, "
                             "github.com/NVIDIA/nccl-tests/issues/149)"),
    ("V100", 8, 110.0, None, "8x V100: 110 GB/s at 8 GB, Azure's pass threshold "
                             "(github.com/Azure/azurehpc-health-checks conf/nd40rs_v2.conf)"),
]


# model -> (size, GB/s, source): the figure a sweep whose largest message is under `size` is held to, where the
# table's own is reached only from that size on; with NCCL's default algorithm only (Ring has no such step)
SMALLER_SWEEP = {
    "B200": (8 * 2 ** 30, 740.6, "8x B200 under 8 GiB: ml-engineering measured 740.64 GB/s at 4 GiB and 723.34 at "
                                 "1 GiB (NVLS, NCCL 2.27.7, all_reduce_bench.py on a p6-b200.48xlarge; github.com/"
                                 "stas00/ml-engineering network/README.md); 838 from 8 GiB on (-e 8G)"),
}


@dataclass(frozen=True)
class Expected:
    gbps: float
    source: str
    smaller: Optional[Tuple[int, float, str]] = None    # SMALLER_SWEEP's row for these nodes

    def at_largest(self, largest: int) -> Tuple[float, str]:
        """The figure and its source for a sweep whose largest message is `largest` bytes."""
        if self.smaller and largest < self.smaller[0]:
            return self.smaller[1], self.smaller[2]
        return self.gbps, self.source


def gbits(rate: Optional[str]) -> Optional[float]:
    """'400 Gb/sec (4X NDR)' -> 400.0."""
    match = re.match(r"\s*([\d.]+)\s*Gb", rate or "")
    return float(match.group(1)) if match else None


def network_figure(probed: Sequence[Probed]) -> Optional[Expected]:
    """Active RDMA ports per node x 0.96 x their rate (the slowest node's), at most one per GPU."""
    per_node: List[float] = []
    for p in probed:
        ports = [gbits(port.get("rate")) for port in get(p.facts, "infiniband") or []
                 if isinstance(port, dict) and port.get("state") == "ACTIVE"]
        ports = sorted((r for r in ports if r), reverse=True)[:max(len(gpus(p.facts)), 1)]
        if not ports:
            return None
        per_node.append(sum(ports) / 8 * PER_NIC_OF_LINE_RATE)
    if not per_node:
        return None
    slowest = min(per_node)
    return Expected(slowest, f"{slowest:.0f} GB/s: active RDMA ports x 0.96 of their rate in GB/s (NCCL maintainers: "
                             "12 GB/s per 100G NIC, 24 per 200G, 46-49 per 400G; github.com/NVIDIA/nccl-tests/"
                             "issues/119, /319)")


def sxm_model(name: str) -> Optional[str]:
    """The table's model an SXM GPU's name holds as a word ("NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"
    -> "A100", "H100"); None for PCIe and NVL cards (no NVSwitch: "NVIDIA A100-PCIE-40GB", "NVIDIA H100 NVL")
    and for names the table does not hold ("A1000", "V100S")."""
    return sxm_model_word(name, [key for key, *_ in SINGLE_NODE])


def single_node_figure(probed: Probed, ring: bool) -> Optional[Expected]:
    node_gpus = gpus(probed.facts)
    if not node_gpus:
        return None
    model = sxm_model(node_gpus[0].get("name") or "")
    for key, count, default, ring_gbps, source in SINGLE_NODE:
        if key == model and len(node_gpus) == count:
            if ring and ring_gbps is None:
                return None
            return Expected(ring_gbps if ring else default, source + (" (Ring)" if ring else ""),
                            None if ring else SMALLER_SWEEP.get(key))
    return None


def published(probed: Sequence[Probed], backend: str, ring: bool) -> Optional[Expected]:
    """The published figure for these nodes, or None where none applies (Gloo, TCP, other GPUs)."""
    reached = [p for p in probed if p.facts is not None]
    if backend != "nccl" or not reached:
        return None
    if len(reached) == 1:
        return single_node_figure(reached[0], ring)
    return network_figure(reached)
