"""What the watch (`-m clustercheck.injob --watch`, issue 50 §2) costs a training step: the same job with it and
without it, in one run.

    python benchmarks/injob_watch.py                          # 2 ranks on this host, Gloo, 127.0.0.1
    python benchmarks/injob_watch.py --ranks 4 --width 1024 --phases 6 --steps 300

One torchrun job (tests/data/injob/watch_train.py: a few Linear layers under DDP, SGD): 2 x --phases phases of
--steps steps, the watch off and on in turn (clustercheck.injob.watch(every=20), then its stop(): the same hooks and
store posts as --watch), so both see the same process, caches and neighbours. Each phase's median step time
(the slowest rank's), then the median over the phases of each kind and their ratio. Target: at most 1.01 (1%
overhead). A figure, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPT = os.path.join(ROOT, "tests", "data", "injob", "watch_train.py")
LINE = re.compile(r"STEPS rank=(\d+) phase=(\d+) watch=(on|off) median_s=([\d.]+)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--width", type=int, default=512, help="the Linear layers' width (the step's size)")
    parser.add_argument("--steps", type=int, default=60, help="steps in a phase")
    parser.add_argument("--phases", type=int, default=12, help="phases of each kind, alternating")
    parser.add_argument("--reading", action="store_true",
                        help="only what a window's reading of the rank's sockets and CPU wait costs")
    args = parser.parse_args()
    if args.reading:
        reading_s = window_reading_cost()
        print(f"a window's reading (12 TCP sockets open, /proc/self/fd, TCP_INFO each, schedstat of every thread): "
              f"{reading_s * 1e6:.0f} us; {reading_s / (20 * 0.010):.2%} of a window of 20 steps of 10 ms")
        return
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               WATCH_WIDTH=str(args.width), WATCH_STEPS=str(args.steps), WATCH_PHASES=str(args.phases))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
                           str(args.ranks), "--master-addr", "127.0.0.1", "--master-port", str(free_port()), SCRIPT],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    if proc.returncode:
        sys.exit(f"the job failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    slowest = {}
    for rank, phase, kind, median_s in LINE.findall(proc.stdout):
        key = (int(phase), kind)
        slowest[key] = max(slowest.get(key, 0.0), float(median_s))
    for (phase, kind), median_s in sorted(slowest.items()):
        print(f"phase {phase:2d}  watch {kind:3s}  median step {median_s * 1000:8.3f} ms")
    off = statistics.median(v for (_, k), v in slowest.items() if k == "off")
    on = statistics.median(v for (_, k), v in slowest.items() if k == "on")
    print(f"\n{args.ranks} ranks, width {args.width}, {args.phases} x {args.steps} steps each way")
    print(f"without the watch: {off * 1000:.3f} ms a step; with it: {on * 1000:.3f} ms; ratio {on / off:.4f} "
          f"(target at most 1.01)")
    hooks_s = hook_cost(args.width)
    print(f"what the hooks add to a step, in one process (no job around it, the same model): {hooks_s * 1e6:.1f} us, "
          f"{hooks_s / off:.2%} of the job's step above")
    reading_s = window_reading_cost()
    print(f"what a window's reading of the sockets and the CPU wait costs: {reading_s * 1e6:.0f} us, "
          f"{reading_s / (20 * off):.2%} of a window of 20 steps above")


def window_reading_cost(sockets_open: int = 12, reads: int = 200) -> float:
    """Seconds one window's reading takes (injob/sockets.read and the runqueue wait), with this many TCP
    connections open in the process (a rank's Gloo pairs and its store), the median of `reads` readings."""
    import time

    sys.path.insert(0, ROOT)
    from clustercheck.injob import sockets
    from clustercheck.onnode.bench_worker import runqueue_wait_s
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(sockets_open)]
    clients = [socket.create_connection(server.getsockname()) for server in servers]
    taken = []
    for _ in range(reads):
        started = time.perf_counter()
        sockets.read()
        runqueue_wait_s()
        taken.append(time.perf_counter() - started)
    for sock in clients + servers:
        sock.close()
    return statistics.median(taken)


def hook_cost(width: int, blocks: int = 40, steps: int = 50) -> float:
    """The hooks' own cost per step: one process, the model's forward, backward and SGD step in blocks of `steps`,
    with the watch's hooks and without in turn; the median difference of the blocks' best steps (the machine's
    neighbours move the step by more than the hooks cost, the best of a block much less)."""
    import time

    import torch

    sys.path.insert(0, ROOT)
    from clustercheck.injob.stepwatch import Watch
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(64, width)

    def block() -> float:
        best = float("inf")
        for _ in range(steps):
            started = time.perf_counter()
            optimizer.zero_grad()
            model(data).sum().backward()
            optimizer.step()
            best = min(best, time.perf_counter() - started)
        return best

    differences = []
    for _ in range(blocks):
        without = block()
        watch = Watch(10 ** 9, 1.3, 2, "warn", "here").install()    # windows never come: the hooks alone
        with_hooks = block()
        watch.stop()
        differences.append(with_hooks - without)
    return max(0.0, statistics.median(differences))


if __name__ == "__main__":
    main()
