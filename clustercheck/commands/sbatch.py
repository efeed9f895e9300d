"""The `clustercheck sbatch` command (its --help is the reference: docs/reference.md)."""

import os
import shlex
import sys

import click

SCRIPT = """#!/bin/bash
#SBATCH --job-name=clustercheck-preflight
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
{gpus}#SBATCH --time={time}
#SBATCH --output={reports}/preflight-%j.out
{extra}
# Runs on the allocation's first node and reaches every node through job steps
# (srun --overlap): no SSH to compute nodes needed. The job's exit code is the verdict:
# 0 READY, 1 READY with warnings, 2 NOT READY, 3 could not check everything.
set -uo pipefail
cd "$SLURM_SUBMIT_DIR"
mkdir -p {reports}
PYTHON=${{CLUSTERCHECK_PYTHON:-{python}}}
command -v "$PYTHON" >/dev/null || PYTHON=python3   # not this path on the node: the one on PATH
"$PYTHON" -m clustercheck preflight --slurm --reports-dir {reports} --name "slurm-$SLURM_JOB_ID"{args}
code=$?
[ "$code" -le 3 ] || code=3   # could not run (127), interrupted (130): could not check, never OK
exit $code
"""


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
    os.makedirs(reports_dir, exist_ok=True)   # Slurm opens the job's output file there before the script runs
    extra = "".join(f"#SBATCH --{key}={value}\n" for key, value in (("partition", partition), ("account", account))
                    if value)
    click.echo(SCRIPT.format(nodes=nodes, gpus=f"#SBATCH --gpus-per-node={gpus_per_node}\n" if gpus_per_node else "",
                             time=time_limit, reports=shlex.quote(reports_dir), extra=extra.rstrip("\n"),
                             python=shlex.quote(sys.executable),
                             args="".join(" " + shlex.quote(a) for a in preflight_args)), nl=False)
