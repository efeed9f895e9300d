"""The check inside the job (issue 45): what it adds to a job's start on a clean 3-node sandbox.

    sudo python benchmarks/injob.py                 # builds a 3-node sandbox "binj", removes it after
    sudo python benchmarks/injob.py --repeat 3 --keep

The job is the reference trainer (--mode ddp --steps 1), started on every node by the torchrun lines
`clustercheck launch` prints, over OpenSSH, all at once; with the check, `-m clustercheck.injob --budget B --` is
put before the script. Alternating, --repeat times each: the job without the check, the job with it. The figure is
the whole job's wall time (the trainer's one step is the same in both), so the difference is what the check adds
to the start. Targets (issue 45): at most the budget, and at most 30 s with the default budget (60 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from clustercheck.sandbox import Sandbox, down  # noqa: E402


def torchrun_lines(box: Sandbox, script: str, work: str):
    nodes = os.path.join(work, "nodes.txt")
    with open(nodes, "w") as handle:
        handle.write("\n".join(n.name for n in box.nodes) + "\n")
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "launch", nodes, "-F", box.ssh_config, "--python",
                           sys.executable, "--script", script, "--args", "--mode ddp --steps 1", "--json"],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(proc.stdout)["commands"]["torchrun"]


def run_job(box: Sandbox, lines) -> float:
    start = time.monotonic()
    procs = [subprocess.Popen(["ssh", "-F", box.ssh_config, node, f"mkdir -p /tmp/binj && cd /tmp/binj && {line}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for node, line in lines.items()]
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"the job failed: {err[-2000:]}")
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards")
    parser.add_argument("--name", default="binj")
    args = parser.parse_args()
    box = Sandbox.up(3, args.name)
    work = tempfile.mkdtemp(prefix="clustercheck-injob.")
    try:
        trainer = os.path.join(box.dir, "reference_train")
        shutil.rmtree(trainer, ignore_errors=True)
        shutil.copytree(os.path.join(ROOT, "reference_train"), trainer)
        script = os.path.join(trainer, "train.py")
        bare = torchrun_lines(box, script, work)
        wrapper = (f"-m clustercheck.injob --budget {args.budget:g} --quiet --reports-dir "
                   f"{os.path.join(box.dir, 'binj-reports')} -- {shlex.quote(script)}")
        checked = {node: f"PYTHONPATH={os.path.abspath(ROOT)} " + line.replace(f" {shlex.quote(script)} ",
                                                                               f" {wrapper} ", 1)
                   for node, line in bare.items()}
        times = {"without": [], "with": []}
        for i in range(args.repeat):
            order = ("without", "with") if i % 2 == 0 else ("with", "without")
            for kind in order:
                times[kind].append(run_job(box, bare if kind == "without" else checked))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep:
            down(args.name)
    without, with_check = statistics.median(times["without"]), statistics.median(times["with"])
    added = with_check - without
    print(f"injob benchmark: 3 sandbox nodes on one {os.cpu_count()}-CPU host, reference trainer --steps 1, "
          f"budget {args.budget:g} s, medians of {args.repeat}")
    print(f"  job without the check: {without:.1f} s  ({', '.join(f'{t:.1f}' for t in times['without'])})")
    print(f"  job with the check:    {with_check:.1f} s  ({', '.join(f'{t:.1f}' for t in times['with'])})")
    print(f"  the check adds {added:.1f} s to the start ({with_check / without:.2f}x the job without it); "
          f"target at most {min(args.budget, 30.0):g} s: {'met' if added <= min(args.budget, 30.0) else 'MISSED'}")


if __name__ == "__main__":
    main()
