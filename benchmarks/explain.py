"""`clustercheck explain` on a large log: throughput and memory (issues 37 and 43), for two mixes of lines.

    python benchmarks/explain.py              # 1 GB logs written to a temporary directory, removed after
    python benchmarks/explain.py --size-mb 200 --mix nccl-info

`progress`: what a long multi-node run writes: 8 ranks' progress lines with [rankN]: prefixes, NCCL INFO lines,
Python warnings every few thousand lines. `nccl-info`: every line an NCCL INFO line, what NCCL_DEBUG=INFO
writes at a large job's start (channels and their transports, rings, communicators). Each ends with one rank's
real failure (a recorded CUDA OOM). Target: at least 100 MB/s for any mix, and under 200 MB of memory whatever
the size; the floor, measured in the same run on the same file (read from the page cache by both): `wc -l`.
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


def _nccl_info_block() -> str:
    block = []
    for i in range(4000):
        rank = i % 8
        head = f"gpu-node-{rank // 4}:{1000 + rank}:{2000 + rank} [{rank % 4}] NCCL INFO "
        block.append(f"{head}Channel {i % 32:02d}/0 : {rank}[{rank % 4}] -> {(rank + 1) % 8}[{(rank + 1) % 4}] via "
                     f"{'NET/IB/0/GDRDMA' if rank % 4 == 3 else 'P2P/CUMEM/read'}\n")
        if i % 40 == 0:
            block.append(f"{head}Connected all rings, use ring PXN 0 GDR 1\n")
        if i % 97 == 0:
            block.append(f"{head}comm 0x55d1c0 rank {rank} nRanks 8 nNodes 2 localRanks 4 localRank {rank % 4} "
                         f"MNNVL 0\n")
    return "".join(block)


def write_log(path: str, size: int, mix: str = "progress") -> int:
    if mix == "nccl-info":
        return _write(path, size, _nccl_info_block())
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
    return _write(path, size, "".join(block))


def _write(path: str, size: int, block: str) -> int:
    text = block.encode()
    written = 0
    with open(path, "wb") as handle:
        while written < size:
            handle.write(text)
            written += len(text)
        with open(FAILURE, "rb") as failure:
            handle.write(failure.read())
    return os.path.getsize(path)


def timed(argv, cwd=ROOT):
    """(wall seconds, peak memory MB, exit code, CPU seconds (user + system) of the child) for one command, its
    output discarded. The CPU time is what the wall would be with a core to itself: on a machine shared with other
    work the wall says the load as much as the code."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd,
                            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, proc.returncode, usage.ru_utime + usage.ru_stime


def measure(work: str, size_mb: int, mix: str, repeat: int, checkout: str = ROOT):
    """(size, explain's median wall, wc -l's median wall, explain's peak memory, exit codes, explain's median CPU
    time) on one mix."""
    path = os.path.join(work, f"job-{mix}.log")
    try:
        size = write_log(path, size_mb * 2 ** 20, mix)
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)   # both read from the page cache
        runs, floors = [], []
        for _ in range(repeat):
            floors.append(timed(["wc", "-l", path]))
            runs.append(timed([sys.executable, "-m", "clustercheck", "explain", path, "--json"], checkout))
    finally:
        os.remove(path)
    wall = sorted(r[0] for r in runs)[len(runs) // 2]
    floor = sorted(f[0] for f in floors)[len(floors) // 2]
    cpu = sorted(r[3] for r in runs)[len(runs) // 2]
    return size, wall, floor, max(r[1] for r in runs), sorted({r[2] for r in runs}), cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mix", choices=["progress", "nccl-info", "both"], default="both")
    parser.add_argument("--checkout", default=ROOT, help="the clustercheck checkout whose explain runs (an earlier "
                                                         "one, for a before / after on the same machine)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="clustercheck-bench-explain.")
    mixes = ["progress", "nccl-info"] if args.mix == "both" else [args.mix]
    try:
        results = {mix: measure(work, args.size_mb, mix, args.repeat, args.checkout) for mix in mixes}
    finally:
        os.rmdir(work)
    print(f"explain benchmark ({os.path.abspath(args.checkout)}): {args.size_mb:,} MB logs, medians of {args.repeat} "
          f"runs, {os.cpu_count()} CPUs\n")
    print("| mix | measure | value | ratio | target |")
    print("|---|---|---|---|---|")
    for mix, (size, wall, floor, memory, codes, cpu) in results.items():
        print(f"| {mix} | `clustercheck explain` (exit {codes}) | {wall:.2f} s, {size / 1e6 / wall:,.0f} MB/s | "
              f"{wall / floor:.1f}x of wc -l | >= 100 MB/s |")
        print(f"| {mix} | explain's CPU time (user + system) | {cpu:.2f} s, {size / 1e6 / cpu:,.0f} MB per CPU-second | "
              f"| |")
        print(f"| {mix} | `wc -l` (floor) | {floor:.2f} s, {size / 1e6 / floor:,.0f} MB/s | 1.0x | |")
        print(f"| {mix} | peak memory of explain | {memory:,.0f} MB | | < 200 MB |")
    _ = resource


if __name__ == "__main__":
    main()
