"""The `clustercheck launch` command (its --help is the reference: docs/reference.md)."""

import json
import shlex
import sys

import click

from clustercheck.core.errors import InputError
from clustercheck.core.result import Status
from clustercheck.runner.options import ClusterOptions, click_options, cluster_options, from_params
from clustercheck.runner.output import check
from clustercheck.stages.env.options import EnvOptions
from clustercheck.stages.env.stage import EnvStage
from clustercheck.stages.net.options import NetOptions
from clustercheck.stages.net.stage import NetStage
from clustercheck.tools import launch_recipes as recipe


@click.command()
@cluster_options
@click.option("--script", default="train.py", show_default=True, help="Your training script, as the nodes see it.")
@click.option("--args", "script_args", default="", help="Its arguments, one string (quoted as a shell would).")
@click.option("--llamafactory-config", default="train.yaml", show_default=True,
              help="The LLaMA-Factory YAML for its command lines.")
@click_options(NetOptions)
@click.option("--json", "as_json", is_flag=True, help="The launch facts and commands as JSON.")
@click.option("--from", "report", type=click.Path(dir_okay=False),
              help="A preflight report (.json): print the commands for the nodes that passed in it (world size, "
                   "ranks and master recomputed; the master never a failed node), without running anything.")
def launch(script, script_args, llamafactory_config, as_json, report, **params):
    """The exact commands to launch your job on a verified cluster.

    Runs env and net, then prints torchrun (one line per node, and one srun line for
    Slurm), a DeepSpeed hostfile and command, LLaMA-Factory's environment and an
    accelerate config, with MASTER_ADDR, the ports and the interface that were verified.
    Refuses, with the reason, when env or net did not pass. net's options apply to its run.

    \b
    Example:
      clustercheck launch nodes.txt --script /shared/train.py --args "--lr 1e-4"

    Exit code: 0 printed, 2 not ready (nothing printed but the reason), 64 bad input.
    """
    try:
        args = shlex.split(script_args)
    except ValueError as exc:
        raise InputError(f"--args is not a shell word list ({exc})", "command line", value=script_args) from None
    if report:
        sys.exit(click.echo(recipe.from_report(report, script, args, llamafactory_config, as_json)) or 0)
    stages = [EnvStage(EnvOptions()), NetStage(from_params(NetOptions, params))]
    run = check(stages, from_params(ClusterOptions, params),
                progress=lambda stage, text: click.echo(f"[launch] {stage}: {text}", err=True))
    spec, reason = recipe.from_run(run)
    click.echo(json.dumps(recipe.to_json(spec, reason, script, args, llamafactory_config), indent=1) if as_json
               else recipe.text(run, spec, reason, script, args, llamafactory_config))
    sys.exit(0 if spec is not None else Status.FAIL.exit_code)
