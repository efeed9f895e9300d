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

from clustercheck.core.errors import InputError
from clustercheck.core.result import Finding, Status, worst
from clustercheck.display.findings import findings_lines
from clustercheck.node.facts import Probed, get, gpus
from clustercheck.planner.memory import (
    SHARDING_ORDER,
    ModeNeed,
    Shape,
    Workload,
    assumed_shape,
    by_mode,
    gib,
    needs,
    read_config,
)
from clustercheck.runner.options import opt

HEADROOM = 0.9   # a mode fits when states + activations take at most this share of a GPU (CUDA context,
                 # NCCL buffers and the allocator's fragmentation need the rest)
UNITS = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_count(text: str, what: str) -> int:
    match = re.fullmatch(r"\s*([\d.]+(?:E\d+)?)\s*([KMBGT]?)\s*", text.upper())
    if not match:
        raise InputError(f"{what} takes a number like 7B, 125M or 1.3e9", "command line", value=text)
    return int(float(match.group(1)) * UNITS[match.group(2)])


@dataclass
class PlanOptions:
    params: Optional[str] = opt("--params", help="Model parameters: 7B, 125M, 1.3e9 (a Llama shape is assumed).")
    model: Optional[str] = opt("--model", type=click.Path(), help="A Hugging Face model directory (or its config.json).")
    seq_len: int = opt("--seq-len", default=2048, type=click.IntRange(1), help="Tokens per sequence.", show_default=True)
    micro_batch: int = opt("--micro-batch", default=1, type=click.IntRange(1), help="Sequences per GPU per step.",
                           show_default=True)
    checkpointing: bool = opt("--gradient-checkpointing/--no-gradient-checkpointing", default=True,
                              help="Activations recomputed per layer (LLaMA-Factory's default).", show_default=True)
    lora_rank: int = opt("--lora-rank", default=8, type=click.IntRange(1), help="LoRA / QLoRA rank.",
                         show_default=True)
    gpus_per_node: Optional[int] = opt("--gpus-per-node", type=click.IntRange(1), help="Instead of asking the nodes.")
    num_nodes: Optional[int] = opt("--num-nodes", type=click.IntRange(1), help="Instead of counting the nodes file.")
    gpu_mem_gib: Optional[float] = opt("--gpu-mem", type=click.FloatRange(0.1),
                                       help="GiB per GPU, instead of asking the nodes.")
    cpu_mem_gib: Optional[float] = opt("--cpu-mem", type=click.FloatRange(0.1),
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
        smallest = smallest_node(probed)
        if not smallest.nodes or not any(smallest.gpu_lists):
            raise InputError("the nodes report no NVIDIA GPU: give --gpus-per-node and --gpu-mem", "command line")
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


@dataclass
class Smallest:
    """What the probed nodes have, the smallest of each: the plan must fit every node."""

    gpu_lists: List[List]     # each probed node's GPUs
    gpus: int                 # per node
    gpu_bytes: float          # of one GPU
    host_bytes: float         # of one node (0: not read)

    @property
    def nodes(self) -> int:
        return len(self.gpu_lists)


def smallest_node(probed: Sequence[Probed]) -> Smallest:
    found = [gpus(p.facts) for p in probed if p.facts]
    return Smallest(found, min((len(g) for g in found), default=0),
                    min((x.get("memory_mib") or 0 for g in found for x in g), default=0) * 2 ** 20,
                    min((get(p.facts, "host", "mem_total_bytes") or 0 for p in probed if p.facts), default=0))


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
    code = Status.FAIL.exit_code if worst(findings) is Status.FAIL else Status.OK.exit_code  # a WARN row is advice
    return "\n".join([*header, *findings_lines(findings, verbose=True)]), code


def plan_table(rows: List[ModeNeed], tablefmt: str = "simple") -> str:
    table = [[r.mode, gib(r.state_bytes), gib(r.activation_bytes), gib(r.gpu_bytes), gib(r.cpu_bytes), r.how]
             for r in rows]
    return tabulate(table, headers=["mode", "states GiB/GPU", "activations", "total", "host GiB/node", "what"],
                    tablefmt=tablefmt, floatfmt=".1f", disable_numparse=True)


def judge_plan(rows: List[ModeNeed], gpu_mem_bytes: float, cpu_mem_bytes: Optional[float]) -> List[Finding]:
    findings = []
    for row in rows:
        fits_gpu = row.gpu_bytes <= HEADROOM * gpu_mem_bytes
        fits_cpu = cpu_mem_bytes is None or row.cpu_bytes <= cpu_mem_bytes
        text = (f"{row.mode}: {gib(row.gpu_bytes)} GiB per GPU ({gib(row.state_bytes)} states + "
                f"{gib(row.activation_bytes)} activations)"
                + (f", {gib(row.cpu_bytes)} GiB host memory per node" if row.cpu_bytes else ""))
        if fits_gpu and row.cpu_bytes and cpu_mem_bytes is None:
            findings.append(Finding(f"plan.{row.mode}", Status.UNKNOWN, f"fits the GPU, host memory not checked: {text}",
                                    [], "give --cpu-mem, or a nodes file so the nodes are asked", []))
        elif fits_gpu and fits_cpu:
            headroom = gpu_mem_bytes - row.gpu_bytes
            findings.append(Finding(f"plan.{row.mode}", Status.OK, f"fits: {text}, {gib(headroom)} GiB to spare"))
        else:
            why = "GPU memory" if not fits_gpu else "host memory"
            findings.append(Finding(f"plan.{row.mode}", Status.WARN, f"does not fit ({why}): {text}", [],
                                    "shard more (ZeRO-3 / FSDP), offload to CPU, gradient checkpointing, a shorter "
                                    "sequence or smaller micro-batch, LoRA, or more GPUs", []))
    if not any(f.status is Status.OK for f in findings if f.check != "plan.inference"):
        findings.append(Finding("plan", Status.FAIL, "no training mode fits this model on these GPUs", [],
                                "more GPUs or nodes, a smaller model, a shorter sequence, or QLoRA", []))
    return findings


def sharding_violations(rows: List[ModeNeed]) -> List[str]:
    """Pairs where a mode that shards less needs less GPU memory than one that shards more (none, by design)."""
    need = {r.mode: r.gpu_bytes for r in rows}
    return [f"{a} < {b}" for a, b in SHARDING_ORDER if a in need and b in need and need[a] < need[b]]


def mode_fit(shape: Shape, probed: Sequence[Probed], mode: str, work: Workload) -> Optional[Finding]:
    """Does the run's mode fit the GPUs the nodes really have (the smallest sets it)? None on a CPU run."""
    smallest = smallest_node(probed)
    if not smallest.nodes or not all(smallest.gpu_lists):
        return None
    memory = smallest.gpu_bytes
    if not memory:
        return Finding("smoke.plan", Status.UNKNOWN, "could not plan the run's memory: the GPUs' memory was not read",
                       [], "run `clustercheck env` to see what the probe read", [])
    rows = by_mode(needs(shape, smallest.gpus, smallest.nodes, work))
    row = rows.get(mode)
    if row is None:   # a mode the plan has no row for (zero1-offload, optimizer-only ZeRO-3 offload): no claim
        return None
    fitting = [r.mode for r in rows.values() if r.mode != "inference" and r.gpu_bytes <= HEADROOM * memory]
    text = (f"{mode} needs {gib(row.gpu_bytes)} GiB per GPU ({gib(row.state_bytes)} states + "
            f"{gib(row.activation_bytes)} activations at {work.seq_len} tokens x micro-batch {work.micro_batch}) "
            f"of the smallest GPU's {gib(memory)} GiB")
    evidence = [f"model: {shape.source}"]
    host = smallest.host_bytes
    if row.cpu_bytes and (not host or row.cpu_bytes > host):
        return Finding("smoke.plan", Status.WARN if host else Status.UNKNOWN,
                       f"memory plan: {mode} needs {gib(row.cpu_bytes)} GiB of host memory per node" +
                       (f", more than the smallest node's {gib(host)} GiB" if host else ": host memory not read"),
                       evidence, "a mode without offload, or nodes with more memory", [])
    if row.gpu_bytes <= HEADROOM * memory:
        return Finding("smoke.plan", Status.OK, f"memory plan: {text}", evidence)
    return Finding("smoke.plan", Status.WARN, f"memory plan: {text}: more than {HEADROOM:.0%}, expect out of memory",
                   evidence, f"modes that fit: {', '.join(fitting) or 'none'}; see `clustercheck plan --model`", [])
