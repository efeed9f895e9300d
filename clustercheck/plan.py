"""`clustercheck plan`: the per-GPU memory each training mode needs for a model size.

Model states only (weights, gradients, optimizer states; activations come on top):
- DDP with mixed-precision Adam keeps 16 bytes per parameter on every GPU (2 fp16
  weights + 2 fp16 grads + 12 fp32 weights and Adam moments), and ZeRO-1 shards the 12:
  4 + 12/N bytes (Rajbhandari et al., "ZeRO", SC20, section 3).
- ZeRO-2, ZeRO-3 and their CPU-offload variants use DeepSpeed's own estimators
  (estimate_zero2_model_states_mem_needs, estimate_zero3_model_states_mem_needs), with
  their 1.5x buffer factor for CPU memory.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, replace
from typing import List, Optional, Sequence

import click

from clustercheck.errors import InputError
from clustercheck.node.facts import get, gpus
from clustercheck.node.probe import Probed
from clustercheck.options import opt
from clustercheck.render import findings_lines
from clustercheck.result import Finding, Status, worst

HEADROOM = 0.8   # a mode "fits" when its model states take at most this share of GPU memory
UNITS = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_count(text: str, what: str) -> int:
    match = re.fullmatch(r"\s*([\d.]+(?:E\d+)?)\s*([KMBGT]?)\s*", text.upper())
    if not match:
        raise InputError(f"{what} takes a number like 7B, 125M or 1.3e9", "command line", value=text)
    return int(float(match.group(1)) * UNITS[match.group(2)])


@dataclass
class PlanOptions:
    params: str = opt("--params", required=True, help="Model parameters: 7B, 125M, 1.3e9.")
    gpus_per_node: Optional[int] = opt("--gpus-per-node", type=click.IntRange(1), help="Instead of asking the nodes.")
    num_nodes: Optional[int] = opt("--num-nodes", type=click.IntRange(1), help="Instead of counting the nodes file.")
    gpu_mem_gib: Optional[float] = opt("--gpu-mem", type=click.FloatRange(0.1),
                                       help="GiB per GPU, instead of asking the nodes.")
    cpu_mem_gib: Optional[float] = opt("--cpu-mem", type=click.FloatRange(0.1),
                                       help="GiB of host memory per node (for offload).")
    largest_layer: Optional[str] = opt("--largest-layer",
                                       help="Parameters of the largest layer (ZeRO-3). Default: 2% of --params.")

    def validate(self) -> None:
        """Bad counts are bad input, found before any node is contacted."""
        parse_count(self.params, "--params")
        if self.largest_layer:
            parse_count(self.largest_layer, "--largest-layer")

    @property
    def needs_nodes(self) -> bool:
        """The GPUs must be asked for: the command line does not say them."""
        return self.gpus_per_node is None or self.gpu_mem_gib is None

    def with_nodes(self, probed: Sequence[Probed]) -> "PlanOptions":
        """The gaps filled from the node layer's documents: the smallest node sets the plan."""
        found = [gpus(p.facts) for p in probed if p.facts]
        if not found or not any(found):
            raise InputError("the nodes report no NVIDIA GPU: give --gpus-per-node and --gpu-mem", "command line")
        return replace(
            self, gpus_per_node=self.gpus_per_node or min(len(g) for g in found),
            gpu_mem_gib=self.gpu_mem_gib or min(x.get("memory_mib") or 0 for g in found for x in g) / 1024,
            num_nodes=self.num_nodes or len(found),
            cpu_mem_gib=self.cpu_mem_gib or min(get(p.facts, "host", "mem_total_bytes", default=0)
                                                for p in probed if p.facts) / 2 ** 30)


def plan_text(options: PlanOptions) -> "tuple[str, int]":
    """The plan as the command prints it, and its exit code (2 when no mode fits)."""
    total = parse_count(options.params, "--params")
    layer = parse_count(options.largest_layer, "--largest-layer") if options.largest_layer else max(1, total // 50)
    num_nodes = options.num_nodes or 1
    rows = needs(total, options.gpus_per_node, num_nodes, layer)
    cpu = options.cpu_mem_gib * 2 ** 30 if options.cpu_mem_gib else None
    findings = judge_plan(rows, options.gpu_mem_gib * 2 ** 30, cpu)
    header = (f"clustercheck plan: {total / 1e9:g}B parameters on {num_nodes} node(s) x {options.gpus_per_node} "
              f"GPU(s) of {options.gpu_mem_gib:g} GiB; a mode fits if its model states take at most {HEADROOM:.0%} "
              f"of a GPU (activations need the rest)\n")
    code = Status.FAIL.exit_code if worst(findings) is Status.FAIL else Status.OK.exit_code  # a WARN row is advice
    return "\n".join([header, *findings_lines(findings, verbose=True)]), code


@dataclass
class ModeNeed:
    mode: str
    gpu_bytes: float           # per GPU
    cpu_bytes: float           # per node
    source: str


def needs(params: int, gpus_per_node: int, nodes: int, largest_layer: int) -> List[ModeNeed]:
    total_gpus = gpus_per_node * nodes
    rows = [ModeNeed("ddp", 16 * params, 0, "ZeRO paper: 16 bytes/param"),
            ModeNeed("zero1", 4 * params + 12 * params / total_gpus, 0, "ZeRO paper: 4 + 12/N bytes/param")]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
            from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    except ImportError:
        return rows
    for offload, name in ((False, "zero2"), (True, "zero2-offload")):
        cpu, gpu = estimate_zero2_model_states_mem_needs(params, gpus_per_node, nodes, cpu_offload=offload)
        rows.append(ModeNeed(name, gpu, cpu, "DeepSpeed estimator"))
    for offload, name in ((False, "zero3"), (True, "zero3-offload")):
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(params, largest_layer, gpus_per_node, nodes,
                                                            cpu_offload=offload, cpu_offload_params=offload)
        rows.append(ModeNeed(name, gpu, cpu, "DeepSpeed estimator"))
    return rows


def judge_plan(rows: List[ModeNeed], gpu_mem_bytes: float, cpu_mem_bytes: Optional[float]) -> List[Finding]:
    findings = []
    for row in rows:
        fits_gpu = row.gpu_bytes <= HEADROOM * gpu_mem_bytes
        fits_cpu = cpu_mem_bytes is None or row.cpu_bytes <= cpu_mem_bytes
        text = (f"{row.mode}: {row.gpu_bytes / 2 ** 30:.1f} GiB per GPU"
                + (f", {row.cpu_bytes / 2 ** 30:.1f} GiB CPU per node" if row.cpu_bytes else "")
                + f" ({row.source})")
        if fits_gpu and fits_cpu:
            findings.append(Finding(f"plan.{row.mode}", Status.OK, f"fits: {text}"))
        else:
            why = "GPU memory" if not fits_gpu else "CPU memory"
            findings.append(Finding(f"plan.{row.mode}", Status.WARN, f"does not fit ({why}): {text}", [],
                                    "shard more (ZeRO-3 / FSDP), offload to CPU, or add GPUs", []))
    if not any(f.status is Status.OK for f in findings):
        findings.append(Finding("plan", Status.FAIL, "no mode fits this model on these GPUs", [],
                                "more GPUs or nodes, a smaller model, or parameter-efficient fine-tuning (LoRA)", []))
    return findings
