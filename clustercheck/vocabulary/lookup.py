"""One line read through the table (table.py): the row it shows, refined by its context.

The spaces are read in their order; the first that names the line names it, by the row whose kind ranks best.
A row that says its cause lives in another space (NCCL's "Cuda failure '<text>'", a socket's errno text) is read
there first. A line that only advises ("run with NCCL_DEBUG=INFO for details") shows nothing. Its context refines
it: the context entries are tried by their precedence field, lowest first, the first that fits wins.
"""

from __future__ import annotations

import functools
import re
from typing import List, NamedTuple, Optional, Tuple

from clustercheck.vocabulary.cuda import CALL_ERRORS
from clustercheck.vocabulary.kinds import KINDS
from clustercheck.vocabulary.spaces import VocabularyError
from clustercheck.vocabulary.system import NEIGHBOUR_OVERFLOW
from clustercheck.vocabulary.table import WARNED_CAUSE, best_in, first_space


class Meaning(NamedTuple):
    kind: str          # kinds.py
    space: str         # spaces.SPACES
    code: str          # cudaErrorIllegalAddress, ENOSPC, SIGBUS, ncclSystemError, time limit ...
    detail: str        # what the context adds ("" when nothing)
    row_tier: int = -1  # where the row proves less than its kind (a bare SIGABRT, a cancellation with no reason)

    @property
    def tier(self) -> int:
        return self.row_tier if self.row_tier >= 0 else KINDS[self.kind].tier

    @property
    def rank(self) -> int:
        return KINDS[self.kind].rank

    @property
    def summary(self) -> str:
        base = KINDS[self.kind].summary
        return f"{base}: {self.detail}" if self.detail else f"{base} ({self.code})"

    @property
    def remedy(self) -> str:
        return KINDS[self.kind].remedy


ADVICE = re.compile(r"\(?run with NCCL_DEBUG=\w+[^)]*\)?|NCCL_DEBUG=(?:INFO|WARN)(?: for details)?|"
                    r"TORCH_CPP_LOG_LEVEL=\w+|CUDA_LAUNCH_BLOCKING=1|TORCH_USE_CUDA_DSA")

class Context(NamedTuple):
    """One refinement: a line whose meaning has `kind` (a kind or a code) and whose text matches `pattern` is
    `refined`, with `detail`. Where several entries fit one line, the lowest precedence refines it."""
    precedence: int
    kind: str
    pattern: str
    refined: str
    detail: str


def ordered(entries: List[Context], flags: int = 0) -> List[Tuple[Context, "re.Pattern[str]"]]:
    """The entries sorted by their precedence, each with its compiled pattern. Two entries that could refine one
    meaning (the same kind or code, or one a kind and the other a code) never share a precedence (checked here, at
    import: VocabularyError): the field decides, never the entries' place in the list."""
    for i, one in enumerate(entries):
        for other in entries[i + 1:]:
            both = one.kind == other.kind or (one.kind in KINDS) != (other.kind in KINDS)
            if both and one.precedence == other.precedence:
                raise VocabularyError(f"context entries {one.kind!r} -> {one.refined!r} and {other.kind!r} -> "
                                      f"{other.refined!r} share precedence {one.precedence}")
    return [(entry, re.compile(entry.pattern, flags)) for entry in sorted(entries, key=lambda e: e.precedence)]


