"""The `clustercheck diff` command (its --help is the reference: docs/reference.md)."""

import sys

import click

from clustercheck.preflight.diff import diff_reports, load_report, render_changes
from clustercheck.runner.options import FiniteRange


@click.command()
@click.argument("old", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
@click.option("--threshold", type=FiniteRange(0, 1), default=0.10, show_default=True,
              help="Bandwidth change that counts (0.10 = 10%).")
def diff(old, new, threshold):
    """What changed between two preflight reports (.json): versions, nodes, bandwidth, findings.

    OLD may also be nccl-tests output (all_reduce_perf ..., old or current format, mpirun-tagged
    or not): then only bus bandwidth is compared, at the largest message size both measured.

    \b
    Example:
      clustercheck diff reports/20261101-120000-nodes.json reports/20261121-090000-nodes.json
      clustercheck diff all_reduce_perf-2024.log reports/20261121-090000-nodes.json

    Exit code: 0 not worse, 2 worse (a node gone, a new failure, bandwidth down by more
    than the threshold), 3 nothing could be compared, 64 bad input.
    """
    changes = diff_reports(load_report(old), load_report(new), threshold)
    click.echo(render_changes(changes, old, new))
    sys.exit(changes.exit_code)
