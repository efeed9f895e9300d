"""The options of `clustercheck smoke`: dataclass fields that are also its flags (runner/options.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import click

from clustercheck.runner.options import (FiniteRange, deadline_option, opt, rdzv_port_option, resolve_stall_window,
                                         stall_window_option)

RESUMED_STEPS = 5                       # steps run again after the checkpoint, in fresh processes


MODES = ("ddp", "zero1", "zero2", "zero3", "zero3-offload", "fsdp")


@dataclass
class SmokeOptions:
    mode: str = opt("--mode", default="ddp", type=click.Choice(MODES))
    preset: str = opt("--preset", default="tiny", type=click.Choice(["tiny", "small", "125m", "1b"]))
    steps: int = opt("--steps", default=30, type=click.IntRange(2, 1_000_000))
    micro_batch: int = opt("--micro-batch", default=8, type=click.IntRange(1, 65536))
    precision: str = opt("--precision", default="fp32", type=click.Choice(["fp32", "bf16", "fp16"]),
                         help="bf16 / fp16 need GPUs.")
    data: Optional[str] = opt("--data", help="A .txt or .jsonl file to train on, at this path on every node "
                                             "(default: generated).")
    nproc_per_node: Optional[int] = opt("--nproc-per-node", type=click.IntRange(1, 1024),
                                        help="Ranks per node. Default: slots=, else the GPU count, else 1.")
    rdzv_port: int = rdzv_port_option()
    timeout_s: float = deadline_option(600.0, "for the whole run (the first DeepSpeed run compiles for ~100 s)",
                                       minimum=10)
    stall_s: Optional[float] = stall_window_option(
        120.0, "Once training steps come, this long without one (or 3x the longest gap seen) is a hang: every "
               "rank's stack is taken and the odd ranks named before the run is stopped.", "--timeout")
    checkpoint_dir: Optional[str] = opt("--checkpoint-dir",
                                        help="Where the nodes save the checkpoint (an absolute path on the nodes, "
                                             "e.g. your shared filesystem). Default: each node's run directory.")
    model: Optional[str] = opt("--model", help="Fine-tune your Hugging Face model directory: an absolute path, the "
                                               "same on every node (uploaded by hand; loaded offline). Needs "
                                               "transformers on the nodes.")
    seq_len: int = opt("--seq-len", default=128, type=click.IntRange(8, 1_048_576), help="Tokens per sequence with --model.")
    deepspeed: Optional[str] = opt("--deepspeed", type=click.Path(dir_okay=False),
                                   help="Your DeepSpeed config (a file here, shipped to the nodes): \"auto\" values "
                                        "resolved as Hugging Face does; its ZeRO stage sets the mode.")
    lora: bool = opt("--lora", is_flag=True, default=False, help="Train a LoRA adapter on --model (needs peft).")
    lora_rank: int = opt("--lora-rank", default=8, type=click.IntRange(1, 65536))

    def __post_init__(self):
        self.stall_s = resolve_stall_window(self.stall_s, 120.0, {"--timeout": self.timeout_s})

    @property
    def save_at(self) -> int:
        """The step the checkpoint is taken at; the resumed run repeats the steps after it."""
        return max(1, self.steps - RESUMED_STEPS)
