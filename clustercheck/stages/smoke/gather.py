"""Run the reference trainer across the cluster and collect what its ranks report.

From the node layer's documents (interpreter, torch, GPUs, training interface), the
trainer's files are shipped into every node's run directory and started with torchrun on
all nodes at once (clustercheck.ranks.torchrun), under one deadline. No judging here.
"""

from __future__ import annotations

import os
import shlex
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import click

from clustercheck.core.errors import InputError
from clustercheck.core.inventory import Node
from clustercheck.node.facts import Probed, interpreter
from clustercheck.node.readiness import (
    choose_backend,
    missing_packages,
    missing_text,
    ranks_per_node,
    readiness_problems,
)
from clustercheck.onnode import TRAINER_ENTRY, trainer_files
from clustercheck.planner.memory import Shape, Workload, parse_config
from clustercheck.ranks.torchrun import DEFAULT_RDZV_PORT, Launch, LaunchResult, run_torchrun, ship
from clustercheck.runner.options import opt
from clustercheck.transport.base import Outcome
from clustercheck.transport.fanout import Cluster

REFERENCE_PRESETS = ("tiny", "small")   # small enough for one process to recompute the first steps
REFERENCE_STEPS = 10
USER_DS_CONFIG = "ds_user.json"         # --deepspeed FILE, as shipped into each run directory
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
    stall_s: float = opt("--stall-window", default=120.0, type=click.FloatRange(5),
                         help="Once training steps come, this long without one (or 3x the longest gap seen) is a "
                              "hang: every rank's stack is taken and the odd ranks named before the run is stopped.")
    checkpoint_dir: Optional[str] = opt("--checkpoint-dir",
                                        help="Where the nodes save the checkpoint (an absolute path on the nodes, "
                                             "e.g. your shared filesystem). Default: each node's run directory.")
    model: Optional[str] = opt("--model", help="Fine-tune your Hugging Face model directory: an absolute path, the "
                                               "same on every node (uploaded by hand; loaded offline). Needs "
                                               "transformers on the nodes.")
    seq_len: int = opt("--seq-len", default=128, type=click.IntRange(8), help="Tokens per sequence with --model.")
    deepspeed: Optional[str] = opt("--deepspeed", type=click.Path(dir_okay=False),
                                   help="Your DeepSpeed config (a file here, shipped to the nodes): \"auto\" values "
                                        "resolved as Hugging Face does; its ZeRO stage sets the mode.")
    lora: bool = opt("--lora", is_flag=True, default=False, help="Train a LoRA adapter on --model (needs peft).")
    lora_rank: int = opt("--lora-rank", default=8, type=click.IntRange(1))

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
    lacking: Dict[str, List[str]] = field(default_factory=dict)   # node -> packages --model / --lora need
    save_dir: str = ""
    shape: Optional[Shape] = None             # --model: its config.json, read on the first node
    shape_problem: str = ""
    plan_mode: str = ""                       # the memory plan's row for this run
    workload: Optional[Workload] = None

    @property
    def summary(self) -> Optional[Dict]:
        return next(iter(self.stage.events("summary")), None) if self.stage else None

    @property
    def resumed_summary(self) -> Optional[Dict]:
        return next(iter(self.resume.events("summary")), None) if self.resume else None


