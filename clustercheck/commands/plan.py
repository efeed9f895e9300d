"""The `clustercheck plan` command (its --help is the reference: docs/reference.md)."""

import sys

import click

from clustercheck.node.layer import probe_nodes
from clustercheck.planner.plan import PlanOptions, plan_text
from clustercheck.runner.options import ClusterOptions, click_options, cluster_options, from_params


@click.command()
@cluster_options
@click_options(PlanOptions)
def plan(**params):
    """GPU memory per mode (DDP, ZeRO-1/2/3, offload, FSDP, LoRA, QLoRA, inference), and what fits.

    Model states from one accounting (20 bytes per parameter, sharded per mode; DeepSpeed's
    estimators where they exist) plus activations from the model's shape, sequence length,
    micro-batch and gradient checkpointing. --model reads a Hugging Face config.json; with
    only --params a Llama shape of that size is assumed. Without --gpus-per-node and
    --gpu-mem the nodes are asked (the env probe), and the smallest GPU sets the plan.

    \b
    Example:
      clustercheck plan --params 7B --gpus-per-node 8 --num-nodes 2 --gpu-mem 80
      clustercheck plan nodes.txt --model /models/Llama-2-7b-hf --seq-len 4096 --micro-batch 2

    Exit code: 0 some training mode fits, 2 nothing fits, 3 a row could not be judged (host
    memory unknown: give --cpu-mem or a nodes file), 64 bad input.
    """
    options = from_params(PlanOptions, params)
    options.validate()
    if options.needs_nodes:
        cluster = from_params(ClusterOptions, params)
        options = options.with_nodes(probe_nodes(cluster.nodes(), cluster.fanout_options()))
    text, code = plan_text(options)
    click.echo(text)
    sys.exit(code)
