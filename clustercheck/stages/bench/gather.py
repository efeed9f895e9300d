"""Launch the bench worker with torchrun on every node and collect what every rank reports.

1. The node layer's documents: each node's GPUs (for --nproc-per-node and the backend), its
   training interface (for GLOO/NCCL_SOCKET_IFNAME), that torch is there.
2. The worker is shipped into each node's run directory and started with torchrun on
   all nodes at once (clustercheck.ranks.torchrun), every launch under a deadline.
No judging here: launches come back with their events, exit codes and the tail of stderr,
and the figures (figures.py) computed once from them.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import click

from clustercheck.core.errors import InputError
from clustercheck.core.inventory import Node
from clustercheck.node.facts import Probed
from clustercheck.node.readiness import choose_backend, ranks_per_node, readiness_problems
from clustercheck.onnode import BENCH_WORKER, bench_files
from clustercheck.onnode.rounds import round_limit
from clustercheck.ranks.torchrun import DEFAULT_RDZV_PORT, Launch, LaunchResult, run_torchrun, ship, stalled_text
from clustercheck.runner.options import opt
from clustercheck.stages.bench.expected import Expected, published
from clustercheck.stages.bench.figures import BenchFigures, compute_figures
from clustercheck.stages.bench.table import COLLECTIVES, bandwidths
from clustercheck.transport.fanout import Cluster

GLOO_DEFAULTS = dict(min_bytes=1024, max_bytes=64 * 2 ** 20, step_factor=4, iters=20, warmup=5)
NCCL_DEFAULTS = dict(min_bytes=8, max_bytes=2 ** 30, step_factor=2, iters=20, warmup=5)


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
    step_factor: Optional[int] = opt("-f", "--step-factor", type=click.IntRange(2),
                                     help="Size multiplier. Default: 2 on NCCL, 4 on Gloo.")
    iters: Optional[int] = opt("-n", "--iters", type=click.IntRange(1),
                               help="Most timed iterations per size (the size budget may allow fewer). Default: 20.")
    warmup: Optional[int] = opt("-w", "--warmup", type=click.IntRange(0),
                                help="Warmup iterations per size, at most. Default: 5.")
    dtype: str = opt("-d", "--dtype", default="float",
                     type=click.Choice(["float", "double", "half", "bfloat16", "int32", "int64"]))
    op: str = opt("-o", "--op", default="sum", type=click.Choice(["sum", "prod", "max", "min"]))
    check: bool = opt("--check/--no-check", default=True, help="Check every result's data (#wrong).")
    backend: str = opt("--backend", default="auto", type=click.Choice(["auto", "nccl", "gloo"]),
                       help="auto: NCCL when every node has CUDA GPUs, else Gloo.")
    nproc_per_node: Optional[int] = opt("--nproc-per-node", type=click.IntRange(1),
                                        help="Ranks per node. Default: slots=, else the GPU count, else 1.")
    ring: bool = opt("--ring", is_flag=True, default=False,
                     help="NCCL_ALGO=Ring: measure the fabric, not NVLS/tree shortcuts.")
    rdzv_port: int = opt("--rdzv-port", default=DEFAULT_RDZV_PORT, type=click.IntRange(1, 65535),
                         help="torchrun's c10d rendezvous port on the first node (net tests it on every node).")
    timeout_s: float = opt("--timeout", default=600.0, type=click.FloatRange(5),
                           help="Deadline in seconds for each launch (start, rendezvous, sweep).")
    stall_s: float = opt("--stall-window", default=45.0, type=click.FloatRange(5),
                         help="Once results come, this long without one (or 3x the longest gap seen) is a hang: "
                              "every rank's stack is taken and the odd ranks named before the run is stopped. Keep "
                              "it below --op-timeout, which ends a stuck collective.")
    op_timeout_s: float = opt("--op-timeout", default=60.0, type=click.FloatRange(1),
                              help="Deadline for one collective inside torch.distributed.")
    pairwise: str = opt("--pairwise", default="auto", type=click.Choice(PAIR_MODES), is_flag=False,
                        flag_value="auto",
                        help="Before the sweep, rounds of node pairs that name a slow node or link: adaptive "
                             "(a screen, then suspects against nodes that passed: a few rounds at any size), "
                             "full (every pair: N-1 rounds), auto (full up to 4 nodes, else adaptive), off.")
    pair_bytes: int = _size("--pair-bytes", default=16 * 2 ** 20, help="Bytes each node of a pair sends.")
    size_budget_s: float = opt("--size-budget", default=5.0, type=click.FloatRange(0.05),
                               help="Seconds for each size of the sweep and each round of pairs: iterations "
                                    "beyond the first stop there.")
    stage_budget_s: float = opt("--stage-budget", default=60.0, type=click.FloatRange(1),
                                help="Seconds for the sweep, and for the pair rounds: past them no larger size "
                                     "and no further round starts (the report says so).")
    expect_busbw: Optional[float] = opt("--expect-busbw", type=click.FloatRange(0, min_open=True),
                                        help="Expected all_reduce bus bandwidth, GB/s (default: [bench] "
                                             "expected_busbw, else the published figure for the GPUs and fabric).")
    baseline: Optional[str] = opt("--baseline", type=click.Path(dir_okay=False),
                                  help="An earlier `bench --json`, preflight report, or nccl-tests output "
                                       "(all_reduce_perf ..., mpirun-tagged or not) to compare with, size by size.")
    config_path: Optional[str] = opt("--config", type=click.Path(dir_okay=False),
                                     help="Thresholds file ([bench] expected_busbw, expected_fraction).")


@dataclass
class BenchFacts:
    nodes: List[Node]
    probed: List[Probed]
    backend: str = "gloo"
    nproc: Dict[str, int] = field(default_factory=dict)
    stages: List[LaunchResult] = field(default_factory=list)   # the torchrun launch (pair rounds, then sweep)
    problems: Dict[str, str] = field(default_factory=dict)     # node -> why it could not take part
    expected: Optional[Expected] = None                         # what all_reduce's busbw should reach
    _figures: Optional[BenchFigures] = field(default=None, repr=False)

    @property
    def figures(self) -> BenchFigures:
        """Bandwidths from the launches' events, computed once (the launches are complete by then)."""
        if self._figures is None:
            self._figures = compute_figures(self.stages)
        return self._figures

    def failed_launches(self) -> List[LaunchResult]:
        return [s for s in self.stages if any(r.exit_code != 0 for r in s.runs.values())]


