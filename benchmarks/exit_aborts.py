"""How often a process aborts (SIGABRT) at exit: the plain local ZeRO-0 run that showed one in CI, run again
and again, and the tool itself stopped by SIGTERM mid-bench (which once exited -6 instead of 130).

    python benchmarks/exit_aborts.py --runs 30 --stops 10

Prints each kind's count of runs, of non-zero exits and of abort marks in their output. Before the fix
(the heartbeat and hang-watcher threads stopped and joined before the interpreter tears down), four
aborts had been seen over several hundred such runs in CI and on the sandbox; this is the stress test
that would show one again.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, ROOT)
from clustercheck.ranks.runs import ABORT_MARKS  # noqa: E402

TRAIN = os.path.join(ROOT, "reference_train", "train.py")
Z0 = os.path.join(ROOT, "tests", "data", "ds_configs", "ds_z0_config.json")


def aborted(code: int, text: str) -> bool:
    return code in (-6, 134) or any(mark in text for mark in ABORT_MARKS)


def zero0_runs(count: int) -> dict:
    seen = {"runs": 0, "failed": 0, "aborted": 0}
    for _ in range(count):
        with tempfile.TemporaryDirectory() as where:
            proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                   "--nproc-per-node", "2", TRAIN, "--deepspeed", Z0, "--steps", "4"],
                                  capture_output=True, text=True, cwd=where, timeout=600)
        seen["runs"] += 1
        seen["failed"] += proc.returncode != 0
        seen["aborted"] += aborted(proc.returncode, proc.stdout + proc.stderr)
    return seen


def stopped_benches(count: int) -> dict:
    seen = {"runs": 0, "not_130": 0, "aborted": 0}
    env = dict(os.environ, PYTHONPATH=ROOT)
    for _ in range(count):
        proc = subprocess.Popen([sys.executable, "-m", "clustercheck", "bench", "--max-bytes", "64M"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 120
        err = ""
        while "all_reduce" not in err and time.monotonic() < deadline and proc.poll() is None:
            err += proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        out, rest = proc.communicate(timeout=60)
        seen["runs"] += 1
        seen["not_130"] += proc.returncode != 130
        seen["aborted"] += aborted(proc.returncode, out + err + rest)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="plain local ZeRO-0 runs")
    parser.add_argument("--stops", type=int, default=10, help="bench runs stopped by SIGTERM")
    args = parser.parse_args()
    started = time.monotonic()
    print("zero0 runs:", zero0_runs(args.runs))
    print("benches stopped by SIGTERM:", stopped_benches(args.stops))
    print(f"wall: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
