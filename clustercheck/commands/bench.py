import json
import re
import sys

import click

from clustercheck.bench import check_bench
from clustercheck.bench.gather import BenchOptions, print_progress
from clustercheck.bench.plots import save_plots
from clustercheck.bench.render import render_markdown, render_terminal, to_json
from clustercheck.bench.rules import Expectations
from clustercheck.bench.table import COLLECTIVES
from clustercheck.errors import InputError
from clustercheck.options import cluster_options, fanout_options, load_nodes
from clustercheck.report import new_report_path, read_json_document, write_report

UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}


def parse_size(ctx, param, value):
    """nccl-tests style sizes: 8, 64K, 16M, 1G (powers of 1024)."""
    if value is None:
        return None
    match = re.fullmatch(r"(\d+)([KMG]?)B?", value.strip().upper())
    if not match:
        raise InputError(f"--{param.name.replace('_', '-')} takes a size like 8, 64K, 16M or 1G", "command line",
                         value=value)
    return int(match.group(1)) * UNITS[match.group(2)]


def parse_collectives(ctx, param, value):
    names = list(COLLECTIVES) if value.strip() == "all" else [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in COLLECTIVES]
    if unknown:
        raise InputError(f"unknown collective (known: {', '.join(COLLECTIVES)}, or all)", "command line",
                         value=unknown[0])
    return names


def load_baseline(path):
    return read_json_document(path, "bench", "a `clustercheck bench --json` document") if path else None


@click.command()
@cluster_options
@click.option("-c", "--collectives", default="all_reduce", show_default=True, callback=parse_collectives,
              help=f"Comma-separated, or all: {', '.join(COLLECTIVES)}.")
@click.option("-b", "--min-bytes", callback=parse_size, help="Smallest size (8, 64K, 16M, 1G). Default: 8 on NCCL, "
                                                           "1K on Gloo.")
@click.option("-e", "--max-bytes", callback=parse_size, help="Largest size. Default: 1G on NCCL, 64M on Gloo.")
@click.option("-f", "--step-factor", type=click.IntRange(2), help="Size multiplier. Default: 2 on NCCL, 4 on Gloo.")
@click.option("-n", "--iters", type=click.IntRange(1), help="Timed iterations per size. Default: 20 NCCL, 5 Gloo.")
@click.option("-w", "--warmup", type=click.IntRange(0), help="Warmup iterations per size. Default: 5 NCCL, 2 Gloo.")
@click.option("-d", "--dtype", type=click.Choice(["float", "double", "half", "bfloat16", "int32", "int64"]),
              default="float", show_default=True)
@click.option("-o", "--op", type=click.Choice(["sum", "prod", "max", "min"]), default="sum", show_default=True)
@click.option("--check/--no-check", default=True, show_default=True, help="Check every result's data (#wrong).")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="auto: NCCL when every node has CUDA GPUs, else Gloo.")
@click.option("--nproc-per-node", type=click.IntRange(1), help="Ranks per node. Default: slots=, else the GPU "
                                                              "count, else 1.")
@click.option("--ring", is_flag=True, help="NCCL_ALGO=Ring: measure the fabric, not NVLS/tree shortcuts.")
@click.option("--rdzv-port", type=click.IntRange(1, 65535), default=29400, show_default=True,
              help="torchrun's c10d rendezvous port on the first node.")
@click.option("--timeout", type=click.FloatRange(5), default=600.0, show_default=True,
              help="Deadline in seconds for each stage (launch, rendezvous, sweep).")
@click.option("--op-timeout", type=click.FloatRange(1), default=60.0, show_default=True,
              help="Deadline for one collective inside torch.distributed.")
@click.option("--pairwise", is_flag=True, help="Then exchange between every pair of nodes, in rounds, to name a "
                                               "slow node or link.")
@click.option("--pair-bytes", callback=parse_size, default="16M", show_default=True,
              help="Bytes each node of a pair sends (--pairwise).")
@click.option("--expect-busbw", type=click.FloatRange(0, min_open=True), help="Expected bus bandwidth, GB/s.")
@click.option("--baseline", type=click.Path(dir_okay=False), help="An earlier `bench --json` output to compare with.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of the tables.")
@click.option("--report", is_flag=True, help="Also write a Markdown report (and PNG plots) into --reports-dir.")
@click.option("--reports-dir", default="reports", show_default=True, type=click.Path(file_okay=False))
@click.option("-v", "--verbose", is_flag=True, help="List the checks that passed too.")
def bench(collectives, min_bytes, max_bytes, step_factor, iters, warmup, dtype, op, check, backend, nproc_per_node,
          ring, rdzv_port, timeout, op_timeout, pairwise, pair_bytes, expect_busbw, baseline, as_json, report,
          reports_dir, verbose, **opts):
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
    if min_bytes is not None and max_bytes is not None and min_bytes > max_bytes:
        raise InputError("--min-bytes is above --max-bytes", "command line", value=f"{min_bytes} > {max_bytes}")
    expect = Expectations(busbw_gbps=expect_busbw, baseline=load_baseline(baseline))
    nodes = load_nodes(**opts)
    options = BenchOptions(collectives=collectives, min_bytes=min_bytes, max_bytes=max_bytes, step_factor=step_factor,
                           iters=iters, warmup=warmup, dtype=dtype, op=op, check=check, backend=backend,
                           nproc_per_node=nproc_per_node, ring=ring, rdzv_port=rdzv_port, timeout_s=timeout,
                           op_timeout_s=op_timeout, pairwise=pairwise, pair_bytes=pair_bytes)
    result = check_bench(nodes, fanout_options(**opts), options, expect, progress=print_progress())
    if sys.stderr.isatty():
        click.echo("\r\033[K", err=True, nl=False)
    if as_json:
        click.echo(json.dumps(to_json(result.facts, result.findings), indent=1, default=str))
    else:
        click.echo(render_terminal(result.facts, result.findings, verbose))
    if report:
        path = new_report_path("bench", reports_dir)
        images = save_plots(result.facts, path[:-3])
        write_report("bench", render_markdown(result.facts, result.findings, "clustercheck " + " ".join(sys.argv[1:]),
                                              images), path=path)
        click.echo(f"report: {path}", err=as_json)
    sys.exit(result.exit_code)
