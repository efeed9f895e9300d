"""What a healthy device of each model reaches, from published measurements (cited per row).

BF16 matmul: the maximum achievable matmul FLOPS (MAMF) ml-engineering measured with its
mamf-finder (github.com/stas00/ml-engineering, compute/accelerator/README.md, "Maximum Achievable
Matmul FLOPS comparison table"). The same page reports 5% and more between the GPUs of one node:
the device stage judges against its peers as well, and this table only catches a device far below.
Host link and peer copies: Azure's health checks (github.com/Azure/azurehpc-health-checks,
conf/nd96isr_h100_v5.conf and nd96amsr_a100_v4.conf: check_gpu_bw H2D/D2H and P2P floors) and the
nvbandwidth figures of ml-engineering's network README (H200: H2D 55.4, D2H 55.1 GB/s). GB200: Azure
checks its ND GB200 v6 trays with the same floors (conf/nd128isr_ndr_gb200_v6.conf, check_gpu_bw 48 335),
far under what its NVLink-C2C host link measured (nvbandwidth H2D 201, D2H 193 GB/s, AI-benchmarking-guide
Azure_Results/ND_GB200_v6_results.md): a link trained down still shows. B200: no published host-link or
peer measurement was found (Azure's health checks have no B200 configuration, and no nvbandwidth run on
B200 was published): none is claimed. HBM: the probe's on-GPU copy is judged against the node's peers only;
no model has a published figure of that copy here (B200 and GB200 included: only spec sheets and a bus
width read back from the driver, pytorch/ao pull 4002, were found, never a measured copy).
SKU variants differ by design (an H100 NVL has 12 of 18 NVLinks): these are floors for the SXM parts only.
"""

from __future__ import annotations

from typing import Optional

from clustercheck.node.facts import sxm_model_word

# model word -> BF16 MAMF in TFLOPS (ml-engineering compute/accelerator/README.md)
MAMF_BF16_TFLOPS = {"A100": 271.2, "H100": 794.5, "H200": 794.5, "GH200": 828.6, "B200": 1745.0, "B300": 1769.0,
                    "GB200": 1822.0, "MI300X": 668.4, "MI325X": 784.9, "MI355X": 1565.0}
# model word -> (H2D and D2H floor, P2P floor) in GB/s (Azure azurehpc-health-checks check_gpu_bw)
HOST_AND_PEER_GBS = {"H100": (48.0, 335.0), "H200": (48.0, 335.0), "A100": (21.0, 238.0), "GB200": (48.0, 335.0)}
GEMM_FLOOR = 0.75      # below this share of the model's MAMF a GPU is far off whatever its peers do


def model_of(name: str) -> Optional[str]:
    """The table's model word in a device name, for the SXM / OAM parts the figures are for (None otherwise)."""
    return sxm_model_word(name, MAMF_BF16_TFLOPS)     # longest first: GH200 before H200


def bf16_tflops(name: str) -> Optional[float]:
    model = model_of(name)
    return MAMF_BF16_TFLOPS.get(model) if model else None


def host_and_peer_floor(name: str):
    model = model_of(name)
    return HOST_AND_PEER_GBS.get(model) if model else None
