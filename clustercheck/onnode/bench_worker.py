"""clustercheck bench worker: pair rounds that find a slow node, then collective sweeps, with torch.distributed.

Shipped to every node (with clustercheck_rounds.py beside it) and started there by torchrun
(python -m torch.distributed.run), one process per GPU (NCCL) or per slot (Gloo on CPUs).
Needs torch and nothing else. Every rank prints JSON lines on stdout; the tool reads them,
computes bandwidths and judges. Timing follows nccl-tests (warmup, a barrier, back-to-back
operations timed as a whole, the time averaged over ranks), within a time budget: the first
operation of each size is checked and timed, and only the warmups and iterations that fit
in the size budget follow; the sweep stops climbing sizes when the stage budget is spent.

    torchrun --nnodes N --nproc-per-node K --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        worker.py '{"pairwise": "adaptive", "collectives": ["all_reduce"], "min_bytes": 1024, ...}'
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
try:  # imported as part of the clustercheck package (the check inside a job, clustercheck.injob)
    from .rounds import Isolation, cpu_wait, exchange_gbps, round_robin
except ImportError:  # shipped to a node: clustercheck_rounds.py beside this file
    from clustercheck_rounds import Isolation, cpu_wait, exchange_gbps, round_robin

try:   # the hang hook and the sandbox's rank faults, shipped beside this file
    import clustercheck_hang as hang
    import clustercheck_rank_faults as rank_faults
except ImportError:   # run by hand without them
    hang = rank_faults = None

DTYPES = {"float": torch.float32, "double": torch.float64, "half": torch.float16, "bfloat16": torch.bfloat16,
          "int32": torch.int32, "int64": torch.int64}
OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
SPLIT = {"all_gather", "reduce_scatter", "alltoall"}   # the whole array per buffer, split n ways (S the whole)
SETTLE_S = 0.2   # Gloo's last collective settles before the group goes (reference_train/train.py's leave_group)


def emit(doc):
    """An event as a JSON line on stdout, where the tool reads it (the check inside the job passes its own)."""
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def die_with_parent():
    """If torchrun dies (killed by the tool's guard), this rank dies too: nothing is left behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Harness:
    """One rank's collectives over the process group; its events go to `emit` (stdout, or the job's list)."""

    def __init__(self, config, device=None, emit=emit):
        self.config = config
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.cuda = config["backend"] == "nccl"
        self.device = device or (torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if self.cuda
                                 else torch.device("cpu"))
        self.emit = emit
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

    def agreed(self, *values):
        """The mean over ranks of each value: the same numbers on every rank, for decisions all must share."""
        total = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(total)
        return [v / self.world for v in total.tolist()]

    def measure(self, name, count, in_place, budget):
        """One size: a first operation (checked, and timed to plan the rest), then warmups and timed
        iterations that fit in `budget` seconds, at most the configured counts. When the first
        operation took half the budget or more, it is the measurement (iters 1)."""
        run, expected, out = self.setup(name, count, in_place)
        self.sync()
        dist.barrier()
        start = time.perf_counter()
        run()
        self.sync()
        once = time.perf_counter() - start
        bad = 0 if expected is None else int((out != expected).sum().item())
        once, bad = self.agreed(once, bad)
        wrong = int(round(bad * self.world)) if self.config.get("check", True) else None
        if once >= budget / 2:
            return {"time_us": once * 1e6, "wrong": wrong, "iters": 1}, once
        warmup = min(max(self.config["warmup"] - 1, 0), int(0.25 * budget / once))
        iters = max(1, min(self.config["iters"], int((budget - once * (1 + warmup)) / once)))
        for _ in range(warmup):
            run()
        self.sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            run()
        self.sync()
        [elapsed] = self.agreed((time.perf_counter() - start) / iters)  # nccl-tests: the mean over ranks
        return {"time_us": elapsed * 1e6, "wrong": wrong, "iters": iters}, once


def sweep(harness, config):
    """Sizes from min_bytes up, each within the size budget; stops climbing when the next size
    would not fit in what is left of the stage budget, or one operation already took the size budget."""
    size = config["min_bytes"]
    element = torch.tensor([], dtype=harness.dtype).element_size()
    started = time.monotonic()
    while size <= config["max_bytes"]:
        slowest = 0.0
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
                row[placement], once = harness.measure(name, count, placement == "in_place", config["size_budget"])
                slowest = max(slowest, once)
            if harness.rank == 0:
                harness.emit(row)
            if hang:
                hang.step(size)
                rank_faults.freeze_if_due(size)
        following = size * config["step_factor"] if config["step_factor"] > 1 else size + config["step_bytes"]
        [spent] = harness.agreed(time.monotonic() - started)
        reason = None
        if slowest >= config["size_budget"]:
            reason = "one operation at %d B took %.1f s, the budget for a size is %g s" % (
                size, slowest, config["size_budget"])
        elif spent + slowest * (following / size) > config["stage_budget"]:
            reason = "%.0f of the sweep's %g s spent; the next size would take about %.0f s more" % (
                spent, config["stage_budget"], slowest * (following / size))
        if reason and following <= config["max_bytes"]:
            if harness.rank == 0:
                harness.emit({"event": "budget", "stage": "sweep", "last_bytes": size, "skipped_from": following,
                      "reason": reason})
            break
        size = following


def runqueue_wait_s():
    """Seconds this process's threads have spent waiting for a CPU (the kernel's schedstat), None where the kernel
    does not keep it. A thread that ended meanwhile is left out."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for task in tasks:
        try:
            with open("/proc/self/task/%s/schedstat" % task) as handle:
                total += int(handle.read().split()[1])
        except FileNotFoundError:
            continue
        except (OSError, ValueError, IndexError):
            return None
    return total / 1e9


def exchange_pair(harness, peer, count, budget, max_iters=1000):
    """Both ways at once with the peer: one exchange, then as many as take a quarter of the budget
    (a fast pair is timed over a stretch long enough that a busy host's scheduling does not make
    it look slow); both sides agree on how many: the slower side's first exchange decides.
    Seconds per exchange, iterations, and the share of its time this side's and the peer's threads waited for a CPU."""
    send = harness.values(harness.rank, count)
    recv = torch.empty_like(send)

    def run(mine, theirs):
        ops = [dist.P2POp(dist.isend, mine, peer), dist.P2POp(dist.irecv, theirs, peer)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()

    def swapped(value):
        mine = torch.tensor([value], dtype=torch.float64, device=harness.device)
        theirs = torch.empty_like(mine)
        run(mine, theirs)
        harness.sync()
        return theirs.item()
    waited = runqueue_wait_s()
    start = time.perf_counter()
    run(send, recv)
    harness.sync()
    once = time.perf_counter() - start
    once = max(once, swapped(once))
    iters = 0 if once >= budget / 2 else max(1, min(max_iters, int(budget / 4 / once)))
    if iters:
        waited, start = runqueue_wait_s(), time.perf_counter()
        for _ in range(iters):
            run(send, recv)
        harness.sync()
    elapsed = time.perf_counter() - start
    after = runqueue_wait_s()
    share = (after - waited) / elapsed if waited is not None and after is not None and elapsed > 0 else 0.0
    return elapsed / max(iters, 1), max(iters, 1), (share, swapped(share))


def pair_rounds(harness, config, leaders):
    """Rounds of disjoint node pairs exchanging `pair_bytes` both ways at once, planned on rank 0:
    the adaptive search (clustercheck_rounds.Isolation) or every pair (the round robin), then the
    slowest nodes of the round robin again with known-fast partners. Stops at the stage budget."""
    element = torch.tensor([], dtype=harness.dtype).element_size()
    count = max(1, config["pair_bytes"] // element)
    nodes = [n for n in config["nodes"] if n in leaders]
    full = config["pairwise"] == "full"
    search = None if full else Isolation(nodes, config.get("max_rounds"))
    schedule = [[(a, b, "matrix") for a, b in pairs] for pairs in round_robin(nodes)] if full else []
    confirming = False      # full: the confirmation rounds were added after the round robin
    started = time.monotonic()
    index = 0
    measured = []
    while True:
        plan = [None]
        if harness.rank == 0:
            if full:
                if index == len(schedule) and not confirming:
                    confirming = True
                    schedule += [[(a, b, "confirm") for a, b in pairs]
                                 for pairs in confirmation_rounds(measured, nodes)]
                plan = [schedule[index] if index < len(schedule) else []]
            else:
                plan = [search.plan()]
            if plan[0] and index and time.monotonic() - started > config["stage_budget"]:
                harness.emit({"event": "budget", "stage": "pairs", "rounds": index,
                      "reason": "%.0f s spent, the budget for the pair rounds is %g s" % (
                          time.monotonic() - started, config["stage_budget"])})
                plan = [[]]
                if search:
                    search.close()
        dist.broadcast_object_list(plan, 0)
        if not plan[0]:
            break
        round_started = time.monotonic()
        results = []
        mine = next((p for p in plan[0] if harness.rank in (leaders[p[0]], leaders[p[1]])), None)
        if mine is not None:
            a, b, phase = mine
            peer = leaders[b] if leaders[a] == harness.rank else leaders[a]
            seconds, iters, (mine_wait, peer_wait) = exchange_pair(harness, peer, count, config["size_budget"])
            if leaders[a] == harness.rank:  # one of the two reports
                record = {"event": "pair", "phase": phase, "round": index, "a": a, "b": b, "bytes": count * element,
                          "time_us": seconds * 1e6, "iters": iters,
                          "cpu_wait": {a: round(mine_wait, 3), b: round(peer_wait, 3)}}
                harness.emit(record)
                results.append(record)
        gathered = [None] * harness.world
        dist.all_gather_object(gathered, results)
        if harness.rank == 0:
            done = [r for part in gathered for r in part]
            measured += done
            speeds = {(r["a"], r["b"]): exchange_gbps(r) for r in done}
            if search:
                search.record(speeds, {(r["a"], r["b"]): cpu_wait(r) for r in done})
            harness.emit({"event": "round", "phase": plan[0][0][2], "round": index, "pairs": len(plan[0]),
                  "seconds": time.monotonic() - round_started,
                  "slowest": min(([a, b, s] for (a, b), s in speeds.items()), key=lambda x: x[2], default=None),
                  "reference": search.reference if search else None})
        index += 1
    if harness.rank == 0 and search:
        harness.emit({"event": "isolated", "slow": search.slow_nodes(), "links": [list(p) for p in search.links],
              "undecided": search.undecided(), "rounds": search.rounds})


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


def measure(harness, config, leaders):
    """What every rank measures, the tool's launch and the check inside the job alike: a tiny all_reduce
    first (a dead or stuck rank shows here, not in the middle of the sweep), the pair rounds between the
    nodes' leaders (`leaders`: node -> its first rank), the sweep, and a barrier. Events go to harness.emit."""
    probe = torch.ones(1, device=harness.device)
    dist.all_reduce(probe)
    harness.sync()
    if hang:
        hang.phase("pair rounds" if config.get("pairwise") else "sweep")
    if config.get("pairwise"):
        pair_rounds(harness, config, leaders)
    if config["collectives"]:
        sweep(harness, config)
    dist.barrier()


def main():
    die_with_parent()
    if hang:
        hang.install()
        hang.phase("joining the process group")
    config = json.loads(sys.argv[1])
    if config.get("backend") in (None, "auto"):
        config["backend"] = "nccl" if torch.cuda.is_available() else "gloo"
    if config["backend"] == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(config["backend"], timeout=datetime.timedelta(seconds=config.get("op_timeout", 60)))
    if rank_faults:
        rank_faults.write_nccl_log()
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
    measure(harness, config, {e["node"]: rank for rank, e in enumerate(everyone) if e["local_rank"] == 0})
    if harness.rank == 0:
        emit({"event": "done"})
    time.sleep(SETTLE_S)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
