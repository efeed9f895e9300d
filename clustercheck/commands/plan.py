import sys

import click

from clustercheck.node import probe_nodes
from clustercheck.options import ClusterOptions, click_options, cluster_options, from_params
from clustercheck.plan import PlanOptions, plan_text


@click.command()
@cluster_options
@click_options(PlanOptions)
def plan(**params):
    """Per-GPU memory that DDP, ZeRO-1/2/3 and CPU offload need for a model, and what fits.

    Model states only (weights, gradients, optimizer); activations come on top. Without
    --gpus-per-node and --gpu-mem the nodes are asked (the env probe).

    \b
    Example:
      clustercheck plan --params 7B --gpus-per-node 8 --num-nodes 2 --gpu-mem 80
      clustercheck plan nodes.txt --params 13B

    Exit code: 0 some mode fits, 2 nothing fits, 64 bad input.
    """
    options = from_params(PlanOptions, params)
    options.validate()
    if options.needs_nodes:
        cluster = from_params(ClusterOptions, params)
        options = options.with_nodes(probe_nodes(cluster.nodes(), cluster.fanout_options()))
    text, code = plan_text(options)
    click.echo(text)
    sys.exit(code)
