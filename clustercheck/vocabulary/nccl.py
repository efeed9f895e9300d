"""NCCL's error space: `ncclResult_t` (src/nccl.h.in) with the text ncclGetErrorString gives (src/init.cc),
NVIDIA/nccl at 5067397c2676d5aed50042fc39e5c8ee96eb0027; and the families of its `NCCL WARN` lines, each
naming the space its cause lives in (a CUDA failure, a socket's errno, /dev/shm, an InfiniBand completion)."""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional, Tuple

RESULTS = {   # number -> (name, text, kind)
    1: ("ncclUnhandledCudaError", "unhandled cuda error", "nccl"),
    2: ("ncclSystemError", "unhandled system error", "nccl"),
    3: ("ncclInternalError", "internal error", "nccl"),
    4: ("ncclInvalidArgument", "invalid argument", "nccl"),
    5: ("ncclInvalidUsage", "invalid usage", "nccl"),
    6: ("ncclRemoteError", "remote process exited or there was a network error", "nccl"),
    8: ("ncclTimeout", "timeout", "watchdog"),
}
BY_NAME = {name.lower(): (number, name, text, kind) for number, (name, text, kind) in RESULTS.items()}


class WarnFamily(NamedTuple):
    pattern: "re.Pattern[str]"
    space: str          # where the cause is read from: cuda, errno, or a kind directly
    kind: str           # the kind when the space adds nothing


# What the WARN lines of NCCL's transports and bootstrap say, by the code that prints them (src/transport/*,
# src/misc/socket.cc, src/misc/shmutils.cc, src/include/checks.h).
WARN_FAMILIES: List[WarnFamily] = [
    WarnFamily(re.compile(r"Cuda failure '([^']+)'|Cuda failure (\d+) '([^']+)'"), "cuda", "nccl"),
    WarnFamily(re.compile(r"failed to extend (/dev/shm\S*)|Error while creating shared memory segment|"
                          r"shm_open|/dev/shm/nccl"), "kind", "shm"),
    WarnFamily(re.compile(r"(?:socketPollConnect|socketStartConnect|socketConnect|Call to connect|Connect to \S+ "
                          r"failed|ncclSocketConnect|bootstrap)\b.*?(?:returned|:)\s*([A-Z][a-z][\w ]+)"), "errno",
               "network"),
    WarnFamily(re.compile(r"NET/IBP?\s*:.*(?:completion|status|error)|ibv_\w+ failed|Call to ibv_\w+ failed"), "kind",
               "ib"),
    WarnFamily(re.compile(r"Duplicate GPU detected"), "kind", "duplicate-gpu"),
]


def result(line: str) -> Optional[Tuple[int, str, str, str]]:
    """The ncclResult_t a line names (by name, or by ncclGetErrorString's text after "NCCL error")."""
    match = re.search(r"\b(nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|"
                      r"RemoteError|Timeout))\b", line)
    if match:
        return BY_NAME[match.group(1).lower()]
    match = re.search(r"NCCL (?:error|Error)[^:]*:\s*(.+)", line)
    if match:
        said = match.group(1).lower()
        for number, (name, text, kind) in RESULTS.items():
            if said.startswith(text) or f", {text}" in said or f"{text} " in said[:len(text) + 1]:
                return number, name, text, kind
    return None


def warn_family(line: str) -> Optional[Tuple[WarnFamily, "re.Match[str]"]]:
    if "NCCL WARN" not in line and " WARN " not in line and "NCCL" not in line:
        return None
    for family in WARN_FAMILIES:
        match = family.pattern.search(line)
        if match:
            return family, match
    return None
