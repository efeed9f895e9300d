"""What the trainer measures so that a run's verdict can be trusted, beside the training itself.

- storage: is the checkpoint directory one filesystem for every node, or a disk per node?
- reference: the loss curve one process computes for the same global batch and seed; the
  distributed run must follow it (a wrong learning rate on one rank, a corrupted all-reduce
  or a desynchronised sampler cannot).
- rank_stats: each rank's own step and forward times, gathered with its node's name, so a
  straggler is named.
"""

import json
import math
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

REFERENCE_MAX_SEQUENCES = 512   # a global batch beyond this is too much for one rank to recompute
REFERENCE_MAX_PARAMETERS = 50_000_000   # and a model beyond this (--model): the reference runs on rank 0's CPU


def node_name() -> str:
    """The node as the inventory names it (clustercheck passes it), else its hostname."""
    return os.environ.get("CLUSTERCHECK_NODE") or socket.gethostname()


def gather(value):
    """Every rank's value, in rank order."""
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def storage(directory: str) -> dict:
    """Global rank 0 writes a token into `directory`; every node looks for it.

    shared: every node sees it (one filesystem); local: only rank 0's node (a disk per node);
    mixed: some nodes see it and some do not (mounts differ between nodes).
    """
    os.makedirs(directory, exist_ok=True)
    token = os.path.join(directory, ".clustercheck-token")
    nonce = [f"{node_name()}-{os.getpid()}-{time.time()}" if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(nonce, 0)
    if dist.get_rank() == 0:
        with open(token, "w") as handle:
            handle.write(nonce[0])
    dist.barrier()
    try:
        with open(token) as handle:
            seen = handle.read() == nonce[0]
    except OSError:
        seen = False
    views = gather((node_name(), seen))
    dist.barrier()
    if int(os.environ.get("LOCAL_RANK", "0")) == 0 and os.path.exists(token):
        try:
            os.unlink(token)
        except OSError:
            pass
    by_node = {}
    for node, saw in views:
        by_node[node] = by_node.get(node, True) and saw
    seeing = sorted(n for n, saw in by_node.items() if saw)
    kind = "shared" if len(seeing) == len(by_node) else "local" if seeing == [views[0][0]] else "mixed"
    return {"event": "storage", "directory": os.path.abspath(directory), "kind": kind,
            "nodes_seeing": seeing, "nodes_not_seeing": sorted(set(by_node) - set(seeing))}


def reference_losses(build_model, seed: int, batches, steps: int, lr: float, clip: float) -> list:
    """The loss curve of one process over the whole global batch of each step (no distribution).

    The model starts from the same weights (the same seed); batches(step) gives every rank's
    micro-batches of that step, concatenated: the mean loss over them, and its gradient, are
    what the distributed run averages across ranks.
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for step in range(steps):
        inputs, targets = batches(step)
        loss = model(inputs, targets)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses


class RankClock:
    """This rank's own times: the whole step, and the forward pass (local compute in DDP and ZeRO-1/2)."""

    def __init__(self, device):
        self.device = device
        self.steps, self.forwards = [], []

    def now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def stats(self, samples_per_step: int, tokens_per_step: int) -> dict:
        def median(values):
            ordered = sorted(values)
            return ordered[len(ordered) // 2] if ordered else None
        step_s = median(self.steps[1:] or self.steps)   # the first step warms up
        return {"rank": dist.get_rank(), "node": node_name(),
                "step_ms": round(step_s * 1e3, 3) if step_s else None,
                "forward_ms": round(median(self.forwards[1:] or self.forwards) * 1e3, 3) if self.forwards else None,
                "samples_per_s": round(samples_per_step / step_s, 2) if step_s else None,
                "tokens_per_s": round(tokens_per_step / step_s, 1) if step_s else None}


def first_nonfinite(value: float, step: int, found):
    """(step, value) of the first loss that is NaN or infinite on this rank, else what was found."""
    if found is None and not math.isfinite(value):
        return (step, "nan" if math.isnan(value) else "inf")
    return found


def log(event: dict) -> None:
    """Rank 0's event, one line in one write: print() writes the text and its newline apart under
    PYTHONUNBUFFERED=1, and another rank's warning on the same stdout could land between them."""
    if dist.get_rank() == 0:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()
