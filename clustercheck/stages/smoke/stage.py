"""The smoke stage: the reference trainer (or the user's model and config) run across the cluster (gather.py),
judged (rules.py, classify.py), shown (render.py)."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from clustercheck.core.errors import InputError
from clustercheck.core.result import Finding
from clustercheck.node.layer import NodeLayer
from clustercheck.onnode.dsconfig import ConfigError, mode_of, read, resolve
from clustercheck.ranks.runs import launched_by
from clustercheck.runner.options import node_path
from clustercheck.runner.stage import Stage, StageResult
from clustercheck.stages.smoke import render
from clustercheck.stages.smoke.facts import SmokeFacts
from clustercheck.stages.smoke.gather import gather_smoke
from clustercheck.stages.smoke.options import SmokeOptions
from clustercheck.stages.smoke.rules import LORA_MIN_LOSS_DROP, MIN_LOSS_DROP, judge_smoke


class SmokeStage(Stage):
    options: SmokeOptions
    name = "smoke"
    answers = {"checkpoint_dir": ("smoke.checkpoint", "smoke.storage"), "steps": ("smoke.loss",),
               **{shape: ("smoke.throughput", "smoke.job") for shape in
                  ("model", "mode", "preset", "micro_batch", "seq_len", "deepspeed", "lora", "lora_rank", "precision")}}
    launches_ranks = True

    def __init__(self, options: SmokeOptions):
        super().__init__(options)
        node_path("--checkpoint-dir", options.checkpoint_dir)
        node_path("--model", options.model)
        if options.lora and not options.model:
            raise InputError("--lora needs --model (the model directory to adapt)", "command line")
        if options.deepspeed:   # read here: a bad config is bad input before any node is reached
            try:
                config = read(options.deepspeed)
                options.mode = mode_of(config)
                resolve(config, world=None, micro_batch=options.micro_batch, grad_accum=1, clip=1.0, lr=3e-3,
                        steps=options.steps, hidden=64, cuda=False, bf16_supported=False)
            except ConfigError as exc:
                raise InputError(str(exc).removeprefix(f"{options.deepspeed}: "), options.deepspeed) from None

    def gather(self, layer: NodeLayer) -> SmokeFacts:
        # Rank 0's progress, and DeepSpeed's first-use compile, go to stderr: a long wait is not a silent hang.
        return gather_smoke(layer.cluster, layer.nodes, layer.probed(), self.options, render.progress_printer())

    def judge(self, facts: SmokeFacts) -> List[Finding]:
        return judge_smoke(facts, self.options.timeout_s,
                           LORA_MIN_LOSS_DROP if self.options.lora else MIN_LOSS_DROP)

    def to_json(self, result: StageResult) -> Dict:
        return render.to_json(result.facts, result.findings)

    def render_terminal(self, result: StageResult, verbose: bool) -> str:
        return render.render_terminal(result.facts, result.findings, verbose=True)  # a pass's figures matter

    def render_markdown(self, result: StageResult, command: str, images: Sequence[str]) -> str:
        return render.render_markdown(result.facts, result.findings, command, images)

    def save_images(self, result: StageResult, stem: str) -> List[str]:
        curve: Optional[str] = render.training_curve(result.facts, stem)
        return [curve] if curve else []

    def report_section(self, result: StageResult, images: Sequence[str]) -> List[str]:
        stage = result.facts.stage
        launched = launched_by([stage] if stage else [])
        lines = [f"Launched: {launched[2:]}.", ""] if launched else []
        lines += [f"![{images[0]}]({images[0]})", ""] if images else []
        return ["## Training", "", *lines] if lines else []

    def report_json(self, result: StageResult) -> Dict:
        return {"smoke": render.to_json(result.facts, result.findings)}
