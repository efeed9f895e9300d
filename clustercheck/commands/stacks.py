"""The `clustercheck stacks` command (its --help is the reference: docs/reference.md)."""

import sys

import click

from clustercheck.ranks.forensics import flight_of
from clustercheck.ranks.ras_gather import RAS_DEADLINE_S, ras_findings
from clustercheck.ranks.stack_gather import dump_matching
from clustercheck.ranks.stacks import FRAMES_SHOWN, stacks_result
from clustercheck.runner.options import ClusterOptions, FiniteRange, cluster_options, from_params
from clustercheck.transport.fanout import Cluster


@click.command()
@cluster_options
@click.option("--match", "pattern", required=True,
              help="A regular expression for the command lines of the processes to dump (e.g. train.py).")
@click.option("--timeout", type=FiniteRange(1), default=60.0, show_default=True,
              help="Deadline in seconds on each node.")
@click.option("--frames", type=click.IntRange(1, 10_000), default=FRAMES_SHOWN, show_default=True,
              help="Innermost frames printed for each distinct stack.")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print JSON instead of text.")
def stacks(pattern, timeout, frames, as_json, **params):
    """The Python stack of every matching process on every node, folded.

    Processes whose main thread stands in the same place share one block under a compact
    node and rank list; the odd ones come first. Uses py-spy on the nodes (pip install
    py-spy), which needs ptrace rights over the processes: root, or their user with
    kernel.yama.ptrace_scope=0. Shells and launchers whose command line matches are skipped.

    \b
    Example:
      clustercheck stacks nodes.txt --match train.py

    Beside the stacks, NCCL's RAS (NCCL 2.24+) is asked on every node (NCCL_RAS_ADDR, else
    localhost:28028): ranks dead or missing, and the collective whose counts differ between ranks.
    The ranks of a job started under the check inside the job (python -m clustercheck.injob)
    answer with their Flight Recorder record too: the collective some ranks never entered,
    those ranks and their nodes, a desync, and the process group it happened in.

    Exit code: 0 every matching process dumped, 2 none matched or some could not be
    dumped, 3 a node could not be reached (and nothing worse), 64 bad input; NCCL's RAS is
    shown, not judged into it.
    """
    options = from_params(ClusterOptions, params)
    nodes = options.nodes()
    with Cluster(nodes, options.fanout_options()) as cluster:
        found, problems = dump_matching(cluster, nodes, pattern, timeout)
        ras = ras_findings(cluster, nodes, min(timeout, RAS_DEADLINE_S))
    text, code = stacks_result(found, problems, ras, pattern, frames, len(nodes), as_json, flight_of(found))
    click.echo(text)
    sys.exit(code)