def trainer_args(options: SmokeOptions, save_dir: str, resume: bool = False) -> List[str]:
    # with --deepspeed the trainer takes the mode from the config (zero0, zero2-offload: not --mode choices)
    args = [*(["--mode", options.mode] if not options.deepspeed else []), "--preset", options.preset,
            "--steps", str(options.steps),
            *(["--model", options.model, "--seq-len", str(options.seq_len)] if options.model else []),
            *(["--deepspeed", USER_DS_CONFIG] if options.deepspeed else []),
            *(["--lora", "--lora-rank", str(options.lora_rank)] if options.lora else []),
            "--micro-batch", str(options.micro_batch), "--precision", options.precision,
            "--save-dir", save_dir, "--losses-after", str(options.save_at)]
    if resume:
        args += ["--resume", "--log-every", str(options.steps)]
    else:
        args += ["--log-every", str(max(1, options.steps // 10)), "--save-at", str(options.save_at),
                 "--reference-steps", str(REFERENCE_STEPS if options.preset in REFERENCE_PRESETS or options.model
                                          else 0)]
    if options.data:
        args += ["--data", options.data]
    return args


def gather_smoke(cluster: Cluster, nodes: Sequence[Node], probed: List[Probed], options: SmokeOptions,
                 progress: Optional[Callable[[str, Dict], None]] = None) -> SmokeFacts:
    """probed: the node layer's documents (interpreter, torch, GPUs, training interface)."""
    facts = SmokeFacts(list(nodes), probed)
    facts.problems = readiness_problems(probed)
    facts.lacking = missing_packages(probed, required_packages(options))
    for p in probed:
        if p.name in facts.lacking:
            facts.problems[p.name] = missing_text(facts.lacking[p.name], interpreter(p.node))
    if facts.problems:
        return facts
    if options.model:
        facts.problems.update(missing_model(cluster, nodes, options.model))
        if facts.problems:
            return facts
        facts.shape, facts.shape_problem = model_shape(cluster, nodes[0], options.model)
        facts.plan_mode = plan_row(options)
        facts.workload = Workload(seq_len=options.seq_len, micro_batch=options.micro_batch, checkpointing=False,
                                  lora_rank=options.lora_rank)
    facts.nproc = ranks_per_node(probed, options.nproc_per_node, choose_backend(probed, "auto") == "nccl")
    files = trainer_files()
    if options.deepspeed:
        with open(options.deepspeed, "rb") as handle:
            files[USER_DS_CONFIG] = handle.read()
    placed = ship(cluster, nodes, files, facts.problems)
    if facts.problems:
        return facts
    paths = {name: files_at[TRAINER_ENTRY] for name, files_at in placed.items()}
    # The same path on every node: inside the run directory (node-local) unless the user names one.
    facts.save_dir = (os.path.join(options.checkpoint_dir, f"clustercheck-smoke-{uuid.uuid4().hex[:8]}")
                      if options.checkpoint_dir else "checkpoints")
    config = {"mode": options.mode, "preset": options.preset, "steps": options.steps, "save_at": options.save_at,
              "precision": options.precision, "model": options.model, "deepspeed": options.deepspeed,
              "lora_rank": options.lora_rank if options.lora else None}
    started = time.monotonic()
    try:
        facts.stage = run_torchrun(cluster, nodes, probed, Launch(
            "train", paths, trainer_args(options, facts.save_dir), facts.nproc, options.rdzv_port, options.timeout_s,
            config=config, stall_s=options.stall_s), progress)
        left_s = options.timeout_s - (time.monotonic() - started)
        if facts.summary is not None and all(r.exit_code == 0 for r in facts.stage.runs.values()) and left_s > 5:
            facts.resume = run_torchrun(cluster, nodes, probed, Launch(
                "resume", paths, trainer_args(options, facts.save_dir, resume=True), facts.nproc, options.rdzv_port,
                left_s, config=config, stall_s=options.stall_s), progress)
    finally:
        if options.checkpoint_dir:   # the run directory (and a checkpoint in it) goes with the connection
            cluster.run(f"rm -rf {shlex.quote(facts.save_dir)}", 60.0, nodes)
    return facts


def required_packages(options: SmokeOptions) -> List[str]:
    return (["transformers"] if options.model else []) + (["peft"] if options.lora else [])


def missing_model(cluster: Cluster, nodes: Sequence[Node], model: str) -> Dict[str, str]:
    """Nodes where the model directory is not there: weights are uploaded to every node by hand."""
    config = shlex.quote(os.path.join(model, "config.json"))
    results = cluster.run(f"test -r {config} && ls {shlex.quote(model)} | grep -qE '\\.(safetensors|bin)$'", 60.0,
                          nodes)
    return {r.node: (f"{model} has no readable config.json and weights (*.safetensors / *.bin) on this node: "
                   f"upload the model to every node" if r.outcome is Outcome.COMMAND_FAILED
                   else f"could not look for {model}: {r.detail or r.outcome.value}")
            for r in results if not r.ok}


def model_shape(cluster: Cluster, node: Node, model: str) -> "tuple[Optional[Shape], str]":
    """The model's shape from its config.json on the first node (the memory plan of the run), or why not."""
    path = os.path.join(model, "config.json")
    [result] = cluster.run(f"head -c 1000000 {shlex.quote(path)}", 60.0, [node])
    if not result.ok:
        return None, f"could not read {path} on {node.name}: {result.detail or result.outcome.value}"
    try:
        return parse_config(result.stdout, f"{node.name}:{path}"), ""
    except InputError as exc:
        return None, str(exc)


def plan_row(options: SmokeOptions) -> str:
    """The memory plan's row for this run ("" where the plan has none: no claim is made).

    The plan counts 16-bit training (clustercheck/planner/memory.py): an fp32 run has no row. LoRA's row is
    the frozen base on every GPU, as under DDP; ZeRO-3 offload's, the parameters offloaded too."""
    if options.deepspeed:
        from clustercheck.onnode.dsconfig import precision, read
        config = read(options.deepspeed)
        half = precision(config) != "fp32" or any((config.get(k) or {}).get("enabled") == "auto"
                                                   for k in ("bf16", "fp16"))
        zero = config.get("zero_optimization") or {}
        if options.mode == "zero3-offload" and (zero.get("offload_param") or {}).get("device") not in ("cpu", "nvme"):
            return ""
    else:
        half = options.precision in ("bf16", "fp16")
    if not half:
        return ""
    if options.lora:
        return "lora" if options.mode in ("ddp", "zero0", "zero1", "zero2") else ""
    return {"zero0": "ddp"}.get(options.mode, options.mode)