def pair_mode(requested: str, count: int) -> Optional[str]:
    """The pair rounds this many nodes get: none below 3 (one pair has nothing to be compared with)."""
    if requested == "off" or count < 3:
        return None
    if requested == "auto":
        return "full" if count <= 4 else "adaptive"
    return requested


def worker_config(options: BenchOptions, backend: str, nodes: Sequence[str]) -> Dict:
    defaults = NCCL_DEFAULTS if backend == "nccl" else GLOO_DEFAULTS
    config = {"backend": backend, "dtype": options.dtype, "op": options.op, "check": options.check,
              "op_timeout": options.op_timeout_s, "collectives": list(options.collectives),
              "placements": {c: list(COLLECTIVES[c].placements) for c in options.collectives},
              "size_budget": options.size_budget_s, "stage_budget": options.stage_budget_s,
              "nodes": list(nodes), "pairwise": pair_mode(options.pairwise, len(nodes)),
              "pair_bytes": options.pair_bytes, "max_rounds": round_limit(len(nodes))}
    for key in ("min_bytes", "max_bytes", "step_factor", "iters", "warmup"):
        value = getattr(options, key)
        config[key] = defaults[key] if value is None else value
    config["step_bytes"] = config["min_bytes"]
    return config


def expected_figure(options: BenchOptions, configured: float, probed: List[Probed], backend: str) -> Optional[Expected]:
    """--expect-busbw, else [bench] expected_busbw, else the published figure for what the nodes have."""
    if options.expect_busbw:
        return Expected(options.expect_busbw, "--expect-busbw")
    if configured:
        return Expected(configured, "[bench] expected_busbw")
    return published(probed, backend, options.ring)


