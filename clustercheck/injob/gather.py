"""What each rank gathers on its own node, with the probes the stages ship (the same documents, not new ones):

- the env probe's document (onnode/env_probe.py), on local rank 0: every package, the drivers, the training
  variables of this very process;
- the device probe's short measurement (onnode/device_probe.py): on a GPU, each rank its own GPU; on CPU, the
  node's cores, on local rank 0;
- the bench worker's pair rounds and all_reduce sweep (onnode/bench_worker.py), on every rank, over the job's
  process group and backend, at a few sizes within the check's budget;
- when a checkpoint directory is given, the storage probe (onnode/storage_probe.py) on local rank 0, run as the
  stage runs it (its own process: it forks a writer per rank slot, which a process holding torch's threads must
  not): the coherence round (the first node writes, the others look), then every rank slot at one moment.
No judging here. Each probe keeps its promise of never raising; what the bench could not finish is said.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Tuple

import torch

from clustercheck.injob.rendezvous import Deadline, Joined
from clustercheck.node.gather import parse_document
from clustercheck.onnode import bench_worker, device_probe, env_probe, inline_command, rank_faults
from clustercheck.stages.bench.gather import worker_config
from clustercheck.stages.bench.options import BenchOptions

# Shares of the check's budget (the rest is the rendezvous, the gathering and the verdict).
DEVICE_SHARE = 0.12
BENCH_SHARE = 0.2
SIZE_SHARE = 0.04
STORAGE_SHARE = 0.05     # each storage phase (write, read) and the coherence window
# A few sizes on each backend: Gloo over TCP saturates well below NCCL's sizes.
SIZES = {"gloo": (64 * 2 ** 10, 4 * 2 ** 20, 4 * 2 ** 20), "nccl": (2 ** 20, 256 * 2 ** 20, 64 * 2 ** 20)}


def device_seconds(deadline: Deadline) -> float:
    return max(1.0, DEVICE_SHARE * deadline.budget_s)


def cpu_document(seconds: float) -> Dict:
    """The device probe on this node's cores; torch's thread count (the probe measures one thread) restored."""
    threads = torch.get_num_threads()
    try:
        return device_probe.probe(["--seconds", f"{seconds:g}"])
    finally:
        torch.set_num_threads(threads)


def gpu_document(index: int, seconds: float) -> Dict:
    """The device probe's measurement of this rank's own GPU: one GPU's entry, as the probe writes it. The probe
    pins its thread to the GPU's NUMA node: this thread is the training's, so its CPUs are given back after."""
    cpus = os.sched_getaffinity(0)
    try:
        return _one_gpu(index, seconds)
    finally:
        os.sched_setaffinity(0, cpus)
        torch.cuda.empty_cache()


def _one_gpu(index: int, seconds: float) -> Dict:
    args = device_probe.parse_args(["--seconds", f"{seconds:g}"])
    count = torch.cuda.device_count()
    missing_fp8 = device_probe.fp8_missing(torch, count)
    dtypes = device_probe.GPU_DTYPES + (() if missing_fp8 else ("fp8",))
    share = seconds / (len(dtypes) + 4)
    entry = device_probe.measure_gpu(torch, index, args, share, threading.Barrier(1), dtypes)
    entry["pci_bus_id"] = device_probe.pci_address(torch, index)
    if missing_fp8:
        entry.setdefault("not_measured", {})["fp8"] = missing_fp8
    return {"schema": 1, "torch": torch.__version__, "kind": "cuda", "cuda": torch.version.cuda,
            "driver_gpus": device_probe.nvidia_gpus(), "devices": [entry], "peers_bytes_s": []}


def device_document(joined: Joined, leader: bool, deadline: Deadline) -> Optional[Dict]:
    rank_faults.kill_if_due("device")
    seconds = device_seconds(deadline)
    if joined.backend == "nccl":
        return gpu_document(joined.device.index or 0, seconds)
    return cpu_document(seconds) if leader else None


def env_document(peers: List[str], salt: str) -> Dict:
    return env_probe.probe(["--salt", salt] + (["--peers", ",".join(peers)] if peers else []))


def bench_options(backend: str, deadline: Deadline) -> BenchOptions:
    low, high, pair = SIZES[backend]
    return BenchOptions(min_bytes=low, max_bytes=high, step_factor=4, iters=10, warmup=2, pair_bytes=pair,
                        size_budget_s=max(0.2, SIZE_SHARE * deadline.budget_s),
                        stage_budget_s=max(1.0, BENCH_SHARE * deadline.budget_s))


def bench_events(joined: Joined, nodes: List[str], leaders: Dict[str, int], deadline: Deadline) -> Dict:
    """This rank's events of the pair rounds and the sweep (the worker's own measure, over the job's process
    group and device), or the error that stopped them."""
    rank_faults.kill_if_due("bench")
    config = worker_config(bench_options(joined.backend, deadline), joined.backend, nodes)
    events: List[Dict] = []
    try:
        bench_worker.measure(bench_worker.Harness(config, joined.device, events.append), config, leaders)
        return {"events": events, "config": config, "error": ""}
    except Exception as exc:     # a rank that died, or a collective that timed out: said, judged as a failed run
        return {"events": events, "config": config, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:400]}


def storage_plan(deadline: Deadline, first_host: str) -> Dict:
    """Rank 0's plan for the storage rounds: one token, one moment for each round, the node that writes."""
    seconds = max(1.0, STORAGE_SHARE * deadline.budget_s)
    coherence_at = time.time() + 2.0
    return {"token": os.urandom(6).hex(), "seconds": seconds, "window": seconds, "writer": first_host,
            "coherence_at": coherence_at, "measure_at": coherence_at + seconds + 3.0}


def _storage_probe(argv: List[str], timeout_s: float) -> Tuple[Optional[Dict], str]:
    command = inline_command(sys.executable, "storage_probe", argv)
    try:
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        return None, f"the storage probe did not finish within {timeout_s:.0f} s"
    return parse_document(done.stdout)


def storage_documents(joined: Joined, host: str, slots: int, first_rank: int, world: int, directory: str,
                      plan: Dict, deadline: Deadline) -> Dict:
    """This node's coherence and measuring documents (or why there are none), on its first rank."""
    rank_faults.kill_if_due("storage")
    role = "write" if host == plan["writer"] else "look"
    coherence_args = ["--dir", directory, "--coherence", role, "--token", plan["token"], "--start-at",
                      f"{plan['coherence_at']:.3f}", "--window", f"{plan['window']:g}"]
    coherence, coherence_problem = _storage_probe(coherence_args, deadline.left(1.0))
    joined.post(f"storage-looked/{host}", 1)
    measure_args = ["--dir", directory, "--slots", str(slots), "--seconds", f"{plan['seconds']:g}", "--start-at",
                    f"{plan['measure_at']:.3f}", "--token", plan["token"], "--world", str(world), "--rank0",
                    str(first_rank), "--size", str(64 << 20)]
    measured, problem = _storage_probe(measure_args, deadline.left(1.0))
    return {"coherence": coherence, "coherence_problem": coherence_problem, "measured": measured,
            "problem": problem, "directory": directory, "window": plan["window"]}


def remove_coherence_file(joined: Joined, hosts: List[str], directory: str, plan: Dict, deadline: Deadline) -> None:
    """The writer's file goes once every node has looked (or the deadline came)."""
    joined.wait_for([f"storage-looked/{h}" for h in hosts], Deadline(min(deadline.left(0), 3 * plan["window"])))
    _storage_probe(["--dir", directory, "--coherence", "remove", "--token", plan["token"]], 30.0)
