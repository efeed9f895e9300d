import json
import os
import shlex
import sys

import click

from clustercheck.commands.bench import parse_size
from clustercheck.config import load_config
from clustercheck.errors import InputError
from clustercheck.net.gather import DEFAULT_MASTER_PORT, NetOptions
from clustercheck.options import cluster_options, fanout_options, load_nodes
from clustercheck.preflight import STAGES, PreflightOptions, run_preflight, short_sweep
from clustercheck.preflight.diff import diff_reports, load_report, render_changes
from clustercheck.preflight.report import to_json, write_preflight_report
from clustercheck.render import findings_lines
from clustercheck.smoke.gather import SmokeOptions


def parse_stages(ctx, param, value):
    if value is None:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in STAGES]
    if unknown:
        raise InputError(f"--{param.name}: unknown stage (stages: {', '.join(STAGES)})", "command line",
                         value=unknown[0])
    return names


def connection_args(opts) -> str:
    """The nodes and connection options as given, for the stages' reproduce-with commands."""
    parts = [shlex.quote(opts["nodes_file"])] if opts.get("nodes_file") else (["--slurm"] if opts.get("slurm") else [])
    for key, flag in (("ssh_config", "-F"), ("python_path", "--python"), ("user", "--user"), ("port", "--port")):
        if opts.get(key):
            parts += [flag, shlex.quote(str(opts[key]))]
    parts += [f"--known-hosts {shlex.quote(path)}" for path in opts.get("known_hosts") or ()]
    if opts.get("accept_new_hostkeys"):
        parts.append("--accept-new-hostkeys")
    return " ".join(parts)


@click.command()
@cluster_options
@click.option("--only", callback=parse_stages, help=f"Run only these stages (comma-separated: {', '.join(STAGES)}).")
@click.option("--skip", callback=parse_stages, help="Skip these stages.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Thresholds file (as for env).")
@click.option("--workdir", help="Directory training runs in on the nodes (env checks it).")
@click.option("--master-port", type=click.IntRange(1, 65535), default=DEFAULT_MASTER_PORT, show_default=True)
@click.option("--attempt-timeout", type=click.FloatRange(0.1, 60), default=3.0, show_default=True)
@click.option("--bench-max-bytes", callback=parse_size, default="16M", show_default=True,
              help="Largest all_reduce of the short sweep.")
@click.option("--pairwise/--no-pairwise", default=True, show_default=True, help="Pairwise rounds in the bench.")
@click.option("--smoke-mode", type=click.Choice(["ddp", "zero1", "zero2", "zero3", "zero3-offload", "fsdp"]),
              default="ddp", show_default=True)
@click.option("--smoke-steps", type=click.IntRange(2), default=30, show_default=True)
@click.option("--timeout", type=click.FloatRange(10), default=600.0, show_default=True,
              help="Deadline in seconds of the bench and smoke stages, each.")
@click.option("--baseline", type=click.Path(dir_okay=False), help="An earlier preflight .json: show what changed.")
@click.option("--threshold", type=click.FloatRange(0, 1), default=0.10, show_default=True,
              help="Bandwidth change that counts, against --baseline.")
@click.option("--reports-dir", default="reports", show_default=True, type=click.Path(file_okay=False))
@click.option("--name", help="The report's name: reports/<date>-<name>.md (default: the nodes file's name).")
@click.option("--json", "as_json", is_flag=True, help="Print the report's JSON instead of the screen.")
@click.option("-v", "--verbose", is_flag=True, help="List the checks that passed too.")
def preflight(only, skip, config_path, workdir, master_port, attempt_timeout, bench_max_bytes, pairwise, smoke_mode,
              smoke_steps, timeout, baseline, threshold, reports_dir, name, as_json, verbose, **opts):
    """Everything in order (env, net, bench, smoke), one readiness report, and what changed.

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
    old = load_report(baseline) if baseline else None
    stages = [s for s in (only or STAGES) if s not in (skip or [])]
    nodes = load_nodes(**opts)
    options = PreflightOptions(
        stages=stages, config=load_config(config_path), workdir=workdir,
        net=NetOptions(master_port=master_port, attempt_timeout_s=attempt_timeout),
        bench=short_sweep(bench_max_bytes, pairwise, timeout),
        smoke=SmokeOptions(mode=smoke_mode, steps=smoke_steps, timeout_s=timeout))
    nodes_arg = connection_args(opts)

    def progress(stage, text):
        click.echo(f"[preflight] {stage}: {text}", err=True)
    result = run_preflight(nodes, fanout_options(**opts), options, nodes_arg, progress)
    command = "clustercheck " + " ".join(sys.argv[1:])
    name = name or (os.path.splitext(os.path.basename(opts["nodes_file"]))[0] if opts.get("nodes_file")
                    else "slurm" if opts.get("slurm") else "local")
    paths = write_preflight_report(result, command, reports_dir, name)
    code = result.exit_code
    if as_json:
        click.echo(json.dumps(to_json(result, command), indent=1, default=str))
    else:
        click.echo("\n".join(findings_lines(result.findings, verbose)))
    click.echo(f"report: {paths['markdown']} (and {os.path.basename(paths['json'])})", err=as_json)
    if old is not None:
        changes = diff_reports(old, load_report(paths["json"]), threshold)
        click.echo(render_changes(changes, baseline, paths["json"]), err=as_json)
        code = max(code, changes.exit_code)
    sys.exit(code)
