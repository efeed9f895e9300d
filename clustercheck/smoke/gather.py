"""Run the reference trainer across the cluster and collect what its ranks report.

From the node layer's documents (interpreter, torch, GPUs, training interface), the
trainer's files are shipped into every node's run directory and started with torchrun on
all nodes at once (clustercheck.launch), under one deadline. No judging here.
"""

from __future__ import annotations

import os
import shlex
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import click

import reference_train
from clustercheck.fanout import Cluster
from clustercheck.inventory import Node
from clustercheck.launch import (
    DEFAULT_RDZV_PORT,
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
TRAINER_FILES = ("entry.py", "train.py", "model.py", "data.py", "checks.py", "ds_config_zero1.json",
                 "ds_config_zero2.json", "ds_config_zero3.json", "ds_config_zero3_offload.json")
REFERENCE_PRESETS = ("tiny", "small")   # small enough for one process to recompute the first steps
REFERENCE_STEPS = 10
RESUMED_STEPS = 5                       # steps run again after the checkpoint, in fresh processes


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
    rdzv_port: int = opt("--rdzv-port", default=DEFAULT_RDZV_PORT, type=click.IntRange(1, 65535),
                         help="torchrun's c10d rendezvous port on the first node (net tests it on every node).")
    timeout_s: float = opt("--timeout", default=600.0, type=click.FloatRange(10),
                           help="Deadline in seconds for the whole run (the first DeepSpeed run compiles for "
                                "~100 s).")
    checkpoint_dir: Optional[str] = opt("--checkpoint-dir",
                                        help="Where the nodes save the checkpoint (an absolute path on the nodes, "
                                             "e.g. your shared filesystem). Default: each node's run directory.")

    @property
    def save_at(self) -> int:
        """The step the checkpoint is taken at; the resumed run repeats the steps after it."""
        return max(1, self.steps - RESUMED_STEPS)


@dataclass
class SmokeFacts:
    nodes: List[Node]
    probed: List[Probed]
    nproc: Dict[str, int] = field(default_factory=dict)
    stage: Optional[LaunchResult] = None      # the training run
    resume: Optional[LaunchResult] = None     # the same run resumed from its checkpoint, in fresh processes
    problems: Dict[str, str] = field(default_factory=dict)
    save_dir: str = ""

    @property
    def summary(self) -> Optional[Dict]:
        return next(iter(self.stage.events("summary")), None) if self.stage else None

    @property
    def resumed_summary(self) -> Optional[Dict]:
        return next(iter(self.resume.events("summary")), None) if self.resume else None


def trainer_args(options: SmokeOptions, save_dir: str, resume: bool = False) -> List[str]:
    args = ["--mode", options.mode, "--preset", options.preset, "--steps", str(options.steps),
            "--micro-batch", str(options.micro_batch), "--precision", options.precision,
            "--save-dir", save_dir, "--losses-after", str(options.save_at)]
    if resume:
        args += ["--resume", "--log-every", str(options.steps)]
    else:
        args += ["--log-every", str(max(1, options.steps // 10)), "--save-at", str(options.save_at),
                 "--reference-steps", str(REFERENCE_STEPS if options.preset in REFERENCE_PRESETS else 0)]
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
    # The same path on every node: inside the run directory (node-local) unless the user names one.
    facts.save_dir = (os.path.join(options.checkpoint_dir, f"clustercheck-smoke-{uuid.uuid4().hex[:8]}")
                      if options.checkpoint_dir else "checkpoints")
    config = {"mode": options.mode, "preset": options.preset, "steps": options.steps, "save_at": options.save_at,
              "precision": options.precision}
    started = time.monotonic()
    try:
        facts.stage = run_torchrun(cluster, nodes, probed, Launch(
            "train", paths, trainer_args(options, facts.save_dir), facts.nproc, options.rdzv_port, options.timeout_s,
            config=config), progress)
        left_s = options.timeout_s - (time.monotonic() - started)
        if facts.summary is not None and all(r.exit_code == 0 for r in facts.stage.runs.values()) and left_s > 5:
            facts.resume = run_torchrun(cluster, nodes, probed, Launch(
                "resume", paths, trainer_args(options, facts.save_dir, resume=True), facts.nproc, options.rdzv_port,
                left_s, config=config), progress)
    finally:
        if options.checkpoint_dir:   # the run directory (and a checkpoint in it) goes with the connection
            cluster.run(f"rm -rf {shlex.quote(facts.save_dir)}", 60.0, nodes)
    return facts
