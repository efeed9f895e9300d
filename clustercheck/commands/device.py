"""The `clustercheck device` command (its --help is the reference: docs/reference.md)."""

import click

from clustercheck.runner.options import click_options, cluster_options, from_params, output_options
from clustercheck.runner.output import run_one
from clustercheck.stages.device.options import DeviceOptions
from clustercheck.stages.device.stage import DeviceStage


@click.command()
@cluster_options
@click_options(DeviceOptions)
@output_options
def device(**params):
    """Measure every GPU (on CPU-only nodes, every node) under load, all at once, and name the odd one.

    Matmul in the training dtypes, memory copies, host-to-device and device-to-host copies and the
    GPU-to-GPU copy matrix, with each GPU's clocks, power, throttle reasons and PCIe link sampled
    meanwhile; each device against its peers and the published figure of its model; and every
    device's bits for the same seeded inputs compared (silent data corruption).

    \b
    Example:
      clustercheck device nodes.txt
      clustercheck device nodes.txt --seconds 30 --report

    Exit code: 0 ready, 1 warnings, 2 not ready, 3 could not check, 64 bad input.
    """
    run_one(DeviceStage(from_params(DeviceOptions, params)), params)
