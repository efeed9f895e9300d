"""`clustercheck env` speed: the probe against importing torch, and 32 nodes against 1.

    sudo python benchmarks/env.py            # builds a 32-node sandbox "benv", removes it after
    sudo python benchmarks/env.py --keep     # leaves it up for another run
    python benchmarks/env.py --packages 400  # no sandbox: the probe in a 400-package environment (issue 36)

1. On one sandbox node, over the same SSH connection: the wall time of running the
   probe with the node's interpreter, against `python -c "import torch"` with the same
   interpreter (target, issue 3: the probe at most 0.25x). Both pay the same SSH exec
   and login-shell cost; the bare `python -c pass` is shown as the floor.
2. `clustercheck env` (a fresh process, as a user runs it) over 32 sandbox nodes against
   1 node (target: at most 2x), and `clustercheck run -- true` over the same 32 nodes,
   the cost of just reaching them, for context.
3. --packages N: on this machine, the probe (every distribution, its origin, the libraries torch loads) run
   with this interpreter in an environment of N distributions (this one's, and fake dist-info directories with
   METADATA, INSTALLER and direct_url.json up to N on PYTHONPATH), against `python -c "import torch"` with the
   same PYTHONPATH (target, issue 36: at most 0.25x).
Medians of --repeat runs, all in the same run (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import json
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


def fake_environment(directory: str, count: int) -> int:
    """Dist-info directories on top of this interpreter's, up to `count` in all: what a big training image has."""
    from clustercheck.onnode.env_probe import installed_distributions
    have = len(installed_distributions())
    for i in range(max(0, count - have)):
        info = os.path.join(directory, f"benchpkg{i:04d}-1.{i}.0.dist-info")
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as handle:
            handle.write(f"Metadata-Version: 2.1\nName: benchpkg{i:04d}\nVersion: 1.{i}.0\n")
        with open(os.path.join(info, "INSTALLER"), "w") as handle:
            handle.write("pip\n")
        if i % 20 == 0:
            with open(os.path.join(info, "direct_url.json"), "w") as handle:
                handle.write('{"url": "file:///src/benchpkg", "dir_info": {"editable": true}}')
    return max(have, count)


def packages_benchmark(count: int, repeat: int) -> None:
    from clustercheck.onnode import env_probe
    work = tempfile.mkdtemp(prefix="clustercheck-bench-pkgs.")
    total = fake_environment(work, count)
    environ = dict(os.environ, PYTHONPATH=work)
    probe = [sys.executable, env_probe.__file__]

    def run(argv):
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environ, check=True)
    run([sys.executable, "-c", "import torch"])          # warm the page cache for both
    probe_s = median_wall(lambda: run(probe), repeat)
    torch_s = median_wall(lambda: run([sys.executable, "-c", "import torch"]), repeat)
    bare_s = median_wall(lambda: run([sys.executable, "-c", "pass"]), repeat)
    seen = len(json.loads(subprocess.run(probe, capture_output=True, text=True, env=environ).stdout)
               ["packages"]["distributions"])
    print(f"env probe in a {total}-package environment ({seen} listed): medians of {repeat} runs, "
          f"{os.cpu_count()} CPUs\n")
    print("| measure | seconds | ratio | target |")
    print("|---|---|---|---|")
    print(f"| the whole probe (`python env_probe.py`) | {probe_s:.3f} | {probe_s / torch_s:.2f}x of import torch "
          f"| <= 0.25x |")
    print(f"| `python -c \"import torch\"` | {torch_s:.3f} | 1.00x | |")
    print(f"| `python -c pass` (floor) | {bare_s:.3f} | {bare_s / torch_s:.2f}x | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards")
    parser.add_argument("--name", default="benv")
    parser.add_argument("--packages", type=int, help="only the probe, here, in an environment of this many "
                                                      "distributions")
    args = parser.parse_args()
    if args.packages:
        return packages_benchmark(args.packages, args.repeat)
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
