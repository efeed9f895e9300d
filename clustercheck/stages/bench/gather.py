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
import os
from typing import Callable, Dict, List, Optional, Sequence

from clustercheck.core.inventory import Node
from clustercheck.core.progress import current as current_progress
from clustercheck.node.facts import Probed
from clustercheck.node.readiness import choose_backend, ranks_per_node, readiness_problems
from clustercheck.onnode import BENCH_WORKER, bench_files
from clustercheck.onnode.rounds import round_limit
from clustercheck.ranks.runs import Launch, stalled_text
from clustercheck.ranks.torchrun import run_torchrun, ship
from clustercheck.stages.bench.expected import Expected, published
from clustercheck.stages.bench.facts import BenchFacts
from clustercheck.stages.bench.options import BenchOptions, format_size
from clustercheck.outputs.nccl_tests import COLLECTIVES, bandwidths
from clustercheck.transport.fanout import Cluster

# Test-only: capture NCCL's log on Gloo too, where NCCL writes none (the sandbox's ranks write a recorded one,
# onnode/rank_faults.py), so that the capture's plumbing is proven where no GPU is.
CAPTURE_ON_GLOO = "CLUSTERCHECK_TEST_CAPTURE_NCCL"
GLOO_DEFAULTS = dict(min_bytes=1024, max_bytes=64 * 2 ** 20, step_factor=4, iters=20, warmup=5)
NCCL_DEFAULTS = dict(min_bytes=8, max_bytes=2 ** 30, step_factor=2, iters=20, warmup=5)


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
            stall_cap_s=0.8 * options.op_timeout_s,               # before a stuck collective times out
            capture_nccl=facts.backend == "nccl" or bool(os.environ.get(CAPTURE_ON_GLOO)), keep_logs=options.keep_logs),
            progress))
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


def print_progress() -> Callable[[str, Dict], None]:
    """Progress through the run's progress (stderr): on a terminal the sizes and rounds rewrite its live line,
    else a line per size and per round."""
    def show(node: str, event: Dict) -> None:
        text = progress_text(event)
        if text is not None:
            current_progress().say(f"[bench] {text}", live=event.get("event") in ("start", "row", "round"))
    return show
