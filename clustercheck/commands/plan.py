import sys

import click

from clustercheck.config import Config
from clustercheck.env import check_env
from clustercheck.env.facts import get, gpus
from clustercheck.errors import EXIT_FAIL, EXIT_OK, InputError
from clustercheck.options import cluster_options, fanout_options, load_nodes
from clustercheck.plan import HEADROOM, judge_plan, needs, parse_count
from clustercheck.render import findings_lines
from clustercheck.result import Status, worst


@click.command()
@cluster_options
@click.option("--params", required=True, help="Model parameters: 7B, 125M, 1.3e9.")
@click.option("--gpus-per-node", type=click.IntRange(1), help="Instead of asking the nodes.")
@click.option("--num-nodes", type=click.IntRange(1), help="Instead of counting the nodes file.")
@click.option("--gpu-mem", type=click.FloatRange(0.1), help="GiB per GPU, instead of asking the nodes.")
@click.option("--cpu-mem", type=click.FloatRange(0.1), help="GiB of host memory per node (for offload).")
@click.option("--largest-layer", help="Parameters of the largest layer (ZeRO-3). Default: 2% of --params.")
def plan(params, gpus_per_node, num_nodes, gpu_mem, cpu_mem, largest_layer, **opts):
    """Per-GPU memory that DDP, ZeRO-1/2/3 and CPU offload need for a model, and what fits.

    Model states only (weights, gradients, optimizer); activations come on top. Without
    --gpus-per-node and --gpu-mem the nodes are asked (the env probe).

    \b
    Example:
      clustercheck plan --params 7B --gpus-per-node 8 --num-nodes 2 --gpu-mem 80
      clustercheck plan nodes.txt --params 13B

    Exit code: 0 some mode fits, 2 nothing fits, 64 bad input.
    """
    total = parse_count(params, "--params")
    layer = parse_count(largest_layer, "--largest-layer") if largest_layer else max(1, total // 50)
    if gpus_per_node is None or gpu_mem is None:
        nodes = load_nodes(**opts)
        result = check_env(nodes, fanout_options(**opts), Config(), timeout_s=60.0)
        found = [gpus(p.facts) for p in result.probed if p.facts]
        if not found or not any(found):
            raise InputError("the nodes report no NVIDIA GPU: give --gpus-per-node and --gpu-mem", "command line")
        gpus_per_node = gpus_per_node or min(len(g) for g in found)
        gpu_mem = gpu_mem or min(x.get("memory_mib") or 0 for g in found for x in g) / 1024
        num_nodes = num_nodes or len(found)
        cpu_mem = cpu_mem or min(get(p.facts, "host", "mem_total_bytes", default=0) for p in result.probed
                                 if p.facts) / 2 ** 30
    num_nodes = num_nodes or 1
    rows = needs(total, gpus_per_node, num_nodes, layer)
    findings = judge_plan(rows, gpu_mem * 2 ** 30, cpu_mem * 2 ** 30 if cpu_mem else None)
    click.echo(f"clustercheck plan: {total / 1e9:g}B parameters on {num_nodes} node(s) x {gpus_per_node} GPU(s) of "
               f"{gpu_mem:g} GiB; a mode fits if its model states take at most {HEADROOM:.0%} of a GPU "
               f"(activations need the rest)\n")
    click.echo("\n".join(findings_lines(findings, verbose=True)))
    sys.exit(EXIT_FAIL if worst(findings) is Status.FAIL else EXIT_OK)
