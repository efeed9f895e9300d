"""The options of `clustercheck env`: dataclass fields that are also its flags (runner/options.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import click

from clustercheck.node.gather import ProbeOptions
from clustercheck.onnode.env_probe import PACKAGES
from clustercheck.runner.options import FiniteRange, opt


@dataclass
class EnvOptions:
    deep: bool = opt("--deep", is_flag=True, default=False,
                     help="Also import torch and deepspeed on every node (slower: seconds).")
    workdir: Optional[str] = opt("--workdir", help="Directory training runs in on the nodes: checked to exist, free "
                                                    "disk measured. Default: the SSH login directory.")
    timeout_s: float = opt("--timeout", default=60.0, type=FiniteRange(1),
                           help="Deadline in seconds for the probe on each node.")
    config_path: Optional[str] = opt("--config", type=click.Path(dir_okay=False),
                                     help="Thresholds file (TOML); default ./clustercheck.toml when present.")
    shared_dir: Optional[str] = opt("--shared-dir", help="A directory meant for data or checkpoints: say whether it "
                                                         "is one filesystem for every node or a disk per node.")

    required: Sequence[str] = opt("--require", multiple=True, default=(), type=click.Choice(PACKAGES),
                                  help="A Python package every node must have (repeat it; the ones the probe reads): "
                                       "preflight asks for transformers with --model, peft with --lora.")

    def probe(self) -> ProbeOptions:
        return ProbeOptions(timeout_s=self.timeout_s, workdir=self.workdir, deep=self.deep)
