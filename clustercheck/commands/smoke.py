"""The `clustercheck smoke` command (its --help is the reference: docs/reference.md)."""

import click

from clustercheck.runner.options import click_options, cluster_options, from_params, output_options
from clustercheck.runner.output import run_one
from clustercheck.stages.smoke.options import SmokeOptions
from clustercheck.stages.smoke.stage import SmokeStage


@click.command()
@cluster_options
@click_options(SmokeOptions)
@output_options
def smoke(**params):
    """Train the reference model, or fine-tune yours (--model, --deepspeed, --lora), across the cluster.

    Ships reference_train/ to every node and starts it with torchrun (c10d rendezvous at
    the first node). Passes when the loss falls clearly, every rank holds the same
    weights and a checkpoint loads back identical; otherwise names the failure (import,
    out of memory, rendezvous, collective, node down, hang), the node and the ranks.

    \b
    Example:
      clustercheck smoke nodes.txt
      clustercheck smoke nodes.txt --mode zero3 --preset 125m --precision bf16
      clustercheck smoke nodes.txt --model /models/Llama-3-8B --deepspeed ds_z3_offload_config.json
      clustercheck smoke nodes.txt --model /models/Llama-3-8B --lora --lora-rank 16

    Exit code: 0 passed, 2 failed, 64 bad input.
    """
    run_one(SmokeStage(from_params(SmokeOptions, params)), params)
