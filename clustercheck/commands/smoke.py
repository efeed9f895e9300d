import json
import sys

import click

from clustercheck.options import cluster_options, fanout_options, load_nodes
from clustercheck.report import write_report
from clustercheck.smoke import check_smoke
from clustercheck.smoke.gather import SmokeOptions
from clustercheck.smoke.render import progress_printer, render_markdown, render_terminal, to_json

MODES = ["ddp", "zero1", "zero2", "zero3", "zero3-offload", "fsdp"]


@click.command()
@cluster_options
@click.option("--mode", type=click.Choice(MODES), default="ddp", show_default=True)
@click.option("--preset", type=click.Choice(["tiny", "small", "125m", "1b"]), default="tiny", show_default=True)
@click.option("--steps", type=click.IntRange(2), default=30, show_default=True)
@click.option("--micro-batch", type=click.IntRange(1), default=8, show_default=True)
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
              help="bf16 / fp16 need GPUs.")
@click.option("--data", help="A .txt or .jsonl file to train on, at this path on every node (default: generated).")
@click.option("--nproc-per-node", type=click.IntRange(1), help="Ranks per node. Default: slots=, else the GPU count, "
                                                              "else 1.")
@click.option("--rdzv-port", type=click.IntRange(1, 65535), default=29401, show_default=True)
@click.option("--timeout", type=click.FloatRange(10), default=600.0, show_default=True,
              help="Deadline in seconds for the whole run (the first DeepSpeed run compiles for ~100 s).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of the screen.")
@click.option("--report", is_flag=True, help="Also write a Markdown report into --reports-dir.")
@click.option("--reports-dir", default="reports", show_default=True, type=click.Path(file_okay=False))
def smoke(mode, preset, steps, micro_batch, precision, data, nproc_per_node, rdzv_port, timeout, as_json, report,
          reports_dir, **opts):
    """Train the reference model across the cluster for a few steps and judge the run.

    Ships reference_train/ to every node and starts it with torchrun (c10d rendezvous at
    the first node). Passes when the loss falls clearly, every rank holds the same
    weights and a checkpoint loads back identical; otherwise names the failure (import,
    out of memory, rendezvous, collective, node down, hang), the node and the ranks.

    \b
    Example:
      clustercheck smoke nodes.txt
      clustercheck smoke nodes.txt --mode zero3 --preset 125m --precision bf16

    Exit code: 0 passed, 2 failed, 64 bad input.
    """
    nodes = load_nodes(**opts)
    options = SmokeOptions(mode=mode, preset=preset, steps=steps, micro_batch=micro_batch, precision=precision,
                           data=data, nproc_per_node=nproc_per_node, rdzv_port=rdzv_port, timeout_s=timeout)
    result = check_smoke(nodes, fanout_options(**opts), options, progress=progress_printer())
    if as_json:
        click.echo(json.dumps(to_json(result.facts, result.findings), indent=1, default=str))
    else:
        click.echo(render_terminal(result.facts, result.findings, verbose=True))  # a pass's figures matter
    if report:
        path = write_report("smoke", render_markdown(result.facts, result.findings,
                                                     "clustercheck " + " ".join(sys.argv[1:])), reports_dir)
        click.echo(f"report: {path}", err=as_json)
    sys.exit(result.exit_code)
