"""Checkpoints: each rank saves and reloads what it owns, so the check needs no shared filesystem.

DeepSpeed writes its per-rank shards (and, on a disk per node, each node's model states);
FSDP writes one file per rank (that rank's shards); DDP, whose ranks all hold the same state,
one file per node, written by its first local rank (renamed into place: on a shared disk the
nodes' copies are the same bytes).
"""

import errno
import os

import torch
import torch.distributed as dist
from checks import node_name


def state_file(args, directory, tag) -> str:
    name = "replica.pt" if args.mode == "ddp" else f"rank_{dist.get_rank()}.pt"
    return os.path.join(directory, tag, name)


FULL_BYTES = 1 << 20   # a failed write with less than this free: the disk (or its quota) is full


def save(args, directory, step, module, optimizer, engine):
    """Save the checkpoint; a write that fails on a full disk says so (torch.save reports only
    "file write failed" or "unexpected pos"), naming the directory, the node and what is free."""
    try:
        _write(args, directory, step, module, optimizer, engine)
    except (OSError, RuntimeError) as exc:
        why = _why_not_written(directory, step)
        if why is None:
            raise
        raise why from exc
    dist.barrier()


def written_bytes(directory, step) -> int:
    """Bytes of the checkpoint of `step` as this node sees them (on a disk per node: its own ranks' files)."""
    total = 0
    for root, _, files in os.walk(os.path.join(directory, f"step_{step}")):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def _why_not_written(directory, step):
    """The filesystem's reason a write failed, as the OSError the write itself did not raise (or None)."""
    try:
        stat = os.statvfs(directory)
    except OSError:
        return None
    where = f"{directory} on {node_name()}"
    if stat.f_flag & os.ST_RDONLY:
        return OSError(errno.EROFS, f"Read-only file system: {where} is mounted read-only (saving step {step})")
    if not os.access(directory, os.W_OK):
        return PermissionError(errno.EACCES, f"Permission denied: {where} is not writable by uid {os.getuid()} "
                                             f"(saving step {step})")
    free = stat.f_bavail * stat.f_frsize
    if free < FULL_BYTES:
        return OSError(errno.ENOSPC, f"No space left on device: {where} has {free} bytes free of "
                                     f"{stat.f_blocks * stat.f_frsize} (saving step {step})")
    return None


def _write(args, directory, step, module, optimizer, engine):
    tag = f"step_{step}"
    if engine is not None:
        engine.save_checkpoint(directory, tag=tag, client_state={"step": step})
    else:
        from torch.distributed.checkpoint.state_dict import get_state_dict   # only for a checkpoint without DeepSpeed
        model_state, optim_state = get_state_dict(module, optimizer)
        os.makedirs(os.path.join(directory, tag), exist_ok=True)
        if args.mode != "ddp" or int(os.environ.get("LOCAL_RANK", "0")) == 0:
            path = state_file(args, directory, tag)
            # the node's name in the temporary name: on a shared filesystem two nodes' writers may have one pid
            # (containers, PID namespaces), and one would rename the other's file away
            temporary = f"{path}.{node_name()}.{os.getpid()}"
            torch.save({"model": model_state, "optimizer": optim_state, "step": step}, temporary)
            os.replace(temporary, path)
        if dist.get_rank() == 0:
            with open(os.path.join(directory, "latest"), "w") as handle:
                handle.write(tag)


def load(args, directory, module, optimizer, engine) -> int:
    """Load the latest checkpoint; returns the step it was taken at (0 if there is none).

    Rank 0 names it (its node holds `latest`); every rank then reads its own part."""
    holder = [None]
    if dist.get_rank() == 0 and os.path.exists(os.path.join(directory, "latest")):
        with open(os.path.join(directory, "latest")) as handle:
            holder[0] = handle.read().strip()
    dist.broadcast_object_list(holder, 0)
    tag = holder[0]
    if tag is None:
        return 0
    if engine is not None:
        path, client_state = engine.load_checkpoint(directory, tag=tag)
        if path is None:
            raise RuntimeError(f"checkpoint {tag} not found in {directory} on {node_name()}")
        return int(client_state["step"])
    from torch.distributed.checkpoint.state_dict import set_state_dict   # as above
    state = torch.load(state_file(args, directory, tag), map_location="cpu", weights_only=False)
    set_state_dict(module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return int(state["step"])
