"""Run the reference trainer across the cluster and collect what its ranks report.

From the node layer's documents (interpreter, torch, GPUs, training interface), the
trainer's files are shipped into every node's run directory and started with torchrun on
all nodes at once (clustercheck.launch), under one deadline. No judging here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import click

import reference_train
from clustercheck.fanout import Cluster
from clustercheck.inventory import Node
from clustercheck.launch import (
    Launch,
    LaunchResult,
    choose_backend,
    ranks_per_node,
    readiness_problems,
    run_torchrun,
    ship,
)
from clustercheck.node.probe import Probed
from clustercheck.options import opt

TRAINER_DIR = os.path.dirname(os.path.abspath(reference_train.__file__))
TRAINER_FILES = ("entry.py", "train.py", "model.py", "data.py", "ds_config_zero1.json", "ds_config_zero2.json",
                 "ds_config_zero3.json", "ds_config_zero3_offload.json")


MODES = ("ddp", "zero1", "zero2", "zero3", "zero3-offload", "fsdp")


@dataclass
class SmokeOptions:
    mode: str = opt("--mode", default="ddp", type=click.Choice(MODES))
    preset: str = opt("--preset", default="tiny", type=click.Choice(["tiny", "small", "125m", "1b"]))
    steps: int = opt("--steps", default=30, type=click.IntRange(2))
    micro_batch: int = opt("--micro-batch", default=8, type=click.IntRange(1))
    precision: str = opt("--precision", default="fp32", type=click.Choice(["fp32", "bf16", "fp16"]),
                         help="bf16 / fp16 need GPUs.")
    data: Optional[str] = opt("--data", help="A .txt or .jsonl file to train on, at this path on every node "
                                             "(default: generated).")
    nproc_per_node: Optional[int] = opt("--nproc-per-node", type=click.IntRange(1),
                                        help="Ranks per node. Default: slots=, else the GPU count, else 1.")
    rdzv_port: int = opt("--rdzv-port", default=29401, type=click.IntRange(1, 65535))
    timeout_s: float = opt("--timeout", default=600.0, type=click.FloatRange(10),
                           help="Deadline in seconds for the whole run (the first DeepSpeed run compiles for "
                                "~100 s).")


@dataclass
class SmokeFacts:
    nodes: List[Node]
    probed: List[Probed]
    nproc: Dict[str, int] = field(default_factory=dict)
    stage: Optional[LaunchResult] = None
    problems: Dict[str, str] = field(default_factory=dict)


def trainer_args(options: SmokeOptions) -> List[str]:
    args = ["--mode", options.mode, "--preset", options.preset, "--steps", str(options.steps),
            "--micro-batch", str(options.micro_batch), "--precision", options.precision,
            "--log-every", str(max(1, options.steps // 10)), "--verify-checkpoint"]
    if options.data:
        args += ["--data", options.data]
    return args


def gather_smoke(cluster: Cluster, nodes: Sequence[Node], probed: List[Probed], options: SmokeOptions,
                 progress: Optional[Callable[[str, Dict], None]] = None) -> SmokeFacts:
    """probed: the node layer's documents (interpreter, torch, GPUs, training interface)."""
    facts = SmokeFacts(list(nodes), probed)
    facts.problems = readiness_problems(probed)
    if facts.problems:
        return facts
    facts.nproc = ranks_per_node(probed, options.nproc_per_node, choose_backend(probed, "auto") == "nccl")
    files = {}
    for name in TRAINER_FILES:
        with open(os.path.join(TRAINER_DIR, name), "rb") as handle:
            files[name] = handle.read()
    placed = ship(cluster, nodes, files, facts.problems)
    if facts.problems:
        return facts
    paths = {name: files_at["entry.py"] for name, files_at in placed.items()}
    launch = Launch("train", paths, trainer_args(options), facts.nproc, options.rdzv_port, options.timeout_s,
                    config={"mode": options.mode, "preset": options.preset, "steps": options.steps})
    facts.stage = run_torchrun(cluster, nodes, probed, launch, progress)
    return facts
