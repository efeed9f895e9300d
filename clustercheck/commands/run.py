"""The `clustercheck run` command (its --help is the reference: docs/reference.md)."""

import sys

import click

from clustercheck.core.errors import InputError
from clustercheck.display.fold import render_run
from clustercheck.runner.options import ClusterOptions, FiniteRange, cluster_options, from_params
from clustercheck.transport.fanout import Cluster, worst_exit_code


class SplitAtDashes(click.Command):
    """Keeps what follows `--` as the remote command (click would drop the `--`)."""

    def parse_args(self, ctx, args):
        if "--" in args:
            cut = args.index("--")
            ctx.meta["remote_command"] = args[cut + 1:]
            args = args[:cut]
        return super().parse_args(ctx, args)


@click.command(cls=SplitAtDashes)
@cluster_options
@click.option("--timeout", type=FiniteRange(0.1), default=60.0, show_default=True,
              help="Deadline in seconds for the command on each node; it is killed there after that.")
@click.pass_context
def run(ctx, timeout, **params):
    """Run a command on every node, like pdsh/clush; identical outputs are folded.

    \b
    Example:
      clustercheck run nodes.txt -- nvidia-smi -L
      clustercheck run -- uname -r          # this machine alone

    Exit code: 0 all ok, 2 the command failed or timed out somewhere,
    3 a node could not be reached, 64 bad input.
    """
    command = ctx.meta.get("remote_command")
    if not command:
        raise InputError("no command: put it after --, as in: clustercheck run nodes.txt -- hostname",
                         "command line")
    options = from_params(ClusterOptions, params)
    with Cluster(options.nodes(), options.fanout_options()) as cluster:
        results = cluster.run(" ".join(command), timeout)
    click.echo(render_run(results))
    sys.exit(worst_exit_code(results))
