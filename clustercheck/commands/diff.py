"""The `clustercheck diff` command (its --help is the reference: docs/reference.md)."""

import sys

import click

from clustercheck.preflight.diff import DiffOptions, diff_reports, load_report, render_changes
from clustercheck.runner.options import FiniteRange, click_options


@click.command()
@click.argument("old", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
@click.option("--threshold", type=FiniteRange(0, 1), default=0.10, show_default=True,
              help="Bandwidth change that counts (0.10 = 10%).")
@click_options(DiffOptions)
def diff(old, new, threshold, collective):
    """What changed between two preflight reports (.json): versions, nodes, bandwidth, findings.

    OLD (or NEW) may also be nccl-tests output (all_reduce_perf, all_gather_perf ..., old or
    current format, mpirun-tagged or not): then only bus bandwidth is compared, at the largest
    message size both measured. Its collective is read from the table's columns where they
    tell, else from its "Collective test starting" line, its file name or --collective, and
    the output says which.

    \b
    Example:
      clustercheck diff reports/20261101-120000-nodes.json reports/20261121-090000-nodes.json
      clustercheck diff all_reduce_perf-2024.log reports/20261121-090000-nodes.json
      clustercheck diff run-2024.log reports/20261121-090000-nodes.json --collective all_gather

    Exit code: 0 not worse, 2 worse (a node gone, a new failure, bandwidth down by more
    than the threshold), 3 nothing could be compared, 64 bad input.
    """
    changes = diff_reports(load_report(old, collective), load_report(new, collective), threshold)
    click.echo(render_changes(changes, old, new))
    sys.exit(changes.exit_code)
