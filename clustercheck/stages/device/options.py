"""The options of `clustercheck device`: dataclass fields that are also its flags (runner/options.py)."""

from __future__ import annotations

from dataclasses import dataclass

import click

from clustercheck.runner.options import FiniteRange, opt


@dataclass
class DeviceOptions:
    seconds: float = opt("--seconds", default=10.0, type=FiniteRange(1, 600),
                         help="How long the devices are measured, on every node at once (the probe's start "
                              "and torch's import come on top).")
    size: int = opt("--size", default=0, type=click.IntRange(0, 65536),
                    help="Matmul shape n (n x n x n); 0: 8192 on a GPU, 512 on a CPU.")
    dcgm_level: int = opt("--dcgm-level", default=1, type=click.IntRange(0, 3),
                          help="dcgmi diag level run on nodes where DCGM is installed, after the measurements "
                               "(0: none; 1: seconds; 2 and 3: minutes, each under a hard deadline).")
    start_margin_s: float = 5.0      # from sending the probes to the moment every node starts measuring (torch's
                                     # import included: a later node starts late, and says so in measured_at)
    import_s: float = 60.0           # torch's import on a cold node, on top of the measurement
