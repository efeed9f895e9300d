import json
import sys

import click

from clustercheck.config import load_config
from clustercheck.env import check_env
from clustercheck.env.render import render_markdown, render_terminal, to_json
from clustercheck.options import cluster_options, fanout_options, load_nodes
from clustercheck.report import write_report


@click.command()
@cluster_options
@click.option("--deep", is_flag=True, help="Also import torch and deepspeed on every node (slower: seconds).")
@click.option("--workdir", help="Directory training runs in on the nodes: checked to exist, free disk measured. "
                                "Default: the SSH login directory.")
@click.option("--timeout", type=click.FloatRange(1), default=60.0, show_default=True,
              help="Deadline in seconds for the probe on each node.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Thresholds file (TOML); default ./clustercheck.toml when present.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of the screen.")
@click.option("--report", is_flag=True, help="Also write a Markdown report into --reports-dir.")
@click.option("--reports-dir", default="reports", show_default=True, type=click.Path(file_okay=False))
@click.option("-v", "--verbose", is_flag=True, help="List the checks that passed too.")
def env(deep, workdir, timeout, config_path, as_json, report, reports_dir, verbose, **opts):
    """Compare what every node runs: versions, GPUs, network and host settings.

    Runs a small standard-library probe with each node's own interpreter
    (python= in the nodes file, --python, else python3) and names the odd nodes out.

    \b
    Example:
      clustercheck env nodes.txt
      clustercheck env nodes.txt --deep --report
      clustercheck env                 # this machine alone

    Exit code: 0 ready, 1 ready with warnings, 2 not ready (a check failed or a
    node could not be probed), 64 bad input.
    """
    config = load_config(config_path)
    nodes = load_nodes(**opts)
    result = check_env(nodes, fanout_options(**opts), config, timeout_s=timeout, workdir=workdir, deep=deep)
    if as_json:
        click.echo(json.dumps(to_json(result.probed, result.values, result.findings, config), indent=1, default=str))
    else:
        click.echo(render_terminal(result.probed, result.values, result.findings, verbose=verbose))
    if report:
        command = "clustercheck " + " ".join(sys.argv[1:])
        path = write_report("env", render_markdown(result.probed, result.values, result.findings, config, command),
                            reports_dir)
        click.echo(f"report: {path}", err=as_json)
    sys.exit(result.exit_code)
