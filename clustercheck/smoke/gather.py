"""Run the reference trainer across the cluster and collect what its ranks report.

The env probe first (interpreter, torch, GPUs, training interface); then the trainer's
files are shipped into every node's run directory and started with torchrun on all
nodes at once (clustercheck.launch), under one deadline. No judging here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import reference_train
from clustercheck.env.gather import Probed, probe_cluster
from clustercheck.fanout import Cluster
from clustercheck.inventory import Node
from clustercheck.launch import Launch, Stage, choose_backend, ranks_per_node, readiness_problems, run_torchrun, ship

TRAINER_DIR = os.path.dirname(os.path.abspath(reference_train.__file__))
TRAINER_FILES = ("entry.py", "train.py", "model.py", "data.py", "ds_config_zero1.json", "ds_config_zero2.json",
                 "ds_config_zero3.json", "ds_config_zero3_offload.json")


@dataclass
class SmokeOptions:
    mode: str = "ddp"
    preset: str = "tiny"
    steps: int = 30
    micro_batch: int = 8
    precision: str = "fp32"
    data: Optional[str] = None          # a path on the nodes
    nproc_per_node: Optional[int] = None
    rdzv_port: int = 29401
    timeout_s: float = 600.0


@dataclass
class SmokeFacts:
    nodes: List[Node]
    probed: List[Probed]
    nproc: Dict[str, int] = field(default_factory=dict)
    stage: Optional[Stage] = None
    problems: Dict[str, str] = field(default_factory=dict)


def trainer_args(options: SmokeOptions) -> List[str]:
    args = ["--mode", options.mode, "--preset", options.preset, "--steps", str(options.steps),
            "--micro-batch", str(options.micro_batch), "--precision", options.precision,
            "--log-every", str(max(1, options.steps // 10)), "--verify-checkpoint"]
    if options.data:
        args += ["--data", options.data]
    return args


def gather_smoke(cluster: Cluster, nodes: Sequence[Node], options: SmokeOptions,
                 progress: Optional[Callable[[str, Dict], None]] = None,
                 probed: Optional[List[Probed]] = None) -> SmokeFacts:
    """probed: the env probe's results when the caller has them already (preflight)."""
    probed = probed if probed is not None else probe_cluster(cluster, nodes, 60.0)
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
