"""`clustercheck plan`: the GPU memory each training mode needs, and which fit the cluster's GPUs.

The figures come from one accounting (clustercheck/planner/memory.py): model states per mode from
the same five components, activations from the model's shape and the workload. The model's
shape comes from `--model DIR` (its config.json) or, with only `--params`, a Llama shape of
that size, labelled as assumed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import List, Optional, Sequence

import click
from tabulate import tabulate

from clustercheck.core.errors import InputError, NotChecked
from clustercheck.core.result import Status, worst
from clustercheck.display.findings import findings_lines
from clustercheck.node.facts import Probed
from clustercheck.planner.fit import HEADROOM, judge_plan, smallest_node
from clustercheck.planner.memory import (
    ModeNeed,
    Shape,
    Workload,
    assumed_shape,
    gib,
    needs,
    read_config,
)
from clustercheck.runner.options import FiniteRange, opt

                 # NCCL buffers and the allocator's fragmentation need the rest)
UNITS = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


MAX_COUNT = 1e15   # a quadrillion parameters: far beyond any model, and the accounting stays exact below it


def parse_count(text: str, what: str) -> int:
    """A count like 7B, 125M or 1.3e9: at least 1 and at most MAX_COUNT, or bad input naming the flag."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)(?:E([+-]?\d{1,3}))?\s*([KMBGT]?)\s*", text.upper())
    if not match:
        raise InputError(f"{what} takes a number like 7B, 125M or 1.3e9", "command line", value=text)
    exponent = int(match.group(2) or 0)
    value = float(match.group(1)) * 10.0 ** max(-30, min(exponent, 30)) * UNITS[match.group(3)]
    if not 1 <= value <= MAX_COUNT or abs(exponent) > 30:
        raise InputError(f"{what} must be at least 1 and at most {MAX_COUNT:.0e}", "command line", value=text)
    return int(value)


@dataclass
class PlanOptions:
    params: Optional[str] = opt("--params", help="Model parameters: 7B, 125M, 1.3e9 (a Llama shape is assumed).")
    model: Optional[str] = opt("--model", type=click.Path(), help="A Hugging Face model directory (or its config.json).")
    seq_len: int = opt("--seq-len", default=2048, type=click.IntRange(1, 16_777_216), help="Tokens per sequence.", show_default=True)
    micro_batch: int = opt("--micro-batch", default=1, type=click.IntRange(1, 1_048_576), help="Sequences per GPU per step.",
                           show_default=True)
    checkpointing: bool = opt("--gradient-checkpointing/--no-gradient-checkpointing", default=True,
                              help="Activations recomputed per layer (LLaMA-Factory's default).", show_default=True)
    lora_rank: int = opt("--lora-rank", default=8, type=click.IntRange(1, 65536), help="LoRA / QLoRA rank.",
                         show_default=True)
    gpus_per_node: Optional[int] = opt("--gpus-per-node", type=click.IntRange(1, 1024), help="Instead of asking the nodes.")
    num_nodes: Optional[int] = opt("--num-nodes", type=click.IntRange(1, 1_000_000), help="Instead of counting the nodes file.")
    gpu_mem_gib: Optional[float] = opt("--gpu-mem", type=FiniteRange(0.1),
                                       help="GiB per GPU, instead of asking the nodes.")
    cpu_mem_gib: Optional[float] = opt("--cpu-mem", type=FiniteRange(0.1),
                                       help="GiB of host memory per node (for offload).")
    largest_layer: Optional[str] = opt("--largest-layer",
                                       help="Parameters of the largest layer gathered whole (ZeRO-3, FSDP). Default: the "
                                            "larger of the embedding and one block.")

    def validate(self) -> None:
        """Bad counts are bad input, found before any node is contacted."""
        if not self.params and not self.model:
            raise InputError("give --params (7B, 125M) or --model DIR", "command line")
        if self.params:
            parse_count(self.params, "--params")
        if self.model:
            read_config(self.model)
        if self.largest_layer:
            parse_count(self.largest_layer, "--largest-layer")

    @property
    def needs_nodes(self) -> bool:
        """The GPUs must be asked for: the command line does not say them."""
        return self.gpus_per_node is None or self.gpu_mem_gib is None

    def with_nodes(self, probed: Sequence[Probed]) -> "PlanOptions":
        """The gaps filled from the node layer's documents: the smallest node sets the plan."""
        if not any(p.facts is not None for p in probed):
            raise NotChecked(f"no node answered ({', '.join(p.problem or p.name for p in probed[:3])}): the GPUs "
                             f"could not be read; give --gpus-per-node and --gpu-mem, or reach the nodes")
        smallest = smallest_node(probed)
        if not smallest.nodes or not any(smallest.gpu_lists):
            # what the nodes said, not what the user typed: could not plan (3), never bad input after a node answered
            raise NotChecked("the nodes report no NVIDIA GPU, so no GPU memory to plan for: give --gpus-per-node and "
                             "--gpu-mem")
        return replace(
            self, gpus_per_node=self.gpus_per_node or smallest.gpus,
            gpu_mem_gib=self.gpu_mem_gib or smallest.gpu_bytes / 2 ** 30,
            num_nodes=self.num_nodes or smallest.nodes,
            cpu_mem_gib=self.cpu_mem_gib or smallest.host_bytes / 2 ** 30)

    def shape(self) -> Shape:
        shape = read_config(self.model) if self.model else assumed_shape(parse_count(self.params, "--params"))
        if self.model and self.params:   # the config sets the shape; --params the count, when given
            shape = replace(shape, params=parse_count(self.params, "--params"))
        return shape

    def workload(self) -> Workload:
        return Workload(seq_len=self.seq_len, micro_batch=self.micro_batch, checkpointing=self.checkpointing,
                        lora_rank=self.lora_rank)


