"""Launch the bench worker with torchrun on every node and collect what every rank reports.

1. The env probe on every node: its GPUs (for --nproc-per-node and the backend), its
   training interface (for GLOO/NCCL_SOCKET_IFNAME), that torch is there.
2. The worker is shipped into each node's run directory and started with torchrun on
   all nodes at once (clustercheck.launch), every stage under a deadline.
No judging here: stages come back with their events, exit codes and the tail of stderr.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from clustercheck.bench.table import COLLECTIVES
from clustercheck.env.gather import Probed, probe_cluster
from clustercheck.fanout import Cluster
from clustercheck.inventory import Node
from clustercheck.launch import Launch, Stage, choose_backend, ranks_per_node, readiness_problems, run_torchrun, ship
from clustercheck.net.gather import round_robin

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
GLOO_DEFAULTS = dict(min_bytes=1024, max_bytes=64 * 2 ** 20, step_factor=4, iters=5, warmup=2)
NCCL_DEFAULTS = dict(min_bytes=8, max_bytes=2 ** 30, step_factor=2, iters=20, warmup=5)


@dataclass
class BenchOptions:
    collectives: Sequence[str] = ("all_reduce",)
    min_bytes: Optional[int] = None     # None: the backend's default (GLOO_DEFAULTS / NCCL_DEFAULTS)
    max_bytes: Optional[int] = None
    step_factor: Optional[int] = None
    iters: Optional[int] = None
    warmup: Optional[int] = None
    dtype: str = "float"
    op: str = "sum"
    check: bool = True
    backend: str = "auto"
    nproc_per_node: Optional[int] = None
    ring: bool = False
    rdzv_port: int = 29400
    timeout_s: float = 600.0            # a whole stage (launch, rendezvous, sweep)
    op_timeout_s: float = 60.0          # one collective, inside torch.distributed
    pairwise: bool = False
    pair_bytes: int = 16 * 2 ** 20


@dataclass
class BenchFacts:
    nodes: List[Node]
    probed: List[Probed]
    backend: str = "gloo"
    nproc: Dict[str, int] = field(default_factory=dict)
    stages: List[Stage] = field(default_factory=list)
    problems: Dict[str, str] = field(default_factory=dict)   # node -> why it could not take part


def worker_config(options: BenchOptions, backend: str, mode: str, rounds=None) -> Dict:
    defaults = NCCL_DEFAULTS if backend == "nccl" else GLOO_DEFAULTS
    config = {"mode": mode, "backend": backend, "dtype": options.dtype, "op": options.op, "check": options.check,
              "op_timeout": options.op_timeout_s, "collectives": list(options.collectives),
              "placements": {c: list(COLLECTIVES[c].placements) for c in options.collectives}}
    for key in ("min_bytes", "max_bytes", "step_factor", "iters", "warmup"):
        value = getattr(options, key)
        config[key] = defaults[key] if value is None else value
    config["step_bytes"] = config["min_bytes"]
    if mode == "pairwise":
        config.update(rounds=rounds, pair_bytes=options.pair_bytes)
    return config


def gather_bench(cluster: Cluster, nodes: Sequence[Node], options: BenchOptions, probe_timeout_s: float = 60.0,
                 progress: Optional[Callable[[str, Dict], None]] = None,
                 probed: Optional[List[Probed]] = None) -> BenchFacts:
    """probed: the env probe's results when the caller has them already (preflight)."""
    probed = probed if probed is not None else probe_cluster(cluster, nodes, probe_timeout_s)
    facts = BenchFacts(list(nodes), probed)
    facts.problems = readiness_problems(probed)
    if facts.problems:
        return facts
    facts.backend = choose_backend(probed, options.backend)
    facts.nproc = ranks_per_node(probed, options.nproc_per_node, facts.backend == "nccl")
    with open(WORKER, "rb") as handle:
        placed = ship(cluster, nodes, {"clustercheck_bench_worker.py": handle.read()}, facts.problems)
    if facts.problems:
        return facts
    paths = {name: files["clustercheck_bench_worker.py"] for name, files in placed.items()}

    def launch(name: str, config: Dict) -> Stage:
        env = {"NCCL_ALGO": "Ring"} if options.ring else {}  # on 2 nodes NCCL may pick tree: above the fabric
        return run_torchrun(cluster, nodes, probed, Launch(
            name, paths, [json.dumps(config, separators=(",", ":"))], facts.nproc, options.rdzv_port,
            options.timeout_s, env, config), progress)

    if options.collectives:
        facts.stages.append(launch("sweep", worker_config(options, facts.backend, "sweep")))
    if options.pairwise and len(nodes) > 1 and all(r.exit_code == 0 for s in facts.stages for r in s.runs.values()):
        rounds = round_robin([n.name for n in nodes])
        facts.stages.append(launch("pairwise", worker_config(options, facts.backend, "pairwise", rounds)))
    return facts


def print_progress(stream=sys.stderr) -> Callable[[str, Dict], None]:
    """A one-line progress display for a terminal (nothing when stderr is not one)."""
    if not stream.isatty():
        return lambda node, event: None

    def show(node: str, event: Dict) -> None:
        if event.get("event") == "row":
            text = f"{event['collective']} {event['size']} B"
        elif event.get("event") == "pair":
            text = f"pair {event['a']} <-> {event['b']} ({event['phase']})"
        elif event.get("event") == "start":
            text = f"{event['world']} ranks up ({event['backend']})"
        else:
            return
        stream.write(f"\r\033[K[bench] {text}")
        stream.flush()
    return show
