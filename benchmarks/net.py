"""`clustercheck net` speed: the mesh over 16 nodes against 2, and with a filtered port.

    sudo python benchmarks/net.py            # builds a 16-node sandbox "bnet", removes it after
    sudo python benchmarks/net.py --keep     # leaves it up for another run

In the same run, `clustercheck net` (a fresh process, as a user runs it, attempt timeout
--attempt-timeout) over 2 nodes, over 16 nodes (240 ordered pairs, 3 ports to the master
and 2 to every node), and over the same 16 with one node dropping its whole ephemeral range
(every attempt to it is filtered). Targets (issue 4): the clean 16-node mesh in at most 3x
the 2-node time; the filtered mesh at most 1.5 attempt timeouts over the clean one.
Medians of --repeat runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from clustercheck.sandbox import Sandbox, down, faults  # noqa: E402

NUM_NODES = 16


def timed_net(nodes_file: str, box: Sandbox, attempt_timeout: float, expect_fail: bool) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "net", nodes_file, "-F", box.ssh_config,
                           "--python", sys.executable, "--attempt-timeout", f"{attempt_timeout:g}"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if (proc.returncode == 2) != expect_fail:
        raise SystemExit(f"net exited {proc.returncode}:\n{proc.stdout[-1500:]}{proc.stderr[-500:]}")
    return wall


def timed_run(nodes_file: str, box: Sandbox) -> float:
    """The floor: `clustercheck run -- true`, one exec per node (the mesh needs two)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "clustercheck", "run", nodes_file, "-F", box.ssh_config, "--", "true"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--attempt-timeout", type=float, default=3.0)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards")
    parser.add_argument("--name", default="bnet")
    args = parser.parse_args()

    box = Sandbox.up(NUM_NODES, args.name)
    work = tempfile.mkdtemp(prefix="clustercheck-bench.")
    try:
        files = {}
        for n in (2, NUM_NODES):
            files[n] = os.path.join(work, f"nodes{n}.txt")
            with open(files[n], "w") as handle:
                handle.write("\n".join(node.name for node in box.nodes[:n]) + "\n")
        t = args.attempt_timeout
        floor = {n: statistics.median(timed_run(files[n], box) for _ in range(args.repeat)) for n in files}
        two = statistics.median(timed_net(files[2], box, t, False) for _ in range(args.repeat))
        clean = statistics.median(timed_net(files[NUM_NODES], box, t, False) for _ in range(args.repeat))
        faults.drop_port(box, box.nodes[4].name, "32768:60999")
        filtered = statistics.median(timed_net(files[NUM_NODES], box, t, True) for _ in range(args.repeat))
    finally:
        if not args.keep:
            down(args.name)

    extra = (filtered - clean) / args.attempt_timeout
    print(f"net benchmark: medians of {args.repeat} runs, attempt timeout {args.attempt_timeout:g} s, "
          f"{os.cpu_count()} CPUs shared by all sandbox nodes\n")
    print("| measure | seconds | ratio | target |")
    print("|---|---|---|---|")
    print(f"| mesh, 2 nodes | {two:.2f} | 1.00x | |")
    print(f"| mesh, {NUM_NODES} nodes, clean ({NUM_NODES * (NUM_NODES - 1)} ordered pairs) | {clean:.2f} | "
          f"{clean / two:.2f}x of 2 nodes | <= 3x |")
    print(f"| floor: `run -- true`, 2 nodes | {floor[2]:.2f} | | |")
    print(f"| floor: `run -- true`, {NUM_NODES} nodes | {floor[NUM_NODES]:.2f} | {floor[NUM_NODES] / floor[2]:.2f}x "
          f"of 2 nodes | |")
    print(f"| mesh, {NUM_NODES} nodes, one node filtering its ephemeral range | {filtered:.2f} | "
          f"+{extra:.2f} attempt timeouts over clean | <= +1.5 |")


if __name__ == "__main__":
    main()
