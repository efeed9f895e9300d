"""The GPU battery: every GPU path of clustercheck on a real GPU machine, its outputs kept for tests/data.

    python benchmarks/gpu.py --out /tmp/gpu-run        # on a machine with an NVIDIA GPU and CUDA torch

Runs, each as a user would (a fresh `clustercheck` process, this machine as a one-node cluster), and keeps
every output under --out/<gpu model>-<date>/:
1. `nvidia-smi -q -x` and `nvidia-smi -q` of this machine, and `env --deep --json` (the probe through pynvml):
   the two GPU readings compared field by field (name, memory, ECC, throttle, MIG);
2. `device --json`: matmul per dtype, copies, host link, peers, against the cited figure for the model;
3. `node-check -v`, and `node-check -v --load 10` (the Slurm health program; its quick load: PCIe under load, GEMM);
   `benchmarks/device.py` (the probe's matmul per dtype and copy against a bare torch loop on this GPU);
4. `bench --json` with NCCL on the GPUs of this machine (one rank per GPU; one GPU: the code path);
5. `smoke --json` in every mode (ddp, zero1, zero2, zero3, zero3-offload, fsdp) with bf16, on CUDA;
6. `plan --json` for the smoke model (the 1b preset) against torch.cuda.max_memory_allocated the smoke runs
   reported (smoke-peaks.json).
Prints one table: what ran, its exit code and its headline figure. Nothing here is judged for the tests;
the files are what new tests are written from (tests/data/README.md names each with the GPU and date).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
from typing import Dict, List, Tuple

MODES = ("ddp", "zero1", "zero2", "zero3", "zero3-offload", "fsdp")


def run(argv: List[str], out_dir: str, name: str, timeout: int = 900) -> Tuple[int, str]:
    """Run argv, keep its stdout and stderr as name.out / name.err, return (exit code, stdout)."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout, stderr = 124, exc.stdout or "", f"timed out after {timeout} s"
    except OSError as exc:
        code, stdout, stderr = 127, "", str(exc)
    for suffix, text in (("out", stdout), ("err", stderr)):
        with open(os.path.join(out_dir, f"{name}.{suffix}"), "w") as handle:
            handle.write(text if isinstance(text, str) else text.decode(errors="replace"))
    return code, stdout if isinstance(stdout, str) else stdout.decode(errors="replace")


def clustercheck(*args: str) -> List[str]:
    return [sys.executable, "-m", "clustercheck", *args]


def gpu_model() -> str:
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], stdout=subprocess.PIPE,
                              text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        name = "unknown-gpu"
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()


def headline(stdout: str) -> str:
    try:
        doc = json.loads(stdout)
    except ValueError:
        lines = [line for line in stdout.splitlines() if line.strip()]
        return lines[-1][:100] if lines else ""
    bad = [f["summary"] for f in doc.get("findings", []) if f.get("status") not in ("OK", None)]
    return (bad[0] if bad else doc.get("verdict", "") or "all OK")[:100]


def peaks(out_dir: str) -> Dict[str, float]:
    """mode -> the peak GPU memory (MB) the smoke run reported."""
    found = {}
    for mode in MODES:
        try:
            with open(os.path.join(out_dir, f"smoke-{mode}.out")) as handle:
                found[mode] = json.load(handle)["summary"]["peak_mem_mb"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-battery")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    out_dir = os.path.join(args.out, f"{gpu_model()}-{datetime.date.today().isoformat()}")
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    steps = [("nvidia-smi-q-x", ["nvidia-smi", "-q", "-x"]), ("nvidia-smi-q", ["nvidia-smi", "-q"]),
             ("nvidia-smi-topo-m", ["nvidia-smi", "topo", "-m"]),
             ("env-deep", clustercheck("env", "--deep", "--json")),
             ("device", clustercheck("device", "--json", "--seconds", "20")),
             ("node-check", clustercheck("node-check", "-v")),
             ("node-check-load", clustercheck("node-check", "-v", "--load", "10")),
             ("device-benchmark", [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                "device.py"), "--repeat", "5"]),
             ("bench", clustercheck("bench", "--json"))]
    steps += [(f"smoke-{mode}", clustercheck("smoke", "--json", "--mode", mode, "--precision", "bf16", "--preset",
                                             "1b", "--steps", str(args.steps))) for mode in MODES]
    for name, argv in steps:
        code, stdout = run(argv, out_dir, name)
        rows.append((name, code, headline(stdout)))
    code, stdout = run(clustercheck("plan", "--json", "--params", "1B", "--gpus-per-node", "1"), out_dir, "plan")
    rows.append(("plan", code, headline(stdout)))
    with open(os.path.join(out_dir, "smoke-peaks.json"), "w") as handle:
        json.dump(peaks(out_dir), handle, indent=1)
    print(f"GPU battery: outputs in {out_dir}\n")
    print("| step | exit | headline |")
    print("|---|---|---|")
    for name, code, text in rows:
        print(f"| {name} | {code} | {text} |")


if __name__ == "__main__":
    main()
