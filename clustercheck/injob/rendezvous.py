"""The check's place in the job's process group: the job's own group when the script already made one, else
one made here from the launcher's variables (and destroyed before the script makes its own); and a key-value
store under the check's own prefix, where every rank posts who it is, its documents and reads the verdict.

Everything here is bounded by the check's deadline: a rank that never arrives, or stops answering, is named
from what it posted (rank and host) by the others, who go on. Nothing the job's own init_process_group uses
is touched: our keys live under a prefix of their own, in a store the check leaves behind only when the
job made it.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

from clustercheck.injob.launcher import JobEnv

PREFIX = "clustercheck-injob"
POLL_S = 0.2
SETTLE_S = 0.2   # see leave()
_calls = [0]      # checks run in this process: each gets keys of its own (every rank makes the same calls)


class Deadline:
    def __init__(self, budget_s: float):
        self.budget_s = budget_s
        self.started = time.monotonic()

    def left(self, least: float = 0.5) -> float:
        return max(least, self.budget_s - (time.monotonic() - self.started))

    def spent(self) -> float:
        return time.monotonic() - self.started

    def timedelta(self, least: float = 0.5) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.left(least))


@dataclass
class Joined:
    store: Any                # the check's keys, under its own prefix
    backend: str              # the job's: nccl on GPUs, gloo on CPUs
    made_group: bool          # the check made the default process group (and destroys it on leaving)
    device: torch.device
    rank0_hosts_store: bool = False   # the store's server lives in rank 0 (no torchrun agent hosts it)
    lost: str = ""                    # why the store stopped answering (its host is gone), once it has

    def post(self, key: str, value: Any) -> None:
        self.store.set(key, json.dumps(value, default=str))

    def fetch(self, key: str) -> Any:
        return json.loads(self.store.get(key).decode("utf-8"))

    def present(self, keys: List[str]) -> List[bool]:
        found = []
        for key in keys:
            try:
                found.append(not self.lost and bool(self.store.check([key])))
            except RuntimeError as exc:     # the store's host is gone: asked no more (each try prints a stack)
                self.lost = (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0][:200]
                found.append(False)
        return found

    def wait_for(self, keys: List[str], deadline: Deadline) -> List[bool]:
        """Which of `keys` were posted by the deadline (polled: a store wait cannot say which were missing); a
        store that went away ends the wait at once."""
        while True:
            found = self.present(keys)
            if all(found) or self.lost or deadline.left(0) <= 0:
                return found
            time.sleep(min(POLL_S, deadline.left(0)))


def backend_for_this_process() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def _address(job: JobEnv) -> str:
    host = f"[{job.master_addr}]" if ":" in job.master_addr else job.master_addr
    return f"tcp://{host}:{job.master_port}?rank={job.rank}&world_size={job.world_size}"


def join(job: JobEnv, deadline: Deadline) -> Joined:
    """The job's group if it has one, else one made here; the check's store either way. A rank that never
    arrives makes this raise (RuntimeError, or the store's timeout) within the deadline."""
    _calls[0] += 1
    prefix = f"{PREFIX}/{_calls[0]}"
    if dist.is_initialized():
        store = dist.PrefixStore(prefix, dist.distributed_c10d._get_default_store())
        backend = dist.get_backend()
        device = (torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu"))
        return Joined(store, backend, False, device)
    backend = backend_for_this_process()
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(job.local_rank)
        device = torch.device("cuda", job.local_rank)
    # torchrun's agent hosts the store where it runs (TORCHELASTIC_USE_AGENT_STORE): the rendezvous handler
    # connects to it; elsewhere rank 0 hosts it, as the script's own init_process_group will after us.
    base, _, _ = next(dist.rendezvous(_address(job), timeout=deadline.timedelta()))
    store = dist.PrefixStore(prefix, base)
    return Joined(store, backend, True, device,
                  rank0_hosts_store=os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true")


def wait_until_gone(joined: Joined, deadline: Deadline) -> None:
    """Where rank 0 hosts the store on MASTER_PORT, the script's own init_process_group will host a new one on
    the same port: a rank must not reach the old one. So the others, once they have the verdict, wait for rank
    0 to close it (their next store call fails) before they go on; bounded by the deadline."""
    if not (joined.made_group and joined.rank0_hosts_store):
        return
    # The closed connection is what we wait for, but c10d prints it to stderr as a failure with a C++ stack:
    # stderr is quiet for those few seconds (nothing else runs yet: the script has not started).
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as quiet:
            os.dup2(quiet.fileno(), 2)
        while deadline.left(0) > 0:
            try:
                joined.store.check(["verdict"])
            except RuntimeError:
                return
            time.sleep(POLL_S)
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def make_group(joined: Joined, job: JobEnv, deadline: Deadline) -> None:
    """The default group over the check's store (its keys under the check's prefix, never the job's)."""
    dist.init_process_group(joined.backend, store=dist.PrefixStore("group", joined.store), rank=job.rank,
                            world_size=job.world_size, timeout=deadline.timedelta())


def leave(joined: Optional[Joined]) -> None:
    """Destroy what the check made (the group; the store with it), nothing of the job's."""
    if joined is None or not joined.made_group:
        return
    if dist.is_initialized():
        time.sleep(SETTLE_S)   # Gloo's workers let the last collective's tensors go first (onnode/bench_worker.py)
        dist.destroy_process_group()
    joined.store = None
    if joined.backend == "nccl":
        torch.cuda.empty_cache()


def identity(job: JobEnv) -> Dict:
    return {"rank": job.rank, "host": job.host, "local_rank": job.local_rank, "pid": os.getpid()}
