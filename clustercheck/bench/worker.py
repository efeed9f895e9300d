"""clustercheck bench worker: collective sweeps and pairwise exchanges with torch.distributed.

Shipped to every node and started there by torchrun (python -m torch.distributed.run),
one process per GPU (NCCL) or per slot (Gloo on CPUs). Needs torch and nothing else.
Every rank prints JSON lines on stdout; the tool reads them, computes bandwidths and
judges. Timing follows nccl-tests: warmup at each size, a barrier, then `iters`
back-to-back operations timed as a whole, the time per operation averaged over ranks.

    torchrun --nnodes N --nproc-per-node K --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        worker.py '{"mode": "sweep", "collectives": ["all_reduce"], "min_bytes": 1024, ...}'
"""

import ctypes
import datetime
import json
import os
import signal
import socket
import sys
import time

import torch
import torch.distributed as dist

DTYPES = {"float": torch.float32, "double": torch.float64, "half": torch.float16, "bfloat16": torch.bfloat16,
          "int32": torch.int32, "int64": torch.int64}
OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
# Elements of the whole array per rank buffer: the collectives whose size S is the whole array split n ways.
SPLIT = {"all_gather", "reduce_scatter", "alltoall"}


def emit(doc):
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def die_with_parent():
    """If torchrun dies (killed by the tool's guard), this rank dies too: nothing is left behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Harness:
    def __init__(self, config):
        self.config = config
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.cuda = config["backend"] == "nccl"
        self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if self.cuda else torch.device("cpu")
        self.dtype = DTYPES[config.get("dtype", "float")]
        self.op_name = config.get("op", "sum")

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def values(self, rank, count, offset=0):
        """Small integers, different per rank and element, exact in every dtype for a few ranks."""
        index = torch.arange(offset, offset + count, device=self.device, dtype=torch.int64)
        return ((index + rank) % 3 + 1).to(self.dtype)

    # ---- one collective: buffers, the operation, and what every rank should hold after it --------
    def setup(self, name, count, in_place):
        """(run, expected, output) for `count` elements of the whole array; run() does one operation."""
        n, r, dev = self.world, self.rank, self.device
        op = OPS[self.op_name]
        if name in SPLIT:
            chunk = count // n
            if name == "all_gather":
                out = torch.zeros(chunk * n, dtype=self.dtype, device=dev)
                inp = out[r * chunk:(r + 1) * chunk] if in_place else torch.empty(chunk, dtype=self.dtype, device=dev)
                inp.copy_(self.values(r, chunk))
                expected = torch.cat([self.values(q, chunk) for q in range(n)])
                return (lambda: dist.all_gather_into_tensor(out, inp)), expected, out
            if name == "reduce_scatter":
                inp = self.values(r, chunk * n)
                out = inp[r * chunk:(r + 1) * chunk] if in_place else torch.empty(chunk, dtype=self.dtype, device=dev)
                expected = self.reduced([self.values(q, chunk, r * chunk) for q in range(n)])
                return (lambda: dist.reduce_scatter_tensor(out, inp, op=op)), expected, out
            inp = self.values(r, chunk * n)
            out = torch.empty(chunk * n, dtype=self.dtype, device=dev)
            expected = torch.cat([self.values(q, chunk, r * chunk) for q in range(n)])
            return (lambda: dist.all_to_all_single(out, inp)), expected, out
        buf = self.values(r, count)
        if name == "all_reduce":
            return (lambda: dist.all_reduce(buf, op=op)), self.reduced([self.values(q, count) for q in range(n)]), buf
        if name == "broadcast":
            return (lambda: dist.broadcast(buf, 0)), self.values(0, count), buf
        if name == "reduce":
            expected = self.reduced([self.values(q, count) for q in range(n)]) if r == 0 else None
            return (lambda: dist.reduce(buf, 0, op=op)), expected, buf
        if name == "sendrecv":
            out = torch.zeros(count, dtype=self.dtype, device=dev)

            def exchange():
                ops = [dist.P2POp(dist.isend, buf, (r + 1) % n), dist.P2POp(dist.irecv, out, (r - 1) % n)]
                for request in dist.batch_isend_irecv(ops):
                    request.wait()
            return exchange, self.values((r - 1) % n, count), out
        raise ValueError("unknown collective %r" % name)

    def reduced(self, parts):
        stacked = torch.stack(parts)
        if self.op_name == "sum":
            return stacked.sum(0).to(self.dtype)
        if self.op_name == "prod":
            return stacked.prod(0).to(self.dtype)
        return stacked.max(0).values if self.op_name == "max" else stacked.min(0).values

    def timed(self, run, iters, warmup):
        for _ in range(warmup):
            run()
        self.sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            run()
        self.sync()
        elapsed = (time.perf_counter() - start) / iters
        total = torch.tensor([elapsed], dtype=torch.float64, device=self.device)
        dist.all_reduce(total)  # nccl-tests reports the time averaged over ranks
        return total.item() / self.world

    def wrong(self, name, count, in_place):
        """Elements that differ from the expected result, summed over ranks (the #wrong column)."""
        run, expected, out = self.setup(name, count, in_place)
        run()
        self.sync()
        bad = 0 if expected is None else int((out != expected).sum().item())
        total = torch.tensor([bad], dtype=torch.int64, device=self.device)
        dist.all_reduce(total)
        return int(total.item())

    def measure(self, name, count, in_place):
        run, _, _ = self.setup(name, count, in_place)
        seconds = self.timed(run, self.config["iters"], self.config["warmup"])
        wrong = self.wrong(name, count, in_place) if self.config.get("check", True) else None
        return {"time_us": seconds * 1e6, "wrong": wrong}


def sweep(harness, config):
    size = config["min_bytes"]
    element = torch.tensor([], dtype=harness.dtype).element_size()
    while size <= config["max_bytes"]:
        for name in config["collectives"]:
            count = size // element
            if name in SPLIT:
                count -= count % harness.world
            if count == 0:
                continue
            row = {"event": "row", "collective": name, "size": count * element, "count": count,
                   "type": config.get("dtype", "float"),
                   "redop": config.get("op", "sum") if name in ("all_reduce", "reduce", "reduce_scatter") else "none",
                   "root": 0 if name in ("broadcast", "reduce") else -1, "nranks": harness.world}
            for placement in config["placements"][name]:
                row[placement] = harness.measure(name, count, placement == "in_place")
            if harness.rank == 0:
                emit(row)
        size = size * config["step_factor"] if config["step_factor"] > 1 else size + config["step_bytes"]


def exchange_pair(harness, peer, count, iters, warmup):
    send = harness.values(harness.rank, count)
    recv = torch.empty_like(send)

    def run():
        ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
    for _ in range(warmup):
        run()
    harness.sync()
    start = time.perf_counter()
    for _ in range(iters):
        run()
    harness.sync()
    return (time.perf_counter() - start) / iters


def pairwise(harness, config, leaders):
    """Rounds of disjoint node pairs exchanging `pair_bytes` both ways at once; then the slowest
    nodes again, each with known-fast partners, to tell a slow node from a slow link."""
    element = torch.tensor([], dtype=harness.dtype).element_size()
    count = max(1, config["pair_bytes"] // element)
    results = []

    def run_rounds(rounds, phase):
        for index, pairs in enumerate(rounds):
            mine = next((pair for pair in pairs if leaders.get(pair[0]) == harness.rank
                         or leaders.get(pair[1]) == harness.rank), None)
            if mine is not None:
                peer_node = mine[1] if leaders[mine[0]] == harness.rank else mine[0]
                seconds = exchange_pair(harness, leaders[peer_node], count, config["iters"], config["warmup"])
                if leaders[mine[0]] == harness.rank:  # one of the two reports
                    record = {"event": "pair", "phase": phase, "round": index, "a": mine[0], "b": mine[1],
                              "bytes": count * element, "time_us": seconds * 1e6}
                    emit(record)
                    results.append(record)
            dist.barrier()

    run_rounds(config["rounds"], "matrix")
    gathered = [None] * harness.world
    dist.all_gather_object(gathered, results)
    measured = [r for part in gathered for r in part]
    schedule = [confirmation_rounds(measured, sorted(leaders))] if harness.rank == 0 else [None]
    dist.broadcast_object_list(schedule, 0)
    if schedule[0]:
        run_rounds(schedule[0], "confirm")


def confirmation_rounds(measured, nodes):
    """Pair each suspect (a node in the slowest pairs) with the two fastest other nodes."""
    if len(nodes) < 3 or not measured:
        return []
    per_node = {n: [] for n in nodes}
    for record in measured:
        speed = record["bytes"] / record["time_us"]
        per_node[record["a"]].append(speed)
        per_node[record["b"]].append(speed)
    speeds = sorted(r["bytes"] / r["time_us"] for r in measured)
    slowest = sorted(measured, key=lambda r: r["bytes"] / r["time_us"])[0]
    if speeds[0] > 0.7 * speeds[-1]:   # nothing stands out
        return []
    suspects = [slowest["a"], slowest["b"]]
    good = [n for n in sorted(nodes, key=lambda n: -sorted(per_node[n])[len(per_node[n]) // 2])
            if n not in suspects][:2]
    if len(good) == 2:
        return [[(suspects[0], good[0]), (suspects[1], good[1])], [(suspects[0], good[1]), (suspects[1], good[0])]]
    return [[(suspects[0], good[0])], [(suspects[1], good[0])]]


def main():
    die_with_parent()
    config = json.loads(sys.argv[1])
    if config.get("backend") in (None, "auto"):
        config["backend"] = "nccl" if torch.cuda.is_available() else "gloo"
    if config["backend"] == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(config["backend"], timeout=datetime.timedelta(seconds=config.get("op_timeout", 60)))
    harness = Harness(config)
    me = {"node": os.environ.get("CLUSTERCHECK_NODE") or socket.gethostname(),
          "local_rank": int(os.environ.get("LOCAL_RANK", "0")), "pid": os.getpid()}
    everyone = [None] * harness.world
    dist.all_gather_object(everyone, me)
    if harness.rank == 0:
        nccl = None
        if config["backend"] == "nccl":
            version = torch.cuda.nccl.version()
            nccl = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
        emit({"event": "start", "world": harness.world, "ranks": everyone, "backend": config["backend"],
              "torch": torch.__version__, "nccl": nccl, "nccl_algo": os.environ.get("NCCL_ALGO"),
              "device": torch.cuda.get_device_name(harness.device) if harness.cuda else "cpu"})
    # A tiny all_reduce first: a dead or stuck rank shows here, not in the middle of the sweep.
    probe = torch.ones(1, device=harness.device)
    dist.all_reduce(probe)
    harness.sync()
    if config["mode"] == "pairwise":
        leaders = {e["node"]: rank for rank, e in enumerate(everyone) if e["local_rank"] == 0}
        pairwise(harness, config, leaders)
    else:
        sweep(harness, config)
    dist.barrier()
    if harness.rank == 0:
        emit({"event": "done"})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
