"""The options of `clustercheck env`: dataclass fields that are also its flags (runner/options.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Sequence

import click

from clustercheck.node.gather import ProbeOptions
from clustercheck.core.errors import InputError
from clustercheck.core.reqfile import requirements_argument
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

    required: Sequence[str] = opt("--require", multiple=True, default=(), metavar="REQUIREMENT",
                                  help="A Python package every node must have, with a version range where given "
                                       "(repeat it): --require 'flash-attn>=2.6' --require bitsandbytes; or a file "
                                       "of them: --require requirements.txt (pip freeze, pip-compile with hashes, "
                                       "-r/-c, pip list --format=json, conda list --export, environment.yml). "
                                       "preflight asks for transformers with --model, peft with --lora.")
    baseline: Optional[str] = opt("--baseline", type=click.Path(dir_okay=False),
                                  help="A known-good environment to hold every node to: an earlier --save-baseline "
                                       "file, or a pip freeze / pip-compile / pip list --format=json / conda list "
                                       "--export / environment.yml file.")
    save_baseline: Optional[str] = opt("--save-baseline", type=click.Path(dir_okay=False),
                                       help="Write the environment this run saw (every package, the CUDA build, "
                                            "NCCL, the driver, the variables) to FILE when the run is READY.")

    def __post_init__(self):
        self.wanted = [want for text in self.required for want in requirements_argument(text)]
        if self.save_baseline and self.baseline and os.path.abspath(self.save_baseline) == \
                os.path.abspath(self.baseline):
            raise InputError("--save-baseline would overwrite the --baseline it is held to", "command line",
                             value=self.save_baseline)

    def probe(self) -> ProbeOptions:
        return ProbeOptions(timeout_s=self.timeout_s, workdir=self.workdir, deep=self.deep)
