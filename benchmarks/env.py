"""`clustercheck env` speed: the probe against importing torch, and 32 nodes against 1.

    sudo python benchmarks/env.py            # builds a 32-node sandbox "benv", removes it after
    sudo python benchmarks/env.py --keep     # leaves it up for another run

1. On one sandbox node, over the same SSH connection: the wall time of running the
   probe with the node's interpreter, against `python -c "import torch"` with the same
   interpreter (target, issue 3: the probe at most 0.25x). Both pay the same SSH exec
   and login-shell cost; the bare `python -c pass` is shown as the floor.
2. `clustercheck env` (a fresh process, as a user runs it) over 32 sandbox nodes against
   1 node (target: at most 2x), and `clustercheck run -- true` over the same 32 nodes,
   the cost of just reaching them, for context.
Medians of --repeat runs, all in the same run (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from clustercheck.core.inventory import Node  # noqa: E402
from clustercheck.onnode import inline_command  # noqa: E402
from clustercheck.sandbox import Sandbox, down  # noqa: E402
from clustercheck.transport.fanout import Cluster, FanoutOptions  # noqa: E402
from clustercheck.transport.sshconfig import SSHSettings  # noqa: E402

NUM_NODES = 32


def median_wall(func, repeat: int) -> float:
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def remote(transport, command: str) -> None:
    result = transport.run(command, 120)
    if not result.ok:
        raise SystemExit(f"{command!r} failed on {transport.name}: {result.stderr[-400:] or result.detail}")


def cli(args) -> None:
    proc = subprocess.run([sys.executable, "-m", "clustercheck", *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"clustercheck {' '.join(args[:2])} exited {proc.returncode}: {proc.stderr[-400:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards")
    parser.add_argument("--name", default="benv")
    args = parser.parse_args()
    python = sys.executable

    box = Sandbox.up(NUM_NODES, args.name)
    work = tempfile.mkdtemp(prefix="clustercheck-bench.")
    try:
        first = box.nodes[0].name
        options = FanoutOptions(ssh=SSHSettings(config_path=box.ssh_config))
        with Cluster([Node(first)], options) as cluster:
            transport = cluster.transports[first]
            probe = inline_command(python, "env_probe.py", ["--peers", box.nodes[1].name])
            py = shlex.quote(python)
            remote(transport, f"{py} -c 'import torch'")  # warm the page cache for both
            probe_s = median_wall(lambda: remote(transport, probe), args.repeat)
            torch_s = median_wall(lambda: remote(transport, f"{py} -c 'import torch'"), args.repeat)
            bare_s = median_wall(lambda: remote(transport, f"{py} -c pass"), args.repeat)

        files = {}
        for n in (1, NUM_NODES):
            files[n] = os.path.join(work, f"nodes{n}.txt")
            with open(files[n], "w") as handle:
                handle.write("\n".join(node.name for node in box.nodes[:n]) + "\n")
        common = ["-F", box.ssh_config, "--python", python]
        env_s = {n: median_wall(lambda n=n: cli(["env", files[n], *common]), args.repeat) for n in files}
        reach_s = median_wall(lambda: cli(["run", files[NUM_NODES], "-F", box.ssh_config, "--", "true"]),
                              args.repeat)
    finally:
        if not args.keep:
            down(args.name)

    print(f"env benchmark: medians of {args.repeat} runs, {os.cpu_count()} CPUs, sandbox nodes share them\n")
    print("| measure | seconds | ratio | target |")
    print("|---|---|---|---|")
    print(f"| probe on one node (SSH exec, node's python) | {probe_s:.3f} | {probe_s / torch_s:.2f}x of import torch "
          f"| <= 0.25x |")
    print(f"| `python -c \"import torch\"` on the same node | {torch_s:.3f} | 1.00x | |")
    print(f"| `python -c pass` on the same node (floor) | {bare_s:.3f} | {bare_s / torch_s:.2f}x | |")
    print(f"| `clustercheck env`, 1 node | {env_s[1]:.3f} | 1.00x | |")
    print(f"| `clustercheck env`, {NUM_NODES} nodes | {env_s[NUM_NODES]:.3f} | {env_s[NUM_NODES] / env_s[1]:.2f}x "
          f"of 1 node | <= 2x |")
    print(f"| `clustercheck run -- true`, {NUM_NODES} nodes (reaching them) | {reach_s:.3f} | "
          f"{reach_s / env_s[1]:.2f}x of env on 1 node | |")


if __name__ == "__main__":
    main()
