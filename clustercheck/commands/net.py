"""The `clustercheck net` command (its --help is the reference: docs/reference.md)."""

import click

from clustercheck.runner.options import click_options, cluster_options, from_params, output_options
from clustercheck.runner.output import run_one
from clustercheck.stages.net.options import NetOptions
from clustercheck.stages.net.stage import NetStage


@click.command()
@cluster_options
@click_options(NetOptions)
@output_options
def net(**params):
    """Check that every node reaches every other on the ports training uses.

    Every node listens on the rendezvous port (the first node) and on ports sampled
    from its ephemeral range; every other node connects to them, all at once. Also
    names, interfaces (what to set NCCL_SOCKET_IFNAME to) and MTU.

    \b
    Example:
      clustercheck net nodes.txt
      clustercheck net nodes.txt --master-port 29400 --links --node-ssh --report

    Exit code: 0 ready, 1 warnings, 2 not ready, 64 bad input.
    """
    run_one(NetStage(from_params(NetOptions, params)), params)
