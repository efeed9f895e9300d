"""What a row of the vocabulary's table is (space, what it matches, kind, code, the source it is taken from), the
spaces' order, and the check that fails the import where the table contradicts itself: a row naming a kind or a
space that does not exist, two rows of one space that collide (one pattern, or one code leading to two kinds), a
pattern RE2 cannot run (explain's prefilter is built from the rows)."""

from __future__ import annotations

import re
from typing import Dict, Iterable, NamedTuple, Tuple

from clustercheck.vocabulary.kinds import KINDS


class Row(NamedTuple):
    space: str
    match: str          # a regular expression RE2 and Python's re both run (no lookaround, no backreference)
    kind: str           # kinds.py
    code: str           # the space's own name for it: cudaErrorIllegalAddress, ENOSPC, NVML_ERROR_GPU_IS_LOST ...
    source: str         # the header, function or documented message the row is built from
    via: str = ""       # a space the cause lives in (NCCL's "Cuda failure '<text>'"): read the line there first
    warns: bool = False  # a cause even where printed as a warning (torch: "Setting the available devices to be zero")
    tier: int = -1      # a row that proves less than its kind (kinds.py's tiers): -1, the kind's own


class Space(NamedTuple):
    order: int          # which space is read first (lower first): a line is named by the first space that names it
    source: str         # where its rows come from


SPACES: Dict[str, Space] = {
    # NCCL's WARN lines name the space their cause lives in
    "nccl-warn": Space(10, "NVIDIA/nccl's WARN lines (src/transport/*, src/misc/socket.cc, shmutils.cc, checks.h)"),
    # Slurm's verdict outranks what it interrupted
    "scheduler": Space(20, "Slurm's slurmstepd (src/slurmd/slurmstepd/req.c), srun and task/cgroup messages"),
    # MPI launchers' and PMIx's help texts: the launcher's verdict on starting the ranks
    "mpi": Space(25, "Open MPI's, PRRTE's and PMIx's help-*.txt texts, MPICH / Hydra's messages"),
    # the trainer frameworks around torch: their own checks name the setting
    "trainers": Space(55, "PyTorch Lightning's MisconfigurationException texts, accelerate's and the HF Trainer's "
                          "checks, LLaMA-Factory's, DeepSpeed's launcher and multinode runner, torchrun's arguments"),
    # RDMA: rdma-core's completion statuses and verbs calls, RDMA-CM, UCX; NCCL's NET/IB WARNs read through them
    "rdma": Space(88, "rdma-core's ibv_wc_status_str table and verbs calls, RDMA-CM, UCX's ucs_status_string"),
    # storage and serialization: torch.save / torch.load, safetensors, filelock, NFS
    "storage": Space(97, "torch's serialization (torch/serialization.py, caffe2/serialize/inline_container.cc), "
                         "safetensors, filelock, NFS"),
    # the dynamic loader's own words, before the ImportError / OSError around them
    "loader": Space(30, "glibc's dynamic loader (elf/dl-load.c, dl-version.c, dl-lookup.c)"),
    # the Hugging Face hub, before the socket errno it carries
    "hub": Space(40, "huggingface_hub's errors.py and file_download.py, transformers' utils/hub.py"),
    "deepspeed": Space(50, "DeepSpeed's config checks (deepspeed/runtime/config.py, zero/config.py, config_utils.py) "
                           "and transformers' DeepSpeed integration"),
    "cuda-init": Space(60, "torch's CUDA initialization warnings (c10/cuda/CUDAFunctions.cpp, torch/cuda/__init__.py)"),
    "cuda": Space(70, "CUDA's cudaError_t (driver_types.h, cudaGetErrorString) and CUresult (cuda.h)"),
    "cuda-libs": Space(80, "cuBLAS, cuDNN, cuFFT, cuSOLVER and cuRAND status codes (their headers)"),
    "xid": Space(85, "the NVIDIA driver's Xid events (NVRM: Xid lines, NVIDIA's Xid catalogue)"),
    "nvml": Space(90, "NVML's nvmlReturn_t (nvml.h, nvmlErrorString) and nvidia-smi's messages and exit codes"),
    "kernel": Space(95, "the Linux kernel's own log lines (dmesg): net/core/neighbour.c, net/ipv4/route.c"),
    # OpenSSH's own words, before the errno they carry ("ssh: connect to host h port 22: Connection refused" is
    # the launcher's login that failed, "Permission denied (publickey)" a key, not a file's mode)
    "ssh": Space(99, "OpenSSH's messages and launchers' ssh checks"),
    "errno": Space(100, "the platform's errno (Python's errno, os.strerror)"),
    "c10d": Space(110, "torch.distributed's store, rendezvous and watchdog (c10d, torchelastic)"),
    "signal": Space(120, "the platform's signals (Python's signal) as launchers and the shell print them"),
    "nccl": Space(130, "NCCL's ncclResult_t (src/nccl.h.in, ncclGetErrorString)"),
    "python": Space(140, "CPython's import machinery and interpreter, argparse"),
    "torch": Space(150, "torch's own checks: DDP's reducer, load_state_dict, FSDP, DataLoader workers, devices"),

    # the project's own patterns (a build, a loss, Gloo's words), read when no space names the line
    "clustercheck": Space(170, "clustercheck's own patterns, from the failure logs of tests/data"),
}
assert len({space.order for space in SPACES.values()}) == len(SPACES), "two spaces share an order"


class VocabularyError(AssertionError):
    """The table contradicts itself: a row names a kind or space that does not exist, or two rows collide."""


def check(rows: Iterable[Row]) -> None:
    """Fail (VocabularyError, naming the row) where the table cannot be trusted."""
    patterns: Dict[Tuple[str, str], Row] = {}
    codes: Dict[Tuple[str, str], Row] = {}
    for row in rows:
        if row.kind not in KINDS:
            raise VocabularyError(f"row {row.code!r} of space {row.space!r} names kind {row.kind!r}, "
                                  f"which kinds.py does not define")
        if row.space not in SPACES or (row.via and row.via not in SPACES):
            raise VocabularyError(f"row {row.code!r} names space {row.space!r} / {row.via!r}, not in SPACES")
        other = patterns.get((row.space, row.match))
        if other:
            raise VocabularyError(f"rows {other.code!r} and {row.code!r} of space {row.space!r} have one pattern")
        other = codes.get((row.space, row.code))
        if other and other.kind != row.kind:
            raise VocabularyError(f"code {row.code!r} of space {row.space!r} leads to {other.kind!r} and "
                                  f"{row.kind!r}")
        patterns[(row.space, row.match)] = codes[(row.space, row.code)] = row
        if re.search(r"\(\?[=!<]|\\[1-9]|\(\?[aiLmsux]+\)", row.match):
            raise VocabularyError(f"row {row.code!r} of space {row.space!r}: a lookaround, a backreference or a "
                                  f"global flag (rows are joined: scope it, (?i:...))")
        re.compile(row.match)
