"""The `clustercheck bench` command (its --help is the reference: docs/reference.md)."""

import click

from clustercheck.runner.options import click_options, cluster_options, from_params, output_options
from clustercheck.runner.output import run_one
from clustercheck.stages.bench.options import BenchOptions
from clustercheck.stages.bench.stage import BenchStage


@click.command()
@cluster_options
@click_options(BenchOptions)
@output_options
def bench(**params):
    """Collective bandwidth sweeps with torch.distributed, reported like nccl-tests.

    Ships a small torch worker to every node and starts it with torchrun (c10d
    rendezvous at the first node): NCCL on GPUs, Gloo on CPUs. --pairwise then names
    the slow node or link.

    \b
    Example:
      clustercheck bench nodes.txt
      clustercheck bench nodes.txt -c all -b 8 -e 1G -f 2 --ring
      clustercheck bench nodes.txt --pairwise --report

    Exit code: 0 ready, 1 warnings (below expectation), 2 not ready (a rank failed or
    hung, wrong data, a slow node or link), 64 bad input.
    """
    run_one(BenchStage(from_params(BenchOptions, params)), params)
