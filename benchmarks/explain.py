"""`clustercheck explain` on a large log: throughput and memory (issue 37).

    python benchmarks/explain.py              # a 1 GB log written to a temporary directory, removed after
    python benchmarks/explain.py --size-mb 200

The log is what a long multi-node run writes: 8 ranks' progress lines with [rankN]: prefixes, NCCL INFO lines,
Python warnings every few thousand lines, and at its end one rank's real failure (a recorded CUDA OOM). Target:
at least 100 MB/s, and under 200 MB of memory whatever the size; the floor, measured in the same run on the same
file (read from the page cache by both): `wc -l`.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FAILURE = os.path.join(ROOT, "tests", "data", "smoke-logs", "oom-cuda-8gpu-summary-llamafactory-257.txt")


def write_log(path: str, size: int) -> int:
    block = []
    for i in range(2000):
        rank = i % 8
        block.append(f"[rank{rank}]: {{'loss': {1.0 + i / 1e4:.4f}, 'grad_norm': 0.83, 'learning_rate': 2e-05, "
                     f"'epoch': 0.{i:04d}}}  12%|#5   | {i}/16000 [01:23<09:41, 1.2it/s]\n")
        if i % 50 == 0:
            block.append(f"gpu-node-{rank // 4}:{1000 + rank}:{2000 + rank} [{rank % 4}] NCCL INFO Channel 0{i % 8}/0 : "
                         f"{rank}[{rank}] -> {(rank + 1) % 8}[{(rank + 1) % 8}] via P2P/CUMEM/read\n")
        if i % 997 == 0:
            block.append("/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:429: UserWarning: "
                         "torch.utils.checkpoint: please pass in use_reentrant=True or use_reentrant=False\n")
    text = "".join(block).encode()
    written = 0
    with open(path, "wb") as handle:
        while written < size:
            handle.write(text)
            written += len(text)
        with open(FAILURE, "rb") as failure:
            handle.write(failure.read())
    return os.path.getsize(path)


def timed(argv):
    """(wall seconds, peak memory MB of the child) for one command, its output discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="clustercheck-bench-explain.")
    path = os.path.join(work, "job.log")
    try:
        size = write_log(path, args.size_mb * 2 ** 20)
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)   # both read from the page cache
        runs, floors = [], []
        for _ in range(args.repeat):
            floors.append(timed(["wc", "-l", path]))
            runs.append(timed([sys.executable, "-m", "clustercheck", "explain", path, "--json"]))
        wall = sorted(r[0] for r in runs)[len(runs) // 2]
        floor = sorted(f[0] for f in floors)[len(floors) // 2]
        memory = max(r[1] for r in runs)
        codes = {r[2] for r in runs}
    finally:
        for name in os.listdir(work):
            os.remove(os.path.join(work, name))
        os.rmdir(work)
    print(f"explain benchmark: a {size / 1e6:,.0f} MB log, medians of {args.repeat} runs, {os.cpu_count()} CPUs, "
          f"exit codes {sorted(codes)}\n")
    print("| measure | value | ratio | target |")
    print("|---|---|---|---|")
    print(f"| `clustercheck explain` | {wall:.2f} s, {size / 1e6 / wall:,.0f} MB/s | {wall / floor:.1f}x of wc -l | "
          f">= 100 MB/s |")
    print(f"| `wc -l` (floor) | {floor:.2f} s, {size / 1e6 / floor:,.0f} MB/s | 1.0x | |")
    print(f"| peak memory of explain | {memory:,.0f} MB | | < 200 MB |")
    _ = resource


if __name__ == "__main__":
    main()
