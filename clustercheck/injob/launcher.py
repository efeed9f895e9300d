"""Where this rank stands in the job: rank, world, local rank and the rendezvous, read from the variables the
launcher set (torch.distributed's env:// ones), with the fallbacks each launcher needs; bad input said before
any collective.

- torchrun (and DeepSpeed's and accelerate's launchers, which start torchrun-style workers): RANK, WORLD_SIZE,
  LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
- Kubeflow's PyTorchJob (training-operator, pkg/controller.v1/pytorch/envvar.go and elastic.go): MASTER_ADDR,
  MASTER_PORT, WORLD_SIZE and RANK on every pod; with torchrun in the pod, PET_NNODES, PET_NPROC_PER_NODE,
  PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT are torchrun's own arguments, and torchrun sets the
  worker's RANK / WORLD_SIZE / LOCAL_RANK from them (the pod's RANK is then a node rank, not a rank).
- srun starting the ranks itself: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR / MASTER_PORT
  exported by the batch script (Slurm has no rendezvous address of its own).
Pure: reads a mapping, no I/O.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from clustercheck.core.errors import InputError

SOURCE = "the launcher's environment"


@dataclass(frozen=True)
class JobEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    host: str                 # this rank's node, as the report names it
    launcher: str             # which variables were read: "torchrun", "pytorchjob", "srun"

    @property
    def node_leader(self) -> bool:
        """Local rank 0: the rank that runs the node-level probes."""
        return self.local_rank == 0


def _number(env: Mapping[str, str], name: str, low: int = 0) -> int:
    text = env.get(name, "")
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{name} is not a whole number", SOURCE, value=text) from None
    if value < low:
        raise InputError(f"{name} must be at least {low}", SOURCE, value=text)
    return value


def _first(env: Mapping[str, str], *names: str) -> Tuple[Optional[str], str]:
    for name in names:
        if env.get(name, "").strip():
            return env[name].strip(), name
    return None, ""


def _ranks(env: Mapping[str, str]) -> Tuple[int, int, int, str]:
    """(rank, world size, local rank, launcher)."""
    if "RANK" in env and "WORLD_SIZE" in env:
        under_torchrun = "TORCHELASTIC_RUN_ID" in env or "LOCAL_RANK" in env
        nproc = env.get("PET_NPROC_PER_NODE", "1").strip()
        if not under_torchrun and nproc not in ("", "1"):
            raise InputError("PET_NPROC_PER_NODE asks for several processes per pod, but this process was not "
                             "started by torchrun (no LOCAL_RANK): RANK is the pod's index, not a rank; start the "
                             "pod's command with torchrun", SOURCE, value=nproc)
        launcher = "pytorchjob" if any(k.startswith("PET_") for k in env) else "torchrun"
        return (_number(env, "RANK"), _number(env, "WORLD_SIZE", 1),
                _number(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0, launcher)
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return (_number(env, "SLURM_PROCID"), _number(env, "SLURM_NTASKS", 1),
                _number(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0, "srun")
    missing = [n for n in ("RANK", "WORLD_SIZE") if n not in env]
    raise InputError(f"not started by a launcher: {' and '.join(missing)} not set (run it under torchrun, srun, "
                     "DeepSpeed's or accelerate's launcher, or a PyTorchJob)", SOURCE)


def read_job_env(env: Mapping[str, str], host: Optional[str] = None) -> JobEnv:
    """This rank's place in the job, or InputError naming the variable and its value."""
    rank, world, local_rank, launcher = _ranks(env)
    if rank >= world:
        raise InputError(f"rank {rank} is not below the world size {world}", SOURCE, value=f"RANK={rank}")
    addr, _ = _first(env, "MASTER_ADDR", "PET_MASTER_ADDR")
    if addr is None:
        raise InputError("MASTER_ADDR is not set (the rendezvous host every rank connects to)", SOURCE)
    port_text, port_name = _first(env, "MASTER_PORT", "PET_MASTER_PORT")
    if port_text is None:
        raise InputError("MASTER_PORT is not set (the rendezvous port every rank connects to)", SOURCE)
    port = _number({port_name: port_text}, port_name, 1)
    if port > 65535:
        raise InputError(f"{port_name} is not a port", SOURCE, value=port_text)
    name = host or env.get("CLUSTERCHECK_NODE") or socket.gethostname()
    return JobEnv(rank, world, local_rank, addr, port, name, launcher)
