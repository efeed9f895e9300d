"""`clustercheck bench` against the link rate: busbw next to iperf3, and the slow node found.

    sudo python benchmarks/bench.py            # builds a 4-node sandbox "bbch", removes it after
    sudo python benchmarks/bench.py --keep     # leaves it up for another run

Every node's link is limited with tc tbf (--mbit, default 1000). In the same run:
1. raw TCP throughput from node 1 to node 2 with iperf3 (-t 5), the reference;
2. `clustercheck bench` all_reduce, 1 MiB to 64 MiB, over 2 and over 4 nodes: busbw at
   every size from 1 MiB against iperf3 (target, issue 15: at least 0.95x);
3. the limits lifted, node 3 alone slowed to --slow-mbit (default 50 Mbit/s), then
   `clustercheck bench nodes.txt --pairwise` with its defaults, --runs times, stderr a pipe:
   the node must be named every time, within 120 s end to end (issue 15), with a progress
   line per round and per size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from clustercheck.sandbox import Sandbox, down, faults  # noqa: E402

SWEEP = ["-c", "all_reduce", "-b", "1M", "-e", "64M", "-f", "4"]


def iperf3_mbit(box: Sandbox, seconds: int = 5) -> float:
    server, client = box.nodes[1], box.nodes[0]
    daemon = subprocess.Popen(["ip", "netns", "exec", server.netns, "iperf3", "-s", "-1", "-B", server.addr],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = subprocess.run(["ip", "netns", "exec", client.netns, "iperf3", "-c", server.addr, "-t", str(seconds),
                              "-J"], capture_output=True, text=True, check=True).stdout
    finally:
        daemon.kill()
        daemon.wait()
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


def bench(box: Sandbox, nodes_file: str, *args: str, with_progress: bool = False):
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "bench", nodes_file, "-F", box.ssh_config,
                           "--python", sys.executable, "--json", *args], capture_output=True, text=True)
    if not proc.stdout.strip():
        raise SystemExit(f"bench printed nothing (exit {proc.returncode}): {proc.stderr[-800:]}")
    progress = [line for line in proc.stderr.splitlines() if line.startswith("[bench] ")]
    return (json.loads(proc.stdout), progress) if with_progress else json.loads(proc.stdout)


def busbw_from_1mib(doc: dict) -> list:
    return [(row["size"], row["in_place"]["busbw"]) for row in doc["stages"][0]["rows"] if row["size"] >= 2 ** 20]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mbit", type=float, default=1000.0)
    parser.add_argument("--slow-mbit", type=float, default=50.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards")
    parser.add_argument("--name", default="bbch")
    args = parser.parse_args()

    box = Sandbox.up(4, args.name)
    work = tempfile.mkdtemp(prefix="clustercheck-bench.")
    try:
        for node in box.nodes:
            faults.slow_link(box, node.name, args.mbit)
        files = {}
        for n in (2, 4):
            files[n] = os.path.join(work, f"nodes{n}.txt")
            with open(files[n], "w") as handle:
                handle.write("\n".join(node.name for node in box.nodes[:n]) + "\n")
        reference = iperf3_mbit(box)
        sweeps = {n: bench(box, files[n], *SWEEP, "--pairwise", "off") for n in files}
        faults.clear_all(box)
        slow = box.nodes[2].name
        faults.slow_link(box, slow, args.slow_mbit)
        runs = []
        for _ in range(args.runs):
            start = time.monotonic()
            doc, progress = bench(box, files[4], "--pairwise", with_progress=True)
            runs.append((doc, time.monotonic() - start, progress))
    finally:
        if not args.keep:
            down(args.name)

    ref_gbps = reference / 8 / 1000
    print(f"bench benchmark: links limited to {args.mbit:g} Mbit/s with tc tbf; {os.cpu_count()} CPUs shared\n")
    print(f"iperf3 node1 -> node2, 5 s: {reference:.1f} Mbit/s = {ref_gbps:.4f} GB/s (the reference)\n")
    print("| nodes | size | all_reduce busbw GB/s | ratio to iperf3 | target |")
    print("|---|---|---|---|---|")
    for n, doc in sweeps.items():
        for size, busbw in busbw_from_1mib(doc):
            print(f"| {n} | {size // 2 ** 20} MiB | {busbw:.4f} | {busbw / ref_gbps:.2f}x | >= 0.95x |")
    named = [[f["nodes"] for f in doc["findings"] if f["check"] == "bench.pairwise.node"] for doc, _, _ in runs]
    hits = sum(1 for found in named if found == [[slow]])
    walls = [wall for _, wall, _ in runs]
    print(f"\n`bench --pairwise`, 4 nodes, {slow} alone at {args.slow_mbit:g} Mbit/s, stderr a pipe: named in {hits} "
          f"of {len(runs)} runs (target: every run); end to end median {statistics.median(walls):.1f} s, worst "
          f"{max(walls):.1f} s (target <= 120 s)")
    doc, wall, progress = runs[-1]
    print(f"\nthe last run's progress lines ({len(progress)}), as a user sees them without a TTY:")
    for line in progress:
        print(f"    {line}")


if __name__ == "__main__":
    main()
