"""`clustercheck stacks` against a bare py-spy loop over SSH, in one run.

    sudo python benchmarks/stacks.py                 # 16 nodes x 4 processes, 5 repeats
    sudo python benchmarks/stacks.py --nodes 8 --procs 2 --repeat 3

A sandbox of --nodes nodes (each its own PID namespace); on every node --procs Python processes
sleeping in one function (one node's in another). Measured alternately, medians of --repeat:
- clustercheck: `clustercheck stacks NODES --match stuck_job.py` (one session per node, the
  processes of a node dumped at once, folded);
- the reference: what a user writes by hand, an OpenSSH loop over the nodes running
  `for pid in $(pgrep -f stuck_job.py); do py-spy dump --pid $pid; done` on each, in turn.
Prints both walls and their ratio (target: clustercheck no slower than the loop; the printed
result fits one screen). Needs root, py-spy beside this interpreter.
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

SCRIPT = '''
import sys, time
def wait_for_the_others():
    time.sleep(3600)
def read_a_stuck_file():
    time.sleep(3600)
(read_a_stuck_file if sys.argv[1] == "odd" else wait_for_the_others)()
'''


def wall(argv, **kwargs):
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    return time.perf_counter() - start, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    py_spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.access(py_spy, os.X_OK):
        sys.exit(f"py-spy is not beside {sys.executable}: pip install py-spy")
    name = "bstk"
    box = Sandbox.up(args.nodes, name, shared_hostkey=True)
    jobs = []
    try:
        script = os.path.join(box.dir, "stuck_job.py")
        with open(script, "w") as handle:
            handle.write(SCRIPT)
        nodes_file = os.path.join(box.dir, "bench-nodes.txt")
        with open(nodes_file, "w") as handle:
            handle.write("\n".join(n.name for n in box.nodes) + "\n")
        for i, node in enumerate(box.nodes):
            role = "odd" if i == len(box.nodes) // 2 else "alike"
            command = " & ".join([f"{sys.executable} {script} {role}"] * args.procs) + " & wait"
            jobs.append(subprocess.Popen(["ssh", "-F", box.ssh_config, node.name, command],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL))
        time.sleep(3)
        ours = [sys.executable, "-m", "clustercheck", "stacks", nodes_file, "-F", box.ssh_config, "--python",
                sys.executable, "--match", "stuck_job.py"]
        loop = ["sh", "-c", "for n in " + " ".join(n.name for n in box.nodes) + "; do ssh -F " + box.ssh_config +
                " $n 'for pid in $(pgrep -f stuck_job.py); do " + py_spy + " dump --pid $pid; done'; done"]
        wall(ours)   # untimed: every node's first login does its one-off work
        wall(loop)
        walls = {"clustercheck stacks": [], "py-spy loop over OpenSSH": []}
        for _ in range(args.repeat):
            took, proc = wall(ours)
            walls["clustercheck stacks"].append(took)
            screen = proc.stdout
            took, loop_proc = wall(loop)
            walls["py-spy loop over OpenSSH"].append(took)
        medians = {k: statistics.median(v) for k, v in walls.items()}
        total = args.nodes * args.procs
        print(f"{args.nodes} nodes x {args.procs} processes ({total}), medians of {args.repeat}:")
        for key, value in medians.items():
            print(f"  {key}: {value:.2f} s")
        ratio = medians["clustercheck stacks"] / medians["py-spy loop over OpenSSH"]
        print(f"  ratio clustercheck / loop: {ratio:.2f}x (target <= 1.0x)")
        print(f"  clustercheck's screen: {len(screen.splitlines())} lines; the loop's: "
              f"{len(loop_proc.stdout.splitlines())} lines")
        print(screen)
    finally:
        for job in jobs:
            job.kill()
        down(name)


if __name__ == "__main__":
    main()
