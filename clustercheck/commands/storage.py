"""The `clustercheck storage` command (its --help is the reference: docs/reference.md)."""

import click

from clustercheck.runner.options import click_options, cluster_options, from_params, output_options
from clustercheck.runner.output import run_one
from clustercheck.stages.storage.options import StorageOptions
from clustercheck.stages.storage.stage import StorageStage


@click.command()
@cluster_options
@click_options(StorageOptions)
@output_options
def storage(**params):
    """Measure the checkpoint (and data) directory from every rank slot of every node at once.

    Free space against the checkpoint the run will write (plan's accounting for --model or
    --params and --mode, times --keep); write, sync and read back from every slot at once, per
    node and in all, the slow node named; a file renamed on one node seen by the others within
    --coherence-window; writers stuck in D state named with what they wait on; --data-dir read as
    a loader would; and how long saving and loading the checkpoint will take.

    \b
    Example:
      clustercheck storage nodes.txt --checkpoint-dir /shared/ckpt --params 7B --mode zero3
      clustercheck storage nodes.txt --checkpoint-dir /shared/ckpt --data-dir /shared/data --report

    Exit code: 0 ready, 1 warnings, 2 not ready, 3 could not check, 64 bad input.
    """
    run_one(StorageStage(from_params(StorageOptions, params)), params)
