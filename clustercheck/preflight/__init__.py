"""`clustercheck preflight`: the runner over env, net, bench and smoke, one readiness report.

The stages run in that order over one set of connections (clustercheck.runner.stage.run_stages);
each stage's own skip rule says which later stages its result makes pointless. What this
module adds is the choice of stages and their options for a short, whole check, and the
report (report.py) with what changed since an earlier one (diff.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence

import click

from clustercheck.core.errors import InputError
from clustercheck.display.findings import findings_lines
from clustercheck.preflight.diff import Changes, diff_reports, load_report, render_changes
from clustercheck.preflight.report import to_json, write_preflight_report
from clustercheck.runner.options import OutputOptions, opt
from clustercheck.runner.stage import RunResult, Stage
from clustercheck.stages.bench import BenchStage
from clustercheck.stages.bench.gather import PAIR_MODES, BenchOptions, format_size, parse_size
from clustercheck.stages.env import EnvOptions, EnvStage
from clustercheck.stages.net import NetStage
from clustercheck.stages.net.gather import DEFAULT_MASTER_PORT, DEFAULT_RDZV_PORT, NetOptions
from clustercheck.stages.smoke import SmokeStage
from clustercheck.stages.smoke.gather import MODES, SmokeOptions

STAGES = (EnvStage, NetStage, BenchStage, SmokeStage)
STAGE_NAMES = tuple(cls.name for cls in STAGES)


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
    only: Optional[Sequence[str]] = opt("--only", callback=parse_stages,
                                        help=f"Run only these stages (comma-separated: {', '.join(STAGE_NAMES)}).")
    skip: Optional[Sequence[str]] = opt("--skip", callback=parse_stages, help="Skip these stages.")
    config_path: Optional[str] = opt("--config", type=click.Path(dir_okay=False), help="Thresholds file (as for env).")
    workdir: Optional[str] = opt("--workdir", help="Directory training runs in on the nodes (env checks it).")
    master_port: int = opt("--master-port", default=DEFAULT_MASTER_PORT, type=click.IntRange(1, 65535),
                           help="MASTER_PORT, tested on every node by net.")
    rdzv_port: int = opt("--rdzv-port", default=DEFAULT_RDZV_PORT, type=click.IntRange(1, 65535),
                         help="torchrun's c10d rendezvous port: tested on every node by net, used by bench and smoke.")
    attempt_timeout_s: float = opt("--attempt-timeout", default=3.0, type=click.FloatRange(0.1, 60))
    bench_max_bytes: int = opt("--bench-max-bytes", default=16 * 2 ** 20, callback=parse_size, show=format_size,
                               help="Largest all_reduce of the short sweep.")
    pairwise: str = opt("--pairwise", default="auto", type=click.Choice(PAIR_MODES), is_flag=False, flag_value="auto",
                        help="The bench's pair rounds that name a slow node: adaptive, full, auto (full up to 4 "
                             "nodes), off.")
    smoke_mode: str = opt("--smoke-mode", default="ddp", type=click.Choice(MODES))
    smoke_steps: int = opt("--smoke-steps", default=30, type=click.IntRange(2))
    model: Optional[str] = opt("--model", help="smoke fine-tunes your Hugging Face model directory (an absolute "
                                               "path, the same on every node).")
    deepspeed: Optional[str] = opt("--deepspeed", type=click.Path(dir_okay=False),
                                   help="smoke runs with your DeepSpeed config (\"auto\" resolved; its stage sets "
                                        "the mode).")
    lora: bool = opt("--lora", is_flag=True, default=False, help="smoke trains a LoRA adapter on --model.")
    timeout_s: float = opt("--timeout", default=600.0, type=click.FloatRange(10),
                           help="Deadline in seconds of the bench and smoke stages, each.")
    baseline: Optional[str] = opt("--baseline", type=click.Path(dir_okay=False),
                                  help="An earlier preflight .json: show what changed.")
    threshold: float = opt("--threshold", default=0.10, type=click.FloatRange(0, 1),
                           help="Bandwidth change that counts, against --baseline.")
    name: Optional[str] = opt("--name", help="The report's name: reports/<date>-<name>.md (default: the nodes "
                                             "file's name).")

    @property
    def selected(self) -> List[str]:
        return [s for s in (self.only or STAGE_NAMES) if s not in (self.skip or ())]


def short_sweep(max_bytes: int = 16 * 2 ** 20, pairwise: str = "auto", timeout_s: float = 600.0,
                rdzv_port: int = DEFAULT_RDZV_PORT, config_path: Optional[str] = None) -> BenchOptions:
    """preflight's bench: pair rounds of 4 MiB, then all_reduce from 1 MiB (or less) to max_bytes."""
    return BenchOptions(collectives=("all_reduce",), min_bytes=min(2 ** 20, max_bytes), max_bytes=max_bytes,
                        step_factor=4, iters=5, warmup=2, pairwise=pairwise, pair_bytes=4 * 2 ** 20,
                        timeout_s=timeout_s, rdzv_port=rdzv_port, config_path=config_path)


def preflight_stages(options: PreflightOptions) -> List[Stage]:
    required = (("transformers",) if options.model else ()) + (("peft",) if options.lora else ())
    return [EnvStage(EnvOptions(workdir=options.workdir, config_path=options.config_path, required=required)),
            NetStage(NetOptions(master_port=options.master_port, rdzv_port=options.rdzv_port,
                                attempt_timeout_s=options.attempt_timeout_s)),
            BenchStage(short_sweep(options.bench_max_bytes, options.pairwise, options.timeout_s, options.rdzv_port,
                                   options.config_path)),
            SmokeStage(SmokeOptions(mode=options.smoke_mode, steps=options.smoke_steps, timeout_s=options.timeout_s,
                                    rdzv_port=options.rdzv_port, model=options.model, deepspeed=options.deepspeed,
                                    lora=options.lora))]


class PreflightView:
    """The readiness report of a preflight run, and what changed against --baseline."""

    def __init__(self, stages: Sequence[Stage], run: RunResult, options: PreflightOptions, default_name: str,
                 baseline: Optional[Dict]):
        self.stages, self.run, self.options = list(stages), run, options
        self.name = options.name or default_name
        self.baseline = baseline
        self.changes: Optional[Changes] = None
        if baseline is not None:
            self.changes = diff_reports(baseline, to_json(self.stages, run, ""), options.threshold)

    @property
    def exit_code(self) -> int:
        return max(self.run.exit_code, self.changes.exit_code if self.changes else 0)

    def to_json(self, command: str) -> Dict:
        doc = to_json(self.stages, self.run, command)
        if self.changes is not None:
            doc["changes"] = dict(asdict(self.changes), baseline=self.options.baseline, worse=self.changes.worse)
        return doc

    def render_terminal(self, verbose: bool) -> str:
        lines = findings_lines(self.run.findings, verbose)
        if self.changes is not None:
            lines += ["", render_changes(self.changes, self.options.baseline, "this run")]
        return "\n".join(lines)

    def write_report(self, out: OutputOptions, command: str) -> List[str]:
        paths = write_preflight_report(self.stages, self.run, command, out.reports_dir, self.name)
        return [f"report: {paths['markdown']} (and {paths['json'].rsplit('/', 1)[-1]})"]


def load_baseline(options: PreflightOptions) -> Optional[Dict]:
    return load_report(options.baseline) if options.baseline else None