# The same entry in another context is another cause; precedence: lower is tried first.
_CONTEXT = [
    # checks.h's words ("Cuda failure", case and all) or NCCL's WARN line: the refused call was NCCL's (before the
    # watchdog's reading of a CUDA error, 80)
    *[Context(10, code, r"(?-i:Cuda failure)|NCCL WARN", "nccl",
              f"NCCL's own CUDA call failed ({code}), no kernel's fault is named: NCCL_DEBUG=INFO names the call and "
              "its transport (P2P / CUDA IPC; WSL2 and containers without a shared IPC namespace refuse them: "
              "NCCL_P2P_DISABLE=1 tells)")
      for code in sorted(CALL_ERRORS)],
    Context(20, NEIGHBOUR_OVERFLOW, r"", "network",
            "the kernel's neighbour (ARP / NDP) table is full and drops packets to new peers: raise "
            "net.ipv4.neigh.default.gc_thresh1/2/3 (net.ipv6 for ndisc_cache) on every node, kept in /etc/sysctl.d/ "
            "(clustercheck env judges them against the node count)"),
    Context(30, "disk-full", r"/dev/shm|shared memory|shm_", "shm", "the full filesystem is /dev/shm"),
    Context(40, "crashed", r"DataLoader|\bworker \(pid|shared memory|/dev/shm|\bshm\b", "shm",
            "a DataLoader worker's shared memory (/dev/shm) ran out (SIGBUS)"),
    # a rendezvous that names a link-local address is still the rendezvous: before the link-local entry (90)
    Context(50, "network", r"TCPStore|c10d|rendezvous|rdzv|store", "rendezvous",
            "the rendezvous store could not be reached"),
    Context(60, "missing-file", r"\.so(?:\.\d+)*\b|lib\w+\.so", "loader", "a shared library is missing"),
    Context(70, "permission", r"publickey|\bssh\b", "ssh", ""),
    Context(80, "cuda-error", r"ProcessGroupNCCL|[Ww]atchdog|NCCL", "cuda-error",
            "NCCL's watchdog saw it: the GPU faulted (dmesg: Xid) or an earlier kernel did"),
    Context(90, "network", r"\bfe80:|%ib\d|link-local", "network", "NCCL bound an IPv6 link-local address"),
]
CONTEXT = ordered(_CONTEXT, re.I)
# The same, where the context is in the node's other lines, not the line itself: a SIGBUS whose native backtrace
# runs through NCCL (ncclGroupEnd, libnccl.so) or a DataLoader worker is /dev/shm exhausted, as NCCL's shm
# transport and the DataLoader's workers map it (NVIDIA/nccl src/misc/shmutils.cc; torch's DataLoader's "bus error
# ... insufficient shared memory"); a container's default /dev/shm is 64 MB
_NODE_CONTEXT = [
    Context(10, "SIGBUS", r"libnccl|\bnccl[A-Z]\w*\(|DataLoader|/dev/shm|\bshm\b", "shm",
            "a bus error (SIGBUS) in NCCL's or a DataLoader worker's shared memory: /dev/shm ran out (a container's "
            "default is 64 MB)"),
]
NODE_CONTEXT = ordered(_NODE_CONTEXT)
# what the node context reads: native backtrace frames that name NCCL (explain keeps these lines for it)
NODE_CONTEXT_LINES = r"\bnccl[A-Z]\w*\(|libnccl\.so"


def refine_by_lines(meaning: Meaning, lines: List[str]) -> Meaning:
    """A cause refined by what the node's other lines show (NODE_CONTEXT)."""
    for entry, context in NODE_CONTEXT:
        if entry.kind in (meaning.kind, meaning.code) and any(context.search(line) for line in lines):
            return meaning._replace(kind=entry.refined, detail=entry.detail)
    return meaning


def refine(meaning: Meaning, line: str, table: Optional[List[Tuple[Context, "re.Pattern[str]"]]] = None) -> Meaning:
    """A meaning refined by its own line: the first entry of `table` (CONTEXT), by precedence, that fits."""
    for entry, context in CONTEXT if table is None else table:
        if entry.kind in (meaning.kind, meaning.code) and context.search(line):
            return meaning._replace(kind=entry.refined, detail=entry.detail or meaning.detail)
    return meaning


_CUDA_SAID = re.compile(r"Cuda failure\s*(?:\d+ )?'?([^'\n]*)")


def _read(line: str) -> Optional[Meaning]:
    found = first_space(line)
    if found is None:
        return None
    row, match = found
    if row.via:
        inner = best_in(row.via, line[match.start():])
        if inner:
            said = _CUDA_SAID.search(line) if row.via == "cuda" else None
            return Meaning(inner[0].kind, row.via, inner[0].code,
                           f"NCCL's CUDA call failed: {said.group(1).strip()}" if said else "")
    return Meaning(row.kind, row.space, row.code, "", row.tier)


@functools.lru_cache(maxsize=65536)    # ranks print the same lines over and over
def read_line(line: str) -> Optional[Meaning]:
    """The table's row a line shows, refined by its context; None when it shows none."""
    text = ADVICE.sub("", line)
    if not text.strip():
        return None
    meaning = _read(text)
    return refine(meaning, text) if meaning else None


def cause_despite_warning(line: str) -> bool:
    """Whether a line printed as a warning is a cause all the same (a row marked `warns`)."""
    return bool(WARNED_CAUSE.search(line))
