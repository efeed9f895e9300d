"""The `clustercheck sbatch` command (its --help is the reference: docs/reference.md)."""

import os

import click

from clustercheck.tools.sbatch_script import batch_script


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--nodes", type=click.IntRange(1, 1_000_000), required=True, help="Nodes to allocate.")
@click.option("--gpus-per-node", type=click.IntRange(0, 1024), default=0, show_default=True)
@click.option("--time", "time_limit", default="00:30:00", show_default=True, help="Time limit (HH:MM:SS).")
@click.option("--partition", help="Slurm partition.")
@click.option("--account", help="Slurm account.")
@click.option("--reports-dir", default="reports", show_default=True)
@click.argument("preflight_args", nargs=-1, type=click.UNPROCESSED)
def sbatch(nodes, gpus_per_node, time_limit, partition, account, reports_dir, preflight_args):
    """Print a Slurm batch script that runs preflight in an allocation; the report lands in reports/.

    \b
    Example:
      clustercheck sbatch --nodes 4 --gpus-per-node 8 --partition gpu > preflight.sbatch
      sbatch preflight.sbatch
      clustercheck sbatch --nodes 2 -- --skip smoke      # arguments for preflight after --
    """
    text = batch_script(nodes, gpus_per_node, time_limit, partition, account, reports_dir, preflight_args)
    os.makedirs(reports_dir, exist_ok=True)   # Slurm opens the job's output file there before the script runs
    click.echo(text, nl=False)
