"""One line read through every error space: the entry it shows, refined by its context.

The spaces are tried from the most specific to the most general (a scheduler's own verdict, NCCL's WARN
families, a CUDA error in any of its forms, torch.distributed's errors, an errno, a signal, NCCL's result codes,
Python's own exceptions, SSH). A line that only advises ("run with NCCL_DEBUG=INFO for details") shows nothing.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional, Tuple

from clustercheck.vocabulary import cuda, nccl, system
from clustercheck.vocabulary.kinds import KINDS


class Meaning(NamedTuple):
    kind: str          # kinds.py
    space: str         # cuda, nccl, errno, signal, torch, scheduler, python, ssh
    code: str          # cudaErrorIllegalAddress, ENOSPC, SIGBUS, ncclSystemError, DUE TO TIME LIMIT ...
    detail: str        # what the context adds ("" when nothing)

    @property
    def tier(self) -> int:
        return KINDS[self.kind].tier

    @property
    def summary(self) -> str:
        base = KINDS[self.kind].summary
        return f"{base}: {self.detail}" if self.detail else f"{base} ({self.code})"

    @property
    def remedy(self) -> str:
        return KINDS[self.kind].remedy


ADVICE = re.compile(r"\(?run with NCCL_DEBUG=\w+[^)]*\)?|NCCL_DEBUG=(?:INFO|WARN)(?: for details)?|"
                    r"TORCH_CPP_LOG_LEVEL=\w+|CUDA_LAUNCH_BLOCKING=1|TORCH_USE_CUDA_DSA")

# (space, pattern, kind, code): messages whose words are the entry (schedulers, torch.distributed, Python, SSH).
_MESSAGES = [
    ("scheduler", r"DUE TO TIME LIMIT|TimeLimit|time limit exceeded|Job \d+ exceeded (?:its )?time", "scheduler",
     "time limit"),
    ("scheduler", r"DUE TO PREEMPTION|[Pp]reempted\b|PREEMPTED", "scheduler", "preemption"),
    ("scheduler", r"(?:JOB|STEP) \d+(?:\.\d+)? ON \S+ CANCELLED AT|CANCELLED AT \S+ DUE TO", "scheduler", "cancelled"),
    ("scheduler", r"oom[-_]kill event|Exceeded job memory limit|OOM Killed|oom_kill", "killed", "oom-kill"),
    ("torch", r"Watchdog caught collective operation timeout|\bran for \d+ milliseconds before timing out|"
              r"ProcessGroupNCCL's watchdog got stuck", "watchdog",
     "collective timeout"),
    ("torch", r"Rendezvous(?:Timeout|Closed|Connection|State)Error|RendezvousTimeoutError", "rendezvous",
     "RendezvousError"),
    ("torch", r"DistStoreError|Timed out (?:after \d+ seconds )?waiting for clients|[Ss]tore[_ ]based[_ ]barrier|"
              r"Socket Timeout|client socket has timed out|TCPStore\b.*(?:timed out|timeout)|"
              r"The server socket has failed to listen|c10d\].*timed out|connect\(\) timed out", "rendezvous",
     "c10d store"),
    ("python", r"unrecognized arguments: --local[-_]rank", "launch-args", "--local-rank"),
    ("python", r"(?:ModuleNotFound|Import)Error\b|(?:ModuleNotFound|Import)Error(?=(?:ModuleNotFound|Import)Error)|"
               r"No module named '", "import", "ImportError"),
    ("python", r"^\s*(?:\S+:\s*)?MemoryError\b", "host-oom", "MemoryError"),
    ("torch", r"Expected all tensors to be on the same device|size mismatch for|shapes cannot be multiplied|"
              r"Expected (?:object of )?scalar type|must match the size of tensor|mat1 and mat2 shapes", "code",
     "tensor mismatch"),
    ("torch", r"torch\.(?:cuda\.)?OutOfMemoryError|CUDA out of memory", "oom", "OutOfMemoryError"),
    ("ssh", r"Permission denied \((?:publickey|password|gssapi)|Host key verification failed|"
            r"ssh: connect to host \S+ port \d+|ssh exited with exit code 255|ssh check has failed|"
            r"not reachable via ssh|'ssh [^']*' returned non-zero exit status 255", "ssh", "ssh"),
]
MESSAGES: List[Tuple[str, "re.Pattern[str]", str, str]] = [(space, re.compile(pattern), kind, code)
                                                           for space, pattern, kind, code in _MESSAGES]
# (kind, context, refined kind, what it means then): the same entry in another context is another cause.
_CONTEXT = [
    ("disk-full", r"/dev/shm|shared memory|shm_", "shm", "the full filesystem is /dev/shm"),
    ("crashed", r"DataLoader|\bworker \(pid|shared memory|/dev/shm|\bshm\b", "shm",
     "a DataLoader worker's shared memory (/dev/shm) ran out (SIGBUS)"),
    ("network", r"TCPStore|c10d|rendezvous|rdzv|store", "rendezvous", "the rendezvous store could not be reached"),
    ("missing-file", r"\.so(?:\.\d+)*\b|lib\w+\.so", "import", "a shared library is missing"),
    ("permission", r"publickey|\bssh\b", "ssh", ""),
    ("import", r"undefined symbol", "import",
     "a compiled extension (flash-attn, apex, a DeepSpeed op) was built against another torch or CUDA: reinstall it "
     "for the torch this node runs"),
    ("cuda-error", r"ProcessGroupNCCL|[Ww]atchdog|NCCL", "cuda-error",
     "NCCL's watchdog saw it: the GPU faulted (dmesg: Xid) or an earlier kernel did"),
    ("network", r"\bfe80:|%ib\d|link-local", "network", "NCCL bound an IPv6 link-local address"),
]
CONTEXT: List[Tuple[str, "re.Pattern[str]", str, str]] = [(kind, re.compile(pattern, re.I), refined, detail)
                                                          for kind, pattern, refined, detail in _CONTEXT]


def _refine(meaning: Meaning, line: str) -> Meaning:
    for kind, context, refined, detail in CONTEXT:
        if meaning.kind == kind and context.search(line):
            return meaning._replace(kind=refined, detail=detail or meaning.detail)
    return meaning


def _cuda(line: str) -> Optional[Meaning]:
    found = cuda.find(line)
    return Meaning(found.kind, "cuda", found.name, "") if found else None


def _space_of(line: str) -> Optional[Meaning]:
    family = nccl.warn_family(line)
    if family:
        kind_family, match = family
        if kind_family.space == "cuda":
            text = next(g for g in match.groups()[::-1] if g)
            found = cuda.by_text(text)
            if found:
                return Meaning(found.kind, "nccl", found.name, f"NCCL's CUDA call failed: {text}")
        elif kind_family.space == "errno":
            name = system.errno_by_text(line)
            if name:
                return Meaning(system.ERRNO_KINDS[name], "errno", name, "")
        return Meaning(kind_family.kind, "nccl", "NCCL WARN", "")
    for space, pattern, kind, code in MESSAGES[:4]:      # a scheduler's own verdict outranks what it interrupted
        if pattern.search(line):
            return Meaning(kind, space, code, "")
    found = _cuda(line)
    if found:
        return found
    named = system.find_errno(line)
    if named:
        return Meaning(system.ERRNO_KINDS[named[0]], "errno", named[0], "")
    for space, pattern, kind, code in MESSAGES[4:7]:
        if pattern.search(line):
            return Meaning(kind, space, code, "")
    ended = system.find_signal(line)
    if ended:
        return Meaning(system.SIGNAL_KINDS[ended[0]], "signal", ended[0], "")
    result = nccl.result(line)
    if result:
        return Meaning(result[3], "nccl", result[1], "")
    for space, pattern, kind, code in MESSAGES[7:]:
        if pattern.search(line):
            return Meaning(kind, space, code, "")
    return None


def read_line(line: str) -> Optional[Meaning]:
    """The error-space entry a line shows, refined by its context; None when it shows none."""
    text = ADVICE.sub("", line)
    if not text.strip():
        return None
    meaning = _space_of(text)
    return _refine(meaning, text) if meaning else None
