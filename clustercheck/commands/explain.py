"""The `clustercheck explain` command (its --help is the reference: docs/reference.md)."""

import sys

import click

from clustercheck.explain.verdict import explain as explain_logs
from clustercheck.explain.verdict import render


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="FILE_OR_DIR...")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of the text.")
@click.option("-v", "--verbose", is_flag=True, help="List what was read as fine too.")
def explain(paths, as_json, verbose):
    """Explain a failed job from its own logs, offline: which node and rank failed first, why, and the fix.

    Reads Slurm output files, torchrun / DeepSpeed / accelerate / LLaMA-Factory logs and directories of
    per-rank files (ranks' lines interleaved or not; [rankN]:, [defaultN]:, srun's N:, mpirun's tags and
    host prefixes tell where each line came from), through the error spaces of CUDA, NCCL, the OS,
    torch.distributed, the launchers and schedulers. A file that is an output clustercheck reads (nvidia-smi
    -q -x, dcgmi diag, a kernel log with Xids, an nccl-tests table) is judged as env, device and bench judge it.

    \b
    Example:
      clustercheck explain slurm-123456.out
      clustercheck explain logs/ --json          # a directory of per-rank files

    Exit code: 2 a cause was found, 3 the failure could not be classified or nothing was recognised,
    0 / 1 only recorded outputs that passed (with warnings), 64 bad input (a missing, empty, binary or
    non-UTF-8 file).
    """
    result = explain_logs(list(paths))
    click.echo(render(result, as_json, verbose))
    sys.exit(result.exit_code)
