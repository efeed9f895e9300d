"""Launch the bench worker with torchrun on every node and collect what every rank reports.

1. The env probe on every node: its GPUs (for --nproc-per-node and the backend), its
   training interface (for GLOO/NCCL_SOCKET_IFNAME), that torch is there.
2. The worker is shipped into each node's run directory and torchrun started there, all
   nodes at once, c10d rendezvous at the first node. Every stage has a deadline; at the
   deadline, or on Ctrl-C, the channels close and the guards kill torchrun, whose workers
   die with it (PR_SET_PDEATHSIG).
No judging here: stages come back with their events, exit codes and the tail of stderr.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from clustercheck.bench.table import COLLECTIVES
from clustercheck.env.facts import get, gpu_count, training_interface
from clustercheck.env.gather import Probed, interpreter, probe_cluster
from clustercheck.fanout import Cluster
from clustercheck.inventory import Node
from clustercheck.net.gather import round_robin
from clustercheck.transport.base import Running, TransportError

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
class NodeRun:
    """One node's torchrun: its events, how it ended, and its stderr's tail."""

    node: str
    events: List[Dict] = field(default_factory=list)
    exit_code: Optional[int] = None     # None: still running at the deadline (killed then)
    lost: bool = False                  # the connection to the node dropped
    error: str = ""                     # could not start, or the stderr tail
    ended_s: Optional[float] = None     # seconds after launch


@dataclass
class Stage:
    name: str                           # "sweep" or "pairwise"
    runs: Dict[str, NodeRun]
    wall_s: float
    config: Dict

    def events(self, kind: str) -> List[Dict]:
        return [e for run in self.runs.values() for e in run.events if e.get("event") == kind]

    @property
    def start(self) -> Optional[Dict]:
        found = self.events("start")
        return found[0] if found else None


@dataclass
class BenchFacts:
    nodes: List[Node]
    probed: List[Probed]
    backend: str = "gloo"
    nproc: Dict[str, int] = field(default_factory=dict)
    stages: List[Stage] = field(default_factory=list)
    problems: Dict[str, str] = field(default_factory=dict)   # node -> why it could not take part


def choose_backend(probed: Sequence[Probed], requested: str) -> str:
    if requested != "auto":
        return requested
    cuda = all(gpu_count(p.facts) and get(p.facts, "packages", "torch_build", "cuda") for p in probed
               if p.facts is not None)
    return "nccl" if cuda and any(p.facts for p in probed) else "gloo"


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


def forwarded_env() -> Dict[str, str]:
    """NCCL_* the user set here travel to every node (a node's own settings would be overridden)."""
    return {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}


def torchrun_command(node: Node, worker_path: str, nnodes: int, nproc: int, master: str, options: BenchOptions,
                     ifname: Optional[str], config: Dict, run_id: str) -> str:
    env = {"CLUSTERCHECK_NODE": node.name, "OMP_NUM_THREADS": "1", **forwarded_env()}
    if ifname:
        env.setdefault("GLOO_SOCKET_IFNAME", ifname)
        env.setdefault("NCCL_SOCKET_IFNAME", ifname)
    if options.ring:
        env["NCCL_ALGO"] = "Ring"   # on 2 nodes NCCL may pick tree and read above the fabric's speed
    argv = ["env", *(f"{k}={v}" for k, v in sorted(env.items())), interpreter(node), "-m", "torch.distributed.run",
            f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={master}:{options.rdzv_port}", f"--rdzv-id={run_id}",
            f"--rdzv-conf=join_timeout={int(options.timeout_s)}", "--max-restarts=0", "--monitor-interval=1",
            worker_path, json.dumps(config, separators=(",", ":"))]
    return "cd " + shlex.quote(os.path.dirname(worker_path)) + " && exec " + " ".join(shlex.quote(a) for a in argv)


def run_stage(cluster: Cluster, facts: BenchFacts, name: str, config: Dict, options: BenchOptions,
              worker_paths: Dict[str, str], progress: Optional[Callable[[Dict], None]] = None) -> Stage:
    nodes = [n for n in facts.nodes if n.name in worker_paths]
    run_id = f"clustercheck-{uuid.uuid4().hex[:10]}"
    runs = {n.name: NodeRun(n.name) for n in nodes}
    handles: Dict[str, Running] = {}
    started = time.monotonic()
    deadline = started + options.timeout_s
    ifnames = {p.name: training_interface(p.facts, p.node.ifname)[0] for p in facts.probed if p.facts}

    def launch(node: Node) -> None:
        command = torchrun_command(node, worker_paths[node.name], len(nodes), facts.nproc[node.name],
                                   nodes[0].name, options, ifnames.get(node.name), config, run_id)
        try:
            handles[node.name] = cluster.transports[node.name].start(command)
        except TransportError as exc:
            runs[node.name].error, runs[node.name].lost, runs[node.name].exit_code = exc.detail, True, -1

    def follow(node: Node) -> None:
        run, handle = runs[node.name], handles.get(node.name)
        if handle is None:
            return
        while time.monotonic() < deadline:
            line = handle.readline(min(1.0, max(0.0, deadline - time.monotonic())))
            if line is not None:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    run.events.append(event)
                    if progress:
                        progress(event)
                continue
            code = handle.wait(0.05)
            if code is not None:
                run.exit_code, run.ended_s = code, time.monotonic() - started
                run.lost = code == -1 and hasattr(handle, "transport") and not _connected(handle)
                return

    threads = []
    for node in nodes:
        launch(node)
    for node in nodes:
        thread = threading.Thread(target=follow, args=(node,), daemon=True)
        thread.start()
        threads.append(thread)
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
    finally:
        for node_name, handle in handles.items():
            tail = handle.stop().strip().splitlines()
            if runs[node_name].exit_code != 0:
                runs[node_name].error = runs[node_name].error or _meaningful(tail)
    return Stage(name, runs, time.monotonic() - started, config)


def _connected(handle) -> bool:
    connected = getattr(handle.transport, "connected", None)
    return connected() if connected else True


def _meaningful(lines: List[str]) -> str:
    """The line of stderr that says what went wrong (torchrun buries it in tracebacks)."""
    keep = [line.strip() for line in lines if line.strip() and not line.startswith((" ", "Traceback", "[W", "W1",
                                                                                       "warnings.warn"))]
    for marker in ("Error", "error", "Exception", "failed", "Failed", "Timeout", "timed out"):
        hits = [line for line in keep if marker in line]
        if hits:
            return hits[-1][:400]
    return keep[-1][:400] if keep else ""


def gather_bench(cluster: Cluster, nodes: Sequence[Node], options: BenchOptions, probe_timeout_s: float = 60.0,
                 progress: Optional[Callable[[Dict], None]] = None) -> BenchFacts:
    probed = probe_cluster(cluster, nodes, probe_timeout_s)
    facts = BenchFacts(list(nodes), probed)
    for p in probed:
        if p.facts is None:
            facts.problems[p.name] = p.problem
        elif not get(p.facts, "packages", "versions", "torch"):
            facts.problems[p.name] = f"torch is not installed for {interpreter(p.node)}"
    if facts.problems:
        return facts   # torchrun would wait for every node until its join timeout
    facts.backend = choose_backend(probed, options.backend)
    for p in probed:
        facts.nproc[p.name] = options.nproc_per_node or p.node.slots or (
            gpu_count(p.facts) if facts.backend == "nccl" else 0) or 1
    with open(WORKER, "rb") as handle:
        code = handle.read()
    worker_paths = {}
    for node in nodes:
        try:
            worker_paths[node.name] = cluster.transports[node.name].put(code, "clustercheck_bench_worker.py")
        except TransportError as exc:
            facts.problems[node.name] = exc.detail
    if facts.problems:
        return facts
    sweep_config = worker_config(options, facts.backend, "sweep")
    if options.collectives:
        facts.stages.append(run_stage(cluster, facts, "sweep", sweep_config, options, worker_paths, progress))
    if options.pairwise and len(nodes) > 1 and all(r.exit_code == 0 for s in facts.stages for r in s.runs.values()):
        rounds = round_robin([n.name for n in nodes])
        config = worker_config(options, facts.backend, "pairwise", rounds)
        facts.stages.append(run_stage(cluster, facts, "pairwise", config, options, worker_paths, progress))
    return facts


def print_progress(stream=sys.stderr) -> Callable[[Dict], None]:
    """A one-line progress display for a terminal (nothing when stderr is not one)."""
    if not stream.isatty():
        return lambda event: None

    def show(event: Dict) -> None:
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
