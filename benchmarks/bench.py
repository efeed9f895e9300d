"""`clustercheck bench` against the link rate: busbw next to iperf3, and the slow node found.

    sudo python benchmarks/bench.py            # builds a 4-node sandbox "bbch", removes it after
    sudo python benchmarks/bench.py --keep     # leaves it up for another run

Every node's link is limited with tc tbf (--mbit, default 1000). In the same run:
1. raw TCP throughput from node 1 to node 2 with iperf3 (-t 5), the reference;
2. `clustercheck bench` all_reduce, 1 MiB to 64 MiB, over 2 and over 4 nodes: busbw at
   every size from 1 MiB against iperf3 (target, issue 5: at least 0.90x);
3. node 3 slowed to a quarter of the rate, then `bench --pairwise` --runs times: the node
   must be named every time, and the pairwise stage must take at most 2x the sweep stage
   of the same run (the all_reduce sweep of step 2 over 4 nodes).
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


def bench(box: Sandbox, nodes_file: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "bench", nodes_file, "-F", box.ssh_config,
                           "--python", sys.executable, "--json", *args], capture_output=True, text=True)
    if not proc.stdout.strip():
        raise SystemExit(f"bench printed nothing (exit {proc.returncode}): {proc.stderr[-800:]}")
    return json.loads(proc.stdout)


def busbw_from_1mib(doc: dict) -> list:
    return [(row["size"], row["in_place"]["busbw"]) for row in doc["stages"][0]["rows"] if row["size"] >= 2 ** 20]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mbit", type=float, default=1000.0)
    parser.add_argument("--runs", type=int, default=5)
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
        sweeps = {n: bench(box, files[n], *SWEEP) for n in files}
        slow = box.nodes[2].name
        faults.slow_link(box, slow, args.mbit / 4)
        runs = [bench(box, files[4], *SWEEP, "--pairwise", "--pair-bytes", "4M") for _ in range(args.runs)]
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
            print(f"| {n} | {size // 2 ** 20} MiB | {busbw:.4f} | {busbw / ref_gbps:.2f}x | >= 0.90x |")
    named = [[f["nodes"] for f in doc["findings"] if f["check"] == "bench.pairwise.node"] for doc in runs]
    hits = sum(1 for found in named if found == [[slow]])
    ratios = [doc["stages"][1]["wall_s"] / doc["stages"][0]["wall_s"] for doc in runs if len(doc["stages"]) == 2]
    print(f"\npairwise, {slow} at {args.mbit / 4:g} Mbit/s: named in {hits} of {len(runs)} runs (target: every run)")
    print(f"pairwise stage / sweep stage: median {statistics.median(ratios):.2f}x, worst {max(ratios):.2f}x "
          f"(target <= 2x); sweep {statistics.median(d['stages'][0]['wall_s'] for d in runs):.1f} s, pairwise "
          f"{statistics.median(d['stages'][1]['wall_s'] for d in runs):.1f} s")


if __name__ == "__main__":
    main()
