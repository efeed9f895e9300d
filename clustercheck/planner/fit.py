"""Which training modes fit: the plan's rows judged against the GPUs' and hosts' memory (plan and smoke).

Pure: no I/O, no flags. The rows come from the one accounting (memory.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

from clustercheck.core.result import Finding, Status
from clustercheck.node.facts import Probed, get, gpus
from clustercheck.planner.memory import SHARDING_ORDER, ModeNeed, Shape, Workload, by_mode, gib, needs

HEADROOM = 0.9   # a mode fits when states + activations take at most this share of a GPU (CUDA context,


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
