"""The options of `clustercheck storage`: dataclass fields that are also its flags (runner/options.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple

import click

from clustercheck.planner.checkpoint import MODES, PRESET_SHAPES, preset_params
from clustercheck.planner.memory import read_config
from clustercheck.planner.plan import parse_count
from clustercheck.runner.options import FiniteRange, node_path, opt


@dataclass
class StorageOptions:
    checkpoint_dir: Optional[str] = opt("--checkpoint-dir",
                                        help="Where the run saves checkpoints (an absolute path on the nodes, e.g. "
                                             "your shared filesystem). Default: each node's run directory.")
    data_dir: Optional[str] = opt("--data-dir", help="Your data set's directory on the nodes: its files read from "
                                                     "every rank slot at once, as a loader would.")
    params: Optional[str] = opt("--params", help="Model parameters for the checkpoint's size: 7B, 125M, 1.3e9.")
    model: Optional[str] = opt("--model", type=click.Path(), help="A Hugging Face model directory here (or its "
                                                                  "config.json): its parameters size the checkpoint.")
    preset: str = opt("--preset", default="tiny", type=click.Choice(sorted(PRESET_SHAPES)),
                      help="Without --params or --model: the reference trainer's model (what smoke trains).")
    mode: str = opt("--mode", default="ddp", type=click.Choice(MODES), help="The training mode: what each rank saves.")
    precision: str = opt("--precision", default="fp32", type=click.Choice(["fp32", "bf16", "fp16"]))
    keep: int = opt("--keep", default=2, type=click.IntRange(1, 10000), help="Checkpoints kept on the filesystem.")
    nproc_per_node: Optional[int] = opt("--nproc-per-node", type=click.IntRange(1, 1024),
                                        help="Rank slots per node. Default: slots=, else the GPU count, else 1.")
    size: int = opt("--size", default=256 * 2 ** 20, type=click.IntRange(4 * 2 ** 20, 2 ** 40),
                    help="Bytes each rank slot writes and reads back at most (never over a tenth of the free space "
                         "between all slots).")
    seconds: float = opt("--seconds", default=5.0, type=FiniteRange(0.5, 600),
                         help="Time budget of each phase (write, read back, data): a slot stops when it is spent.")
    window: float = opt("--coherence-window", default=10.0, type=FiniteRange(0.1, 600),
                        help="How long the other nodes may take to see a file one node wrote and renamed.")
    step_seconds: Optional[float] = opt("--step-seconds", type=FiniteRange(0.001, 1e6),
                                        help="The planned training step time: a save that takes over a tenth of the "
                                             "time between two saves (--save-every steps) is a warning.")
    save_every: int = opt("--save-every", default=1000, type=click.IntRange(1, 10 ** 9),
                          help="Steps between checkpoints.")
    d_state_s: float = 3.0          # a writer this long in D state is named
    start_margin_s: float = 3.0     # from sending the probes to the moment every node starts writing

    def __post_init__(self):
        node_path("--checkpoint-dir", self.checkpoint_dir)
        node_path("--data-dir", self.data_dir)
        self.model_params()     # a bad --params or --model is bad input, before any node is contacted

    def model_params(self) -> Tuple[int, str]:
        """The checkpoint's model: its parameter count and how it is named."""
        if self.params:
            return parse_count(self.params, "--params"), f"{self.params} parameters"
        if self.model:
            shape = read_config(self.model)
            return shape.params, f"{os.path.basename(os.path.normpath(self.model))} ({shape.params:,} parameters)"
        count = preset_params(self.preset)
        return count, f"the reference model {self.preset} ({count:,} parameters)"
