"""A small data-parallel training (tests/test_injob_watch.py, benchmarks/injob_watch.py): a few Linear layers under
DDP on Gloo, SGD, WATCH_STEPS steps, one line per rank with its median step time.

    torchrun --standalone --nproc-per-node 2 -m clustercheck.injob --watch -- watch_train.py
    WATCH_ALONE=1 torchrun --standalone --nproc-per-node 2 watch_train.py     # clustercheck.injob.watch() alone

One rank stopped at a step (a hang: WATCH_STOP_RANK, WATCH_STOP_AT, WATCH_STOP_S). One rank made slow from a step on: WATCH_SLOW_RANK, WATCH_SLOW_AFTER, and WATCH_SLOW_HOW "sleep" (WATCH_SLOW_S
more between its steps, as a slow data loader) or "compute" (its forward does the layers' work WATCH_SLOW_TIMES
more, as a slower device would). WATCH_PHASES=N (the benchmark): 2N phases of WATCH_STEPS steps, the watch off
and on in turn, each phase's median step time printed.
"""

import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import clustercheck.injob

WIDTH = int(os.environ.get("WATCH_WIDTH", "64"))
STEPS = int(os.environ.get("WATCH_STEPS", "200"))
SLOW_RANK = int(os.environ.get("WATCH_SLOW_RANK", "-1"))
SLOW_AFTER = int(os.environ.get("WATCH_SLOW_AFTER", "100"))
SLOW_HOW = os.environ.get("WATCH_SLOW_HOW", "sleep")
SLOW_S = float(os.environ.get("WATCH_SLOW_S", "0.02"))
SLOW_TIMES = int(os.environ.get("WATCH_SLOW_TIMES", "20"))
STOP_RANK = int(os.environ.get("WATCH_STOP_RANK", "-1"))     # this rank stops at WATCH_STOP_AT, before its
STOP_AT = int(os.environ.get("WATCH_STOP_AT", "0"))           # forward (and so before the step's all_reduce),
STOP_S = float(os.environ.get("WATCH_STOP_S", "300"))         # for WATCH_STOP_S: the others wait in it


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                                          torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 1))
        self.extra = 0           # the slowed rank's extra work in its forward

    def forward(self, x):
        for _ in range(self.extra):
            self.layers(x).sum().item()
        return self.layers(x)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if os.environ.get("WATCH_ALONE"):
        clustercheck.injob.watch(every=int(os.environ.get("WATCH_EVERY", "10")),
                                 slower=float(os.environ.get("WATCH_SLOWER", "1.3")),
                                 windows=int(os.environ.get("WATCH_WINDOWS", "2")),
                                 on_slow=os.environ.get("WATCH_ON_SLOW", "warn"))
    model = Model()
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    data = torch.randn(64, WIDTH)
    target = torch.randn(64, 1)
    phases = int(os.environ.get("WATCH_PHASES", "0"))
    watch = None
    try:
        for phase in range(2 * phases or 1):
            if phases:
                if phase % 2:
                    watch = clustercheck.injob.watch(every=20)
                elif watch is not None:
                    watch.stop()
            times = []
            for step in range(1, STEPS + 1):
                started = time.perf_counter()
                if rank == SLOW_RANK and step > SLOW_AFTER:
                    if SLOW_HOW == "sleep":
                        time.sleep(SLOW_S)
                    else:
                        model.extra = SLOW_TIMES
                if rank == STOP_RANK and step == STOP_AT:
                    print(f"STOPPED rank={rank} step={step}", flush=True)
                    time.sleep(STOP_S)
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(ddp(data), target)
                loss.backward()
                optimizer.step()
                times.append(time.perf_counter() - started)
            label = ("on" if phase % 2 else "off") if phases else "run"
            print(f"STEPS rank={rank} phase={phase} watch={label} median_s={statistics.median(times):.6f}",
                  flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
