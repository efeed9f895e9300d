import sys

import click

from clustercheck.fanout import Cluster, worst_exit_code
from clustercheck.fold import render_run
from clustercheck.options import cluster_options, fanout_options, load_nodes


@click.command(context_settings={"ignore_unknown_options": False})
@cluster_options
@click.option("--timeout", type=click.FloatRange(0.1), default=60.0, show_default=True,
              help="Deadline in seconds for the command on each node; it is killed there after that.")
@click.argument("command", nargs=-1, required=True)
def run(command, timeout, **opts):
    """Run COMMAND on every node, like pdsh/clush; identical outputs are folded.

    \b
    Example:
      clustercheck run nodes.txt -- nvidia-smi -L
      clustercheck run -- uname -r          # this machine alone

    Exit code: 0 all ok, 2 the command failed or timed out somewhere,
    3 a node could not be reached, 64 bad input.
    """
    nodes = load_nodes(**opts)
    with Cluster(nodes, fanout_options(**opts)) as cluster:
        results = cluster.run(" ".join(command), timeout)
    click.echo(render_run(results))
    sys.exit(worst_exit_code(results))
