"""A small data-parallel training (tests/test_injob_watch.py, benchmarks/injob_watch.py): a few Linear layers under
DDP on Gloo, SGD, WATCH_STEPS steps, one line per rank with its median step time.

    torchrun --standalone --nproc-per-node 2 -m clustercheck.injob --watch -- watch_train.py
    WATCH_ALONE=1 torchrun --standalone --nproc-per-node 2 watch_train.py     # clustercheck.injob.watch() alone

One rank stopped at a step (a hang: WATCH_STOP_RANK, WATCH_STOP_AT, WATCH_STOP_S); a set-up of WATCH_SETUP_S before
the model is built; WATCH_SUBGROUP=2,3,4,5: those ranks all_reduce in a group of their own after each step
(WATCH_STOP_IN=subgroup: the stopped rank stops before that one); WATCH_ODD_RANK: at WATCH_STOP_AT that rank
all_reduces WATCH_ODD_SIZES' first number of elements where the others give its second (4096,1024: Gloo aborts on
it; 8,4 among 6 ranks: the ring's pieces are too small for Gloo's check, and the ranks hang). One rank made slow from a step on: WATCH_SLOW_RANK,
WATCH_SLOW_AFTER, and WATCH_SLOW_HOW "sleep" (WATCH_SLOW_S more between its steps, as a slow data loader) or
"compute" (its forward does the layers' work WATCH_SLOW_TIMES more, as a slower device would) or "backward" (its
backward does a layer's work WATCH_SLOW_TIMES more, as a throttled CPU or device would there). WATCH_PHASES=N (the
benchmark): 2N phases of WATCH_STEPS steps, the watch off and on in turn, each phase's median step time printed.
"""

import gc
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
SETUP_S = float(os.environ.get("WATCH_SETUP_S", "0"))         # a set-up this long before the model (a checkpoint read)
SUBGROUP = [int(r) for r in os.environ.get("WATCH_SUBGROUP", "").split(",") if r]
STOP_IN = os.environ.get("WATCH_STOP_IN", "world")
ODD_RANK = int(os.environ.get("WATCH_ODD_RANK", "-1"))
ODD_SIZE, SIZE = (int(n) for n in os.environ.get("WATCH_ODD_SIZES", "4096,1024").split(","))


class HeavierBackward(torch.autograd.Function):
    """The identity forward; its backward does a layer's work `times` more, between the last layers' gradients and
    the first's."""

    @staticmethod
    def forward(ctx, x, times):
        ctx.times = times
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        for _ in range(ctx.times):
            (grad.t() @ grad).sum().item()
        return grad, None


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                                          torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 1))
        self.extra = 0           # the slowed rank's extra work in its forward
        self.extra_backward = 0  # and in its backward

    def forward(self, x):
        for _ in range(self.extra):
            self.layers(x).sum().item()
        first = self.layers[0](x)
        if self.extra_backward:
            first = HeavierBackward.apply(first, self.extra_backward)
        return self.layers[1:](first)


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
    time.sleep(SETUP_S)
    subgroup = dist.new_group(SUBGROUP) if SUBGROUP else None     # every rank makes it, as new_group requires
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
                    elif SLOW_HOW == "backward":
                        model.extra_backward = SLOW_TIMES
                    else:
                        model.extra = SLOW_TIMES
                if rank == STOP_RANK and step == STOP_AT and STOP_IN == "world":
                    print(f"STOPPED rank={rank} step={step}", flush=True)
                    time.sleep(STOP_S)
                if ODD_RANK >= 0 and step == STOP_AT:
                    dist.all_reduce(torch.ones(ODD_SIZE if rank == ODD_RANK else SIZE))
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(ddp(data), target)
                loss.backward()
                optimizer.step()
                if subgroup is not None and rank in SUBGROUP:
                    if rank == STOP_RANK and step == STOP_AT and STOP_IN == "subgroup":
                        print(f"STOPPED rank={rank} step={step} subgroup", flush=True)
                        time.sleep(STOP_S)
                    dist.all_reduce(torch.ones(4), group=subgroup)
                times.append(time.perf_counter() - started)
            label = ("on" if phase % 2 else "off") if phases else "run"
            print(f"STEPS rank={rank} phase={phase} watch={label} median_s={statistics.median(times):.6f}",
                  flush=True)
    finally:
        # Gloo's last collective let go before its group (a deadlock at the end otherwise: reference_train/train.py)
        del ddp, model
        time.sleep(0.2)
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
