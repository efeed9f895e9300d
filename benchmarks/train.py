"""The reference trainer's overhead, the cost of smoke's verdict, and `clustercheck smoke` end to end.

    python benchmarks/train.py                 # step times and the verdict's cost (no root needed)
    sudo python benchmarks/train.py --smoke    # also smoke zero2 on a 2-node sandbox "btrn"

1. The tiny preset's step time in reference_train (mode ddp, one process under torchrun,
   its own training-loop timer) against a bare PyTorch loop over the same model, data,
   batch and optimizer in this process, in the same run (target, issue 6: at most 1.10x).
2. The verdict's extra work (issue 12: at most 1.3x): what smoke runs to judge (the run with
   its single-process reference curve and a checkpoint, then the resume in fresh processes)
   against a bare torchrun of the same trainer, steps and ranks (2 local ranks, Gloo), wall
   time of the torchrun processes, in the same run.
3. `clustercheck smoke --mode zero2` on 2 sandbox nodes, start to verdict (target: under
   90 s on this 2-core machine; DeepSpeed's ops must be compiled already, as after the
   tests or one earlier run).
Medians of --repeat runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "reference_train"))

import torch  # noqa: E402
from data import ByteWindows, generated_corpus  # noqa: E402
from model import build  # noqa: E402

STEPS, MICRO_BATCH = 300, 8


def bare_loop_step_s() -> float:
    """The same model, data and AdamW, no torch.distributed, no wrapper: the floor."""
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    model = build("tiny")
    dataset = ByteWindows(generated_corpus(seed=1234), model.config.block_size)
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(1234)).tolist()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    start = time.perf_counter()
    for step in range(STEPS):
        pairs = [dataset[i] for i in order[step * MICRO_BATCH % len(order):][:MICRO_BATCH]]
        inputs, targets = torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs])
        loss = model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)   # as the trainer does in every mode
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()
    return (time.perf_counter() - start) / STEPS


def trainer_step_s() -> float:
    with tempfile.TemporaryDirectory() as work:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                               os.path.join(HERE, "..", "reference_train", "train.py"), "--mode", "ddp",
                               "--steps", str(STEPS), "--micro-batch", str(MICRO_BATCH), "--log-every", str(STEPS)],
                              capture_output=True, text=True, cwd=work, env=dict(os.environ, OMP_NUM_THREADS="1"))
    summary = [json.loads(line) for line in proc.stdout.splitlines() if '"summary"' in line]
    if not summary:
        raise SystemExit(f"the trainer failed: {proc.stderr[-800:]}")
    return summary[0]["elapsed_s"] / STEPS


def torchrun_s(work: str, mode: str, steps: int, *args: str) -> float:
    """Wall time of one torchrun of the trainer with 2 local ranks."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           os.path.join(HERE, "..", "reference_train", "train.py"), "--mode", mode,
                           "--steps", str(steps), "--log-every", "3", *args],
                          capture_output=True, text=True, cwd=work, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode != 0:
        raise SystemExit(f"the trainer failed: {proc.stderr[-800:]}")
    return time.perf_counter() - start


def verdict_s(mode: str, steps: int = 30) -> "tuple[float, float, float]":
    """(bare torchrun, the run with the reference and the checkpoint, the resume): smoke's own arguments."""
    from clustercheck.stages.smoke.gather import trainer_args
    from clustercheck.stages.smoke.options import SmokeOptions
    options = SmokeOptions(mode=mode, steps=steps)
    with tempfile.TemporaryDirectory() as work:
        bare = torchrun_s(work, mode, steps)
        judged = torchrun_s(work, mode, steps, *trainer_args(options, "ckpt")[6:])
        resumed = torchrun_s(work, mode, steps, *trainer_args(options, "ckpt", resume=True)[6:])
    return bare, judged, resumed


def smoke_s() -> float:
    from clustercheck.sandbox import Sandbox, down
    box = Sandbox.up(2, "btrn")
    try:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "clustercheck", "smoke", box.nodes_file, "-F", box.ssh_config,
                               "--python", sys.executable, "--mode", "zero2"], capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"smoke failed:\n{proc.stdout[-1500:]}")
        return wall
    finally:
        down("btrn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="also time smoke on a 2-node sandbox (root)")
    args = parser.parse_args()
    bare, trainer = [], []
    for _ in range(args.repeat):   # interleaved, so both see the same machine
        bare.append(bare_loop_step_s())
        trainer.append(trainer_step_s())
    b, t = statistics.median(bare), statistics.median(trainer)
    print(f"train benchmark: tiny preset, micro-batch {MICRO_BATCH}, {STEPS} steps, 1 thread, medians of "
          f"{args.repeat}\n")
    print("| measure | ms per step | ratio | target |")
    print("|---|---|---|---|")
    print(f"| bare PyTorch loop, same model and data | {b * 1000:.2f} | 1.00x | |")
    print(f"| reference_train --mode ddp, 1 process under torchrun | {t * 1000:.2f} | {t / b:.2f}x | <= 1.10x |")
    print("\n| smoke's runs, 30 steps, 2 local ranks (Gloo) | ms, whole torchrun | ratio to bare | target |")
    print("|---|---|---|---|")
    for mode in ("ddp", "zero2"):
        runs = [verdict_s(mode) for _ in range(max(1, args.repeat // 2))]
        bare_s, judged_s, resumed_s = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"| {mode}: bare torchrun | {bare_s * 1000:.0f} | 1.00x | |")
        print(f"| {mode}: the run with the reference curve and the checkpoint | {judged_s * 1000:.0f} | "
              f"{judged_s / bare_s:.2f}x | |")
        print(f"| {mode}: + the resume in fresh processes (a second torchrun) | {(judged_s + resumed_s) * 1000:.0f} | "
              f"{(judged_s + resumed_s) / bare_s:.2f}x | <= 1.3x |")
    if args.smoke:
        walls = [smoke_s() for _ in range(3)]
        print(f"| `clustercheck smoke --mode zero2`, 2 sandbox nodes, start to verdict | "
              f"{statistics.median(walls) * 1000:.0f} | {statistics.median(walls):.1f} s | < 90 s |")


if __name__ == "__main__":
    main()
