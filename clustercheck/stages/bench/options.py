"""The options of `clustercheck bench`: dataclass fields that are also its flags (runner/options.py),
and how sizes (8, 64K, 16M, 1G) and collective lists are read from the command line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

import click

from clustercheck.core.errors import InputError
from clustercheck.runner.options import (FiniteRange, deadline_option, opt, rdzv_port_option, resolve_stall_window,
                                         stall_window_option)
from clustercheck.outputs.nccl_tests import COLLECTIVES

PAIR_MODES = ["auto", "adaptive", "full", "off"]


UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}


def parse_size(ctx, param, value):
    """nccl-tests style sizes: 8, 64K, 16M, 1G (powers of 1024)."""
    if value is None:
        return value
    match = re.fullmatch(r"(\d+)([KMG]?)B?", value.strip().upper())
    if not match:
        raise InputError(f"--{param.name.replace('_', '-')} takes a size like 8, 64K, 16M or 1G", "command line",
                         value=value)
    return int(match.group(1)) * UNITS[match.group(2)]


def format_size(num_bytes: int) -> str:
    for suffix in ("G", "M", "K"):
        if num_bytes >= UNITS[suffix] and num_bytes % UNITS[suffix] == 0:
            return f"{num_bytes // UNITS[suffix]}{suffix}"
    return str(num_bytes)


def parse_collectives(ctx, param, value):
    names = list(COLLECTIVES) if value.strip() == "all" else [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in COLLECTIVES]
    if unknown:
        raise InputError(f"unknown collective (known: {', '.join(COLLECTIVES)}, or all)", "command line",
                         value=unknown[0])
    return tuple(names)


def parse_collective(ctx, param, value):
    """One collective, by name: what an nccl-tests output holds where its table does not tell."""
    if value is None:
        return value
    if value.strip() not in COLLECTIVES:
        raise InputError(f"{param.opts[0]}: unknown collective (known: {', '.join(COLLECTIVES)})", "command line",
                         value=value)
    return value.strip()


def _size(*decls, default=None, help=""):
    return opt(*decls, default=default, callback=parse_size, show=format_size, help=help)


@dataclass
class BenchOptions:
    collectives: Sequence[str] = opt("-c", "--collectives", default=("all_reduce",), callback=parse_collectives,
                                     show=",".join,
                                     help=f"Comma-separated, or all: {', '.join(COLLECTIVES)}.")
    min_bytes: Optional[int] = _size("-b", "--min-bytes", help="Smallest size (8, 64K, 16M, 1G). Default: 8 on "
                                                               "NCCL, 1K on Gloo.")
    max_bytes: Optional[int] = _size("-e", "--max-bytes", help="Largest size. Default: 1G on NCCL, 64M on Gloo.")
    step_factor: Optional[int] = opt("-f", "--step-factor", type=click.IntRange(2, 1024),
                                     help="Size multiplier. Default: 2 on NCCL, 4 on Gloo.")
    iters: Optional[int] = opt("-n", "--iters", type=click.IntRange(1, 1_000_000),
                               help="Most timed iterations per size (the size budget may allow fewer). Default: 20.")
    warmup: Optional[int] = opt("-w", "--warmup", type=click.IntRange(0, 1_000_000),
                                help="Warmup iterations per size, at most. Default: 5.")
    dtype: str = opt("-d", "--dtype", default="float",
                     type=click.Choice(["float", "double", "half", "bfloat16", "int32", "int64"]))
    op: str = opt("-o", "--op", default="sum", type=click.Choice(["sum", "prod", "max", "min"]))
    check: bool = opt("--check/--no-check", default=True, help="Check every result's data (#wrong).")
    backend: str = opt("--backend", default="auto", type=click.Choice(["auto", "nccl", "gloo"]),
                       help="auto: NCCL when every node has CUDA GPUs, else Gloo.")
    nproc_per_node: Optional[int] = opt("--nproc-per-node", type=click.IntRange(1, 1024),
                                        help="Ranks per node. Default: slots=, else the GPU count, else 1.")
    ring: bool = opt("--ring", is_flag=True, default=False,
                     help="NCCL_ALGO=Ring: measure the fabric, not NVLS/tree shortcuts.")
    rdzv_port: int = rdzv_port_option()
    timeout_s: float = deadline_option(600.0, "for each launch (start, rendezvous, sweep)", minimum=5)
    stall_s: Optional[float] = stall_window_option(
        45.0, "Once results come, this long without one (or 3x the longest gap seen) is a hang: every rank's stack "
              "is taken and the odd ranks named before the run is stopped.", "--op-timeout and --timeout")
    op_timeout_s: float = opt("--op-timeout", default=60.0, type=FiniteRange(1),
                              help="Deadline for one collective inside torch.distributed.")
    pairwise: str = opt("--pairwise", default="auto", type=click.Choice(PAIR_MODES), is_flag=False,
                        flag_value="auto",
                        help="Before the sweep, rounds of node pairs that name a slow node or link: adaptive "
                             "(a screen, then suspects against nodes that passed: a few rounds at any size), "
                             "full (every pair: N-1 rounds), auto (full up to 4 nodes, else adaptive), off.")
    pair_bytes: int = _size("--pair-bytes", default=16 * 2 ** 20, help="Bytes each node of a pair sends.")
    size_budget_s: float = opt("--size-budget", default=5.0, type=FiniteRange(0.05),
                               help="Seconds for each size of the sweep and each round of pairs: iterations "
                                    "beyond the first stop there.")
    stage_budget_s: float = opt("--stage-budget", default=60.0, type=FiniteRange(1),
                                help="Seconds for the sweep, and for the pair rounds: past them no larger size "
                                     "and no further round starts (the report says so).")
    expect_busbw: Optional[float] = opt("--expect-busbw", type=FiniteRange(0, min_open=True),
                                        help="Expected all_reduce bus bandwidth, GB/s (default: [bench] "
                                             "expected_busbw, else the published figure for the GPUs and fabric).")
    baseline: Optional[str] = opt("--baseline", type=click.Path(dir_okay=False),
                                  help="An earlier `bench --json`, preflight report, or nccl-tests output "
                                       "(all_reduce_perf, all_gather_perf ..., old or current format, mpirun-tagged "
                                       "or not) to compare with, size by size; the collective is read from its table.")
    baseline_collective: Optional[str] = opt(
        "--baseline-collective", callback=parse_collective, metavar="NAME",
        help="The collective of an nccl-tests --baseline whose table does not tell (all_gather and alltoall tables "
             "read alike, and all_reduce and sendrecv ones on 2 ranks) and that names it neither in a \"Collective "
             "test starting\" line nor in its file name.")
    config_path: Optional[str] = opt("--config", type=click.Path(dir_okay=False),
                                     help="Thresholds file ([bench] expected_busbw, expected_fraction).")
    keep_logs: bool = opt("--keep-logs", is_flag=True, default=False,
                          help="Keep the ranks' NCCL INFO logs (nccl.HOST.PID.log in each node's run directory) "
                               "that the path NCCL took is read from; by default they are removed with the run.")


    def __post_init__(self):
        self.stall_s = resolve_stall_window(self.stall_s, 45.0, {"--op-timeout": self.op_timeout_s,
                                                                 "--timeout": self.timeout_s})
        if self.baseline_collective and not self.baseline:
            raise InputError("--baseline-collective names the collective of a --baseline file; no --baseline was given",
                             "command line", value=self.baseline_collective)