def gather_bench(cluster: Cluster, nodes: Sequence[Node], probed: List[Probed], options: BenchOptions,
                 progress: Optional[Callable[[str, Dict], None]] = None, configured: float = 0.0) -> BenchFacts:
    """probed: the node layer's documents (interpreter, GPUs, training interface, torch)."""
    facts = BenchFacts(list(nodes), probed)
    facts.problems = readiness_problems(probed)
    if facts.problems:
        return facts
    facts.backend = choose_backend(probed, options.backend)
    facts.expected = expected_figure(options, configured, probed, facts.backend)
    facts.nproc = ranks_per_node(probed, options.nproc_per_node, facts.backend == "nccl")
    placed = ship(cluster, nodes, bench_files(), facts.problems)
    if facts.problems:
        return facts
    paths = {name: files[BENCH_WORKER] for name, files in placed.items()}

    config = worker_config(options, facts.backend, [n.name for n in nodes])
    if options.collectives or config["pairwise"]:
        env = {"NCCL_ALGO": "Ring"} if options.ring else {}  # on 2 nodes NCCL may pick tree: above the fabric
        facts.stages.append(run_torchrun(cluster, nodes, probed, Launch(
            "torchrun", paths, [json.dumps(config, separators=(",", ":"))], facts.nproc, options.rdzv_port,
            options.timeout_s, env, config, stall_s=options.stall_s,
            stall_cap_s=0.8 * options.op_timeout_s), progress))   # before a stuck collective times out
    return facts


def progress_text(event: Dict) -> Optional[str]:
    """One line for what a rank just reported, or None for events not worth a line."""
    kind = event.get("event")
    if kind == "start":
        return f"{event['world']} ranks up ({event['backend']})"
    if kind == "row":
        cell = event.get("in_place") or event.get("out_of_place") or {}
        if not cell.get("time_us"):
            return None
        _, busbw = bandwidths(event["collective"], event["size"], cell["time_us"], event["nranks"])
        return (f"{event['collective']} {format_size(event['size'])}B: busbw {busbw:.3f} GB/s "
                f"({cell.get('iters', '?')} iter{'' if cell.get('iters') == 1 else 's'})")
    if kind == "round":
        slowest = event.get("slowest")
        text = f"{event['phase']} round {event['round'] + 1}: {event['pairs']} pair{'s' * (event['pairs'] > 1)} " \
               f"in {event['seconds']:.1f} s"
        if slowest:
            text += f"; slowest {slowest[0]} <-> {slowest[1]} at {slowest[2]:.3f} GB/s"
        if event.get("reference"):
            text += f" (reference {event['reference']:.3f} GB/s)"
        return text
    if kind == "isolated":
        parts = [f"slow node{'s' * (len(event['slow']) > 1)} {', '.join(event['slow'])}" if event["slow"] else "",
                 f"slow link{'s' * (len(event['links']) > 1)} " + ", ".join(f"{a} <-> {b}" for a, b in event["links"])
                 if event["links"] else "",
                 f"undecided {', '.join(event['undecided'])}" if event["undecided"] else ""]
        found = "; ".join(p for p in parts if p) or "no slow node"
        return f"pair rounds done after {event['rounds']}: {found}"
    if kind == "budget":
        return f"{event['stage']} stopped early: {event['reason']}"
    if kind == "stalled":
        return stalled_text(event)
    return None


def print_progress(stream=sys.stderr) -> Callable[[str, Dict], None]:
    """Progress on stderr: one rewritten line on a terminal, else a line per size and per round."""
    terminal = stream.isatty()

    def show(node: str, event: Dict) -> None:
        text = progress_text(event)
        if text is None:
            return
        if terminal and event.get("event") in ("start", "row", "round"):
            stream.write(f"\r\033[K[bench] {text}")
        else:
            stream.write(("\r\033[K" if terminal else "") + f"[bench] {text}\n")
        stream.flush()
    return show
