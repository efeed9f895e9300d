"""The `clustercheck env` command (its --help is the reference: docs/reference.md)."""

import click

from clustercheck.runner.options import click_options, cluster_options, from_params, output_options
from clustercheck.runner.output import run_one
from clustercheck.stages.env.options import EnvOptions
from clustercheck.stages.env.stage import EnvStage


@click.command()
@cluster_options
@click_options(EnvOptions)
@output_options
def env(**params):
    """Compare what every node runs: versions, GPUs, network and host settings.

    Runs a small standard-library probe with each node's own interpreter
    (python= in the nodes file, --python, else python3) and names the odd nodes out.

    \b
    Example:
      clustercheck env nodes.txt
      clustercheck env nodes.txt --deep --report
      clustercheck env                 # this machine alone

    Exit code: 0 ready, 1 ready with warnings, 2 not ready (a check failed or a
    node could not be probed), 64 bad input.
    """
    run_one(EnvStage(from_params(EnvOptions, params)), params)
