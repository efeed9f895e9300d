"""Naming slow nodes: the adaptive search against the full round robin, simulated and for real.

    python benchmarks/isolation.py                 # the simulation only (seconds, no root)
    sudo python benchmarks/isolation.py --real 32  # also a 32-node sandbox "biso", removed after

1. Simulation (benchmarks/simulate.py): 64, 256 and 1,000 nodes with 1, 2 and 5 bad
   nodes (5-40% of a 100 Gb/s NIC), one bad link between good nodes, +-30% noise on every
   measurement; --trials seeded trials each. Rounds and simulated time of the adaptive search
   against the full round robin (N-1 rounds) of the same cluster. Targets (issue 15): at most
   2*ceil(log2 N)+2 rounds for up to 2 bad nodes; every bad node named and no good node blamed
   in every trial.
2. Real (--real N): N sandbox nodes, one slowed to --mbit with tc tbf, `clustercheck bench
   --pairwise adaptive` and `--pairwise full` with no sweep, each once, in the same run: the
   node named, rounds, the time the pair rounds took (the round events) and end to end. Target:
   the adaptive search names it in at most 1/4 of the full round robin's time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.simulate import run_adaptive, run_full, scenario  # noqa: E402


def simulate(trials: int) -> None:
    print(f"simulation: {trials} seeded trials per row, bad nodes at 5-40% of nominal, one bad link between good "
          "nodes, +-30% noise, 16 MiB pairs, 5 s per round\n")
    print("| nodes | bad nodes | adaptive rounds (worst) | target | named, all trials | good nodes blamed | "
          "adaptive time (s, median) | full round robin rounds | full time (s, median) | time ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for count in (64, 256, 1000):
        for bad in (1, 2, 5):
            worst, missed, blamed, adaptive_s, full_s = 0, 0, 0, [], []
            for seed in range(trials):
                model = scenario(count, bad, links=1, seed=seed)
                outcome = run_adaptive(model)
                worst = max(worst, outcome.rounds)
                missed += len(set(model.bad_nodes) - set(outcome.named)) + len(outcome.undecided)
                blamed += len(set(outcome.named) - set(model.bad_nodes))
                adaptive_s.append(outcome.seconds)
                full_s.append(run_full(scenario(count, bad, links=1, seed=seed)).seconds)
            limit = 2 * math.ceil(math.log2(count)) + 2
            target = f"<= {limit}" if bad <= 2 else "(none)"
            med_a, med_f = sorted(adaptive_s)[trials // 2], sorted(full_s)[trials // 2]
            print(f"| {count} | {bad} | {worst} | {target} | {'yes' if not missed else f'{missed} missed'} | "
                  f"{blamed} | {med_a:.1f} | {count - 1} | {med_f:.1f} | {med_a / med_f:.3f}x |")


def real(count: int, mbit: float, name: str, keep: bool) -> None:
    from clustercheck.sandbox import Sandbox, down, faults

    box = Sandbox.up(count, name)
    work = tempfile.mkdtemp(prefix="clustercheck-isolation.")
    results = {}
    try:
        slow = box.nodes[count // 2].name
        faults.slow_link(box, slow, mbit)
        for mode in ("adaptive", "full"):
            start = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "clustercheck", "bench", box.nodes_file, "-F",
                                   box.ssh_config, "--python", sys.executable, "--json", "-c", "", "--pairwise", mode,
                                   "--pair-bytes", "4M", "--stage-budget", "3600", "--timeout", "3000"],
                                  capture_output=True, text=True)
            wall = time.monotonic() - start
            if not proc.stdout.strip():
                raise SystemExit(f"bench printed nothing (exit {proc.returncode}): {proc.stderr[-800:]}")
            doc = json.loads(proc.stdout)
            with open(os.path.join(work, f"{mode}.json"), "w") as handle:
                handle.write(proc.stdout)
            rounds = [line for line in proc.stderr.splitlines() if line.startswith("[bench] ") and " round " in line]
            named = [f["nodes"] for f in doc["findings"] if f["check"] == "bench.pairwise.node"]
            pair_s = sum(float(line.split(" in ")[1].split(" s")[0]) for line in rounds)
            results[mode] = (named, len(rounds), pair_s, wall)
    finally:
        if not keep:
            down(name)
    print(f"\nreal: {count} sandbox nodes, {slow} at {mbit:g} Mbit/s (tc tbf), the others unlimited; "
          f"4 MiB pairs; {os.cpu_count()} CPUs shared by every node\n")
    print("| search | slow node named | rounds | pair rounds (s) | end to end (s) |")
    print("|---|---|---|---|---|")
    for mode, (named, rounds, pair_s, wall) in results.items():
        print(f"| {mode} | {'yes' if named == [[slow]] else named or 'no'} | {rounds} | {pair_s:.1f} | {wall:.1f} |")
    if results["full"][2] and results["full"][3]:
        ratio = results["adaptive"][2] / results["full"][2]
        end = results["adaptive"][3] / results["full"][3]
        print(f"\nadaptive / full: pair rounds {ratio:.2f}x, end to end {end:.2f}x (target: at most 0.25x)")
    else:
        print("\nthe full round robin's launch failed: no ratio (its report is in " + work + ")")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--real", type=int, metavar="N", help="also run on N sandbox nodes (root)")
    parser.add_argument("--mbit", type=float, default=100.0, help="the slowed node's link (--real)")
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards (--real)")
    parser.add_argument("--name", default="biso")
    args = parser.parse_args()
    simulate(args.trials)
    if args.real:
        real(args.real, args.mbit, args.name, args.keep)


if __name__ == "__main__":
    main()
