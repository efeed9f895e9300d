"""The `clustercheck preflight` command (its --help is the reference: docs/reference.md)."""

import click

from clustercheck.preflight.options import PreflightOptions, preflight_stages
from clustercheck.preflight.view import PreflightView, load_baseline
from clustercheck.runner.options import ClusterOptions, OutputOptions, click_options, cluster_options, from_params
from clustercheck.runner.output import check, finish


def say(stage: str, text: str) -> None:
    click.echo(f"[preflight] {stage}: {text}", err=True)


@click.command()
@cluster_options
@click_options(PreflightOptions)
@click_options(OutputOptions, exclude=("report",))
def preflight(**params):
    """Everything in order (env, device, net, bench, smoke), one readiness report, and what changed.

    A failed stage skips those it makes pointless, saying why. The report goes to
    reports/<date>-<name>.md and .json, with plots; --baseline compares with an
    earlier .json. Without a nodes file, this machine is a one-node cluster.

    \b
    Example:
      clustercheck preflight                        # this machine
      clustercheck preflight nodes.txt --baseline reports/20261101-nodes.json
      clustercheck preflight --slurm                # inside an allocation

    Exit code: 0 ready, 1 ready with warnings, 2 not ready (or worse than the
    baseline), 64 bad input.
    """
    options, cluster = from_params(PreflightOptions, params), from_params(ClusterOptions, params)
    out = from_params(OutputOptions, params, report=True)
    out.validate()   # everything a run needs at its end is checked before it starts
    baseline, stages = load_baseline(options), preflight_stages(options)
    run = check(stages, cluster, selected=options.selected, progress=say)
    finish(PreflightView(stages, run, options, cluster.report_name, baseline), out)
