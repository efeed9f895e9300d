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
from typing import Callable, Dict, List, Optional, Sequence

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
from clustercheck.onnode.dsconfig import precision, read
from clustercheck.planner.memory import Shape, Workload, parse_config
from clustercheck.ranks.runs import Launch, ended_well
from clustercheck.ranks.torchrun import run_torchrun, ship
from clustercheck.stages.smoke.facts import SmokeFacts
from clustercheck.stages.smoke.options import SmokeOptions
from clustercheck.transport.base import Outcome
from clustercheck.transport.fanout import Cluster

REFERENCE_PRESETS = ("tiny", "small")   # small enough for one process to recompute the first steps
REFERENCE_STEPS = 10
USER_DS_CONFIG = "ds_user.json"         # --deepspeed FILE, as shipped into each run directory


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
    nccl = choose_backend(probed, "auto") == "nccl"     # NCCL's own account of its path, on GPUs
    try:
        facts.stage = run_torchrun(cluster, nodes, probed, Launch(
            "train", paths, trainer_args(options, facts.save_dir), facts.nproc, options.rdzv_port, options.timeout_s,
            config=config, stall_s=options.stall_s, capture_nccl=nccl), progress)
        left_s = options.timeout_s - (time.monotonic() - started)
        if ended_well(facts.stage, facts.summary) and left_s > 5:
            facts.resume = run_torchrun(cluster, nodes, probed, Launch(
                "resume", paths, trainer_args(options, facts.save_dir, resume=True), facts.nproc, options.rdzv_port,
                left_s, config=config, stall_s=options.stall_s, capture_nccl=nccl), progress)
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
