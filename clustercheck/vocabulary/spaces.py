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
    warns: bool = False  # a cause even where it is printed as a warning (torch: "Setting the available devices to be zero")
    tier: int = -1      # a row that proves less than its kind (kinds.py's tiers): -1, the kind's own


# Which space is read first (lower first). A line is named by the first space any row of which matches it.
SPACES: Dict[str, int] = {
    "nccl-warn": 10,      # NCCL's WARN lines name the space their cause lives in
    "scheduler": 20,      # Slurm's verdict outranks what it interrupted
    "loader": 30,         # the dynamic loader's own words, before the ImportError / OSError around them
    "hub": 40,            # the Hugging Face hub, before the socket errno it carries
    "deepspeed": 50,      # DeepSpeed's config assertions
    "cuda-init": 60,      # torch's CUDA initialization warnings
    "cuda": 70,           # cudaError_t and CUresult
    "cuda-libs": 80,      # cuBLAS, cuDNN, cuFFT, cuSOLVER, cuRAND status codes
    "nvml": 90,           # NVML's nvmlReturn_t and nvidia-smi
    "errno": 100,         # the platform's errno
    "c10d": 110,          # torch.distributed's store, rendezvous and watchdog; torchelastic
    "signal": 120,        # how a process ended
    "nccl": 130,          # ncclResult_t
    "python": 140,        # Python's import machinery and interpreter
    "torch": 150,         # torch's own checks: DDP's reducer, load_state_dict, devices, shapes
    "ssh": 160,
    "clustercheck": 170,  # the project's own patterns (a build, a loss, Gloo's words), read when no space names it
}


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
