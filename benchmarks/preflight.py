"""`clustercheck preflight` end to end on 4 sandbox nodes, with the time of each stage.

    sudo python benchmarks/preflight.py           # builds a 4-node sandbox "bpre", removes it after

Target (issue 7): under 3 minutes end to end on this 2-core machine. DeepSpeed is not
used by the default smoke (ddp), so no op compile is involved.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from clustercheck.sandbox import Sandbox, down  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards")
    parser.add_argument("--name", default="bpre")
    args = parser.parse_args()
    box = Sandbox.up(4, args.name)
    work = tempfile.mkdtemp(prefix="clustercheck-bench.")
    try:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "clustercheck", "preflight", box.nodes_file, "-F",
                               box.ssh_config, "--python", sys.executable, "--reports-dir", work, "--json"],
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
    finally:
        if not args.keep:
            down(args.name)
    doc = json.loads(proc.stdout)
    print(f"preflight benchmark: 4 sandbox nodes, {os.cpu_count()} CPUs shared\n")
    print("| stage | result | seconds |")
    print("|---|---|---|")
    for name, stage in doc["stages"].items():
        print(f"| {name} | {stage['status']} | {stage['wall_s']:.1f} |")
    print(f"| end to end (a fresh process, report written) | {doc['verdict']} | {wall:.1f} |")
    print(f"\ntarget: under 180 s -> {'met' if wall < 180 else 'MISSED'}")


if __name__ == "__main__":
    main()
