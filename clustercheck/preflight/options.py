"""The options of `clustercheck preflight`: its own flags, and the stages' flags it passes on, borrowed from
the stages' options (declared there once)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Sequence

import click

from clustercheck.core.errors import InputError
from clustercheck.display.report_files import check_name
from clustercheck.preflight.sequence import STAGE_NAMES, short_sweep
from clustercheck.runner.options import FiniteRange, borrow, deadline_option, given_for, opt
from clustercheck.runner.stage import Stage
from clustercheck.stages.bench.options import BenchOptions
from clustercheck.stages.bench.stage import BenchStage
from clustercheck.stages.device.options import DeviceOptions
from clustercheck.stages.device.stage import DeviceStage
from clustercheck.stages.env.options import EnvOptions
from clustercheck.stages.env.stage import EnvStage
from clustercheck.stages.net.options import NetOptions
from clustercheck.stages.net.stage import NetStage
from clustercheck.stages.smoke.options import SmokeOptions
from clustercheck.stages.smoke.stage import SmokeStage
from clustercheck.stages.storage.options import StorageOptions
from clustercheck.stages.storage.stage import StorageStage


def parse_stages(ctx, param, value):
    if value is None:
        return value
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [n for n in names if n not in STAGE_NAMES]
    if unknown:
        raise InputError(f"--{param.name}: unknown stage (stages: {', '.join(STAGE_NAMES)})", "command line",
                         value=unknown[0])
    return names


@dataclass
class PreflightOptions:
    """preflight's own flags, and the stages' flags it passes on, borrowed from the stages (declared there once)."""

    only: Optional[Sequence[str]] = opt("--only", callback=parse_stages,
                                        help=f"Run only these stages (comma-separated: {', '.join(STAGE_NAMES)}).")
    skip: Optional[Sequence[str]] = opt("--skip", callback=parse_stages, help="Skip these stages.")
    config_path: Optional[str] = borrow(EnvOptions, "config_path")
    workdir: Optional[str] = borrow(EnvOptions, "workdir")
    env_baseline: Optional[str] = borrow(EnvOptions, "baseline", "--env-baseline")
    device_seconds: float = borrow(DeviceOptions, "seconds", "--device-seconds", default=6.0,
                                   help="How long the device stage measures every device, all at once.")
    checkpoint_dir: Optional[str] = borrow(StorageOptions, "checkpoint_dir", help=(
        "Where the run saves checkpoints (an absolute path on the nodes, e.g. your shared filesystem): storage "
        "measures it and smoke saves there. Default: each node's run directory."))
    data_dir: Optional[str] = borrow(StorageOptions, "data_dir")
    params: Optional[str] = borrow(StorageOptions, "params", help=(
        "Your model's parameters (7B, 125M): the checkpoint storage sizes. Default: --model's config.json where "
        "this machine has it, else smoke's model."))
    keep: int = borrow(StorageOptions, "keep")
    storage_seconds: float = borrow(StorageOptions, "seconds", "--storage-seconds", default=2.0,
                                    help="Time budget of each storage phase (write, read back, data), on every node "
                                         "at once.")
    master_port: int = borrow(NetOptions, "master_port")
    rdzv_port: int = borrow(NetOptions, "rdzv_port")
    attempt_timeout_s: float = borrow(NetOptions, "attempt_timeout_s")
    bench_max_bytes: int = borrow(BenchOptions, "max_bytes", "--bench-max-bytes", default=16 * 2 ** 20,
                                  help="Largest all_reduce of the short sweep.")
    pairwise: str = borrow(BenchOptions, "pairwise")
    smoke_mode: str = borrow(SmokeOptions, "mode", "--smoke-mode")
    smoke_steps: int = borrow(SmokeOptions, "steps", "--smoke-steps")
    smoke_preset: str = borrow(SmokeOptions, "preset", "--smoke-preset")
    model: Optional[str] = borrow(SmokeOptions, "model")
    deepspeed: Optional[str] = borrow(SmokeOptions, "deepspeed")
    lora: bool = borrow(SmokeOptions, "lora")
    timeout_s: float = deadline_option(600.0, "of the bench and smoke stages, each", minimum=10)
    baseline: Optional[str] = opt("--baseline", type=click.Path(dir_okay=False),
                                  help="An earlier preflight .json: show what changed.")
    threshold: float = opt("--threshold", default=0.10, type=FiniteRange(0, 1),
                           help="Bandwidth change that counts, against --baseline.")
    name: Optional[str] = opt("--name", help="The report's name: reports/<date>-<name>.md (default: the nodes "
                                             "file's name).")

    def __post_init__(self):
        if self.name is not None:
            check_name(self.name)

    @property
    def selected(self) -> List[str]:
        return [s for s in (self.only or STAGE_NAMES) if s not in (self.skip or ())]


def preflight_stages(options: PreflightOptions) -> List[Stage]:
    """The stages with the options preflight derives; each knows which of them the user gave (a figure asked by
    one is shown unfolded: runner/stage.mark_answers), not preflight's own defaults."""
    stages = derived_stages(options)
    for stage in stages:
        stage.asked = given_for(options, type(stage.options))
    return stages


def derived_stages(options: PreflightOptions) -> List[Stage]:
    required = (("transformers",) if options.model else ()) + (("peft",) if options.lora else ())
    return [EnvStage(EnvOptions(workdir=options.workdir, config_path=options.config_path, required=required,
                                baseline=options.env_baseline)),
            DeviceStage(DeviceOptions(seconds=options.device_seconds)),
            StorageStage(storage_options(options)),
            NetStage(NetOptions(master_port=options.master_port, rdzv_port=options.rdzv_port,
                                attempt_timeout_s=options.attempt_timeout_s)),
            BenchStage(short_sweep(options.bench_max_bytes, options.pairwise, options.timeout_s, options.rdzv_port,
                                   options.config_path)),
            SmokeStage(SmokeOptions(mode=options.smoke_mode, steps=options.smoke_steps, timeout_s=options.timeout_s,
                                    rdzv_port=options.rdzv_port, model=options.model, deepspeed=options.deepspeed,
                                    lora=options.lora, preset=options.smoke_preset,
                                    checkpoint_dir=options.checkpoint_dir))]


def storage_options(options: PreflightOptions) -> StorageOptions:
    """The checkpoint smoke (or the user's run) writes: --params, else --model's config where this machine has
    it, else smoke's own model, in smoke's mode."""
    local_model = options.model if options.model and os.path.exists(options.model) and not options.params else None
    return StorageOptions(checkpoint_dir=options.checkpoint_dir, data_dir=options.data_dir, params=options.params,
                          model=local_model, preset=options.smoke_preset, mode=options.smoke_mode, keep=options.keep,
                          seconds=options.storage_seconds)
