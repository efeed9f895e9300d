"""`clustercheck run -- true` through srun against through SSH, on the sandbox's real Slurm, in one run.

    sudo python benchmarks/slurm.py                  # 3 nodes, 7 repeats
    sudo python benchmarks/slurm.py --nodes 8 --repeat 5

A sandbox of --nodes nodes with Slurm (munge, slurmctld, a slurmd per node) and sshd. Measured
alternately, medians of --repeat, each the whole command as a user runs it:
- srun: `salloc -N N clustercheck run -- true` minus an empty `salloc -N N true` measured
  alongside (the allocation itself is Slurm's cost, not the transport's): one job step per node
  (srun --overlap) carrying the session loop;
- ssh: `clustercheck run NODES -F ssh_config -- true`: one SSH connection and session per node;
- and, for scale, OpenSSH: `ssh NODE true` to every node in parallel (xargs -P).
Prints the walls and the ratio srun / ssh. Needs root, slurm-wlm and munge.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from clustercheck.sandbox import Sandbox, down  # noqa: E402
from clustercheck.sandbox.slurm import environment, missing_slurm, start_slurm  # noqa: E402


def wall(argv, env=None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])}... failed ({proc.returncode}): {proc.stdout[-500:]}{proc.stderr[-500:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    if missing_slurm():
        sys.exit(f"Slurm is not installed here: {', '.join(missing_slurm())}")
    name = "bslm"
    box = Sandbox.up(args.nodes, name, shared_hostkey=True)
    try:
        start_slurm(box)
        env = dict(os.environ, **environment(box))
        tool = [sys.executable, "-m", "clustercheck", "run"]
        n = str(args.nodes)
        commands = {
            "allocation alone (salloc true)": (["salloc", "-N", n, "--quiet", "true"], env),
            "srun (salloc + clustercheck run)": (["salloc", "-N", n, "--quiet", *tool, "--", "true"], env),
            "ssh (clustercheck run)": ([*tool, box.nodes_file, "-F", box.ssh_config, "--", "true"], None),
            "OpenSSH (xargs -P)": (["sh", "-c", f"grep -v '^#' {box.nodes_file} | xargs -P 64 -I{{}} ssh -F "
                                         f"{box.ssh_config} {{}} true"], None),
        }
        for argv, run_env in commands.values():   # untimed: first logins and first steps do one-off work
            wall(argv, run_env)
        walls = {key: [] for key in commands}
        for _ in range(args.repeat):
            for key, (argv, run_env) in commands.items():
                walls[key].append(wall(argv, run_env))
        medians = {key: statistics.median(values) for key, values in walls.items()}
        print(f"run -- true on {args.nodes} sandbox nodes, medians of {args.repeat}:")
        for key, value in medians.items():
            print(f"  {key}: {value * 1000:.0f} ms")
        srun = medians["srun (salloc + clustercheck run)"] - medians["allocation alone (salloc true)"]
        ssh = medians["ssh (clustercheck run)"]
        print(f"  through srun (allocation subtracted): {srun * 1000:.0f} ms; through SSH: {ssh * 1000:.0f} ms; "
              f"ratio srun / ssh {srun / ssh:.2f}x")
    finally:
        down(name)


if __name__ == "__main__":
    main()