def plan_text(options: PlanOptions) -> "tuple[str, int]":
    """The plan as the command prints it, and its exit code (2 when no mode fits)."""
    shape = options.shape()
    if options.largest_layer:
        shape = replace(shape, largest_layer_override=parse_count(options.largest_layer, "--largest-layer"))
    work = options.workload()
    num_nodes = options.num_nodes or 1
    rows = needs(shape, options.gpus_per_node, num_nodes, work)
    cpu = options.cpu_mem_gib * 2 ** 30 if options.cpu_mem_gib else None
    findings = judge_plan(rows, options.gpu_mem_gib * 2 ** 30, cpu)
    header = [f"clustercheck plan: {shape.params / 1e9:.3g}B parameters on {num_nodes} node(s) x "
              f"{options.gpus_per_node} GPU(s) of {options.gpu_mem_gib:g} GiB",
              f"  model: {shape.source}",
              f"  workload: sequences of {work.seq_len} tokens, micro-batch {work.micro_batch} per GPU, gradient "
              f"checkpointing {'on' if work.checkpointing else 'off'}, LoRA rank {work.lora_rank}",
              f"  a mode fits when its states + activations take at most {HEADROOM:.0%} of a GPU (and its host "
              f"memory fits a node); accounting: clustercheck/planner/memory.py", "", plan_table(rows), ""]
    verdict = worst(findings)   # a WARN row is advice: the plan still exits 0; what could not be judged is 3
    code = Status.OK.exit_code if verdict is Status.WARN else verdict.exit_code
    return "\n".join([*header, *findings_lines(findings, verbose=True)]), code


def plan_table(rows: List[ModeNeed], tablefmt: str = "simple") -> str:
    table = [[r.mode, gib(r.state_bytes), gib(r.activation_bytes), gib(r.gpu_bytes), gib(r.cpu_bytes), r.how]
             for r in rows]
    return tabulate(table, headers=["mode", "states GiB/GPU", "activations", "total", "host GiB/node", "what"],
                    tablefmt=tablefmt, floatfmt=".1f", disable_numparse=True)


