"""NCCL's error space: `ncclResult_t` (src/nccl.h.in) with the text ncclGetErrorString gives (src/init.cc),
NVIDIA/nccl at 5067397c2676d5aed50042fc39e5c8ee96eb0027; and the families of its `NCCL WARN` lines, each
naming the space its cause lives in (a CUDA failure, a socket's errno, /dev/shm, an InfiniBand completion)."""

from __future__ import annotations

import re
from typing import List

from clustercheck.vocabulary.spaces import Row

RESULTS = {   # number -> (name, text, kind)
    1: ("ncclUnhandledCudaError", "unhandled cuda error", "nccl"),
    2: ("ncclSystemError", "unhandled system error", "nccl"),
    3: ("ncclInternalError", "internal error", "nccl"),
    4: ("ncclInvalidArgument", "invalid argument", "nccl"),
    5: ("ncclInvalidUsage", "invalid usage", "nccl"),
    6: ("ncclRemoteError", "remote process exited or there was a network error", "nccl"),
    8: ("ncclTimeout", "timeout", "watchdog"),
}
_SOURCE = "NVIDIA/nccl src/nccl.h.in ncclResult_t, src/init.cc ncclGetErrorString"
# torch: "NCCL error in: <file>:<line>, <ncclGetErrorString's text>", older "NCCL error: <text>"
ROWS: List[Row] = [Row("nccl", rf"\b{name}\b|NCCL [Ee]rror[^:\n]*:\s*(?:[^\n]*, )?{re.escape(text)}", kind, name,
                       _SOURCE) for name, text, kind in RESULTS.values()]

# What the WARN lines of NCCL's transports and bootstrap say, by the code that prints them (src/transport/*,
# src/misc/socket.cc, src/misc/shmutils.cc, src/include/checks.h). `via`: the space the cause is read in.
_WARN = "NVIDIA/nccl WARN lines: "
# the words below mean NCCL's only on a line where NCCL says an error: its WARN, torch's "NCCL error ...", the
# "Last error:" torch quotes; never its INFO (the retries it prints there, a dmabuf call it falls back from)
_GATE = r"(?:NCCL (?:WARN|[Ee]rror)|\bWARN\b|Last error:)[^\n]*"
ROWS += [
    Row("nccl-warn", r"(?:NCCL WARN|\.(?:cc|cu|h):\d+ WARN)[^\n]*Cuda failure", "nccl", "NCCL WARN Cuda failure",
        _WARN + "src/include/checks.h CUDACHECK: \"Cuda failure '%s'\"", via="cuda"),
    Row("nccl-warn", _GATE + r"(?:failed to extend (?:/dev/shm\S*)|Error while creating shared memory segment|shm_open|"
                     r"/dev/shm/nccl)", "shm", "NCCL WARN shm",
        _WARN + "src/misc/shmutils.cc: \"Error while creating shared memory segment %s (size %zu)\""),
    Row("nccl-warn", _GATE + r"(?:socketPollConnect|socketStartConnect|socketConnect|Call to connect|"
                             r"Connect to \S+ failed|"
                     r"ncclSocketConnect|bootstrap)\b[^\n]*(?:returned|:)\s*[A-Z][a-z][\w ]+", "network",
        "NCCL WARN socket", _WARN + "src/misc/socket.cc: \"socketPollConnect: connect returned %s\"", via="errno"),
    Row("nccl-warn", _GATE + r"(?:NET/IBP?\s*:[^\n]*(?:completion|status|error)|ibv_\w+ failed)", "ib",
        "NCCL WARN NET/IB", _WARN + "src/transport/net_ib.cc: \"NET/IB : Got completion from peer %s with error %d\"",
        via="rdma"),     # the completion status or verbs errno is read in rdma's table (ENOMEM: the memlock limit)
    # no interface of this node can reach the peer's (or the bootstrap's) address: a container on a bridge only,
    # NCCL_SOCKET_IFNAME on the wrong network, NCCL_COMM_ID naming an address of another subnet
    Row("nccl-warn", _GATE + r"(?:No interface found in the same subnet as remote address|"
                             r"No usable listening interface found)", "network", "NCCL no interface",
        _WARN + "src/misc/socket.cc: \"Net : No interface found in the same subnet as remote address %s\"; "
                "src/bootstrap.cc: \"NET/Socket : No usable listening interface found\""),
    # the bootstrap found no address to connect from or to: NCCL_SOCKET_IFNAME names an interface the node lacks
    Row("nccl-warn", r"ncclSocketInit: connecting to address \S* ?with family \d+ is neither AF_INET", "network",
        "NCCL socket family", _WARN + "src/misc/socket.cc ncclSocketInit: \"ncclSocketInit: connecting to address %s "
                                     "with family %d is neither AF_INET(%d) nor AF_INET6(%d)\""),
    Row("nccl-warn", r"Duplicate GPU detected", "duplicate-gpu", "NCCL WARN Duplicate GPU",
        _WARN + "src/init.cc: \"Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx\""),
]
