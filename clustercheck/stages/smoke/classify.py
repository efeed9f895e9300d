"""Why a training run failed, and where: classified from everything the ranks wrote to stderr
and how each node's torchrun ended.

Every line of every node is read, not a tail: with several ranks per node, torchrun's own
report and the peers' echoes fill the end. torchrun's failure summary ("Root Cause (first
observed failure)": host, rank, exit code, signal, the rank's traceback from its error file)
is parsed. A warning never counts as an error; the most telling cause wins, in the order of
SIGNATURES; a peer's "connection closed" is the echo of a failure elsewhere, never the cause
when something else is found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from clustercheck.ranks.forensics import REMEDY_HANG, Forensics, hang_report
from clustercheck.ranks.runs import NodeRun

REMEDY_NET = "run clustercheck net and bench: a blocked port, a wrong interface (NCCL_SOCKET_IFNAME) or a dead peer"
# (kind, pattern of an error line, summary, remedy): the most telling first.
SIGNATURES: List[Tuple[str, str, str, str]] = [
    ("import", r"\b(ModuleNotFoundError|ImportError)\b",
     "a module does not import",
     "install it into the interpreter that trains on that node, or name the right one with python= "
     "(clustercheck env shows what each node has)"),
    ("oom", r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|Cannot allocate memory",
     "out of memory",
     "lower --micro-batch, use zero3 / zero3-offload / fsdp, or activation checkpointing; `clustercheck plan` "
     "shows what fits"),
    ("killed", r"Signal 9 \(SIGKILL\)|exitcode\s*:\s*-9\b|exit(ed)? with (exit )?code -9|Signals\.SIGKILL",
     "a rank was killed (SIGKILL): the kernel's OOM killer, or someone killed it",
     "look at the node's kernel log (dmesg: 'Out of memory: Killed process'); lower host memory use (data "
     "workers, CPU offload) or add memory"),
    ("ib", r"NET/IB\s*:.*(completion|status|error)|ibv_\w+\s+failed|IBV_WC_\w+",
     "an InfiniBand transfer failed",
     "check the InfiniBand fabric and the HCAs on those nodes (ibstat, link errors); retry with NCCL_IB_DISABLE=1 "
     "to confirm, then set NCCL_IB_HCA to the ports that work"),
    ("watchdog", r"Watchdog caught collective operation timeout|\bran for \d+ milliseconds before timing out",
     "a collective timed out: one rank stopped answering (stuck, dead or very slow)",
     "find the rank the others waited for (clustercheck bench --pairwise, clustercheck net); rerun with "
     "TORCH_NCCL_DUMP_ON_TIMEOUT=1 for the ranks' traces"),
    ("nccl", r"(?i)\bnccl error\b|nccl(Internal|System|UnhandledCuda|InvalidUsage|InvalidArgument|Remote)Error|"
             r"DistBackendError|NCCL WARN Cuda failure",
     "NCCL failed between ranks", REMEDY_NET + "; NCCL_DEBUG=INFO names the transport"),
    ("crashed", r"Signal (11|7|4) \(SIG(SEGV|BUS|ILL)\)|exitcode\s*:\s*-(11|7|4)\b|Segmentation fault|"
                r"Fatal Python error",
     "a rank crashed in native code (SIGSEGV / SIGBUS)",
     "check that torch, NCCL and the driver match on every node (clustercheck env); a debug setting can crash "
     "too (in torch 2.13, DDP segfaults while it is built under TORCH_DISTRIBUTED_DEBUG=DETAIL)"),
    ("rendezvous", r"Rendezvous(Timeout|Closed|Connection)Error|client socket has timed out|DistNetworkError|"
                   r"The server socket has failed to listen|failed to bind|Address already in use|"
                   r"[Ww]ait timeout|rendezvous.*timed out|\[c10d\].*timed out after",
     "the nodes did not meet at the rendezvous (the c10d store)",
     "start on every node, keep the rendezvous port open and free on the first node, and use the same "
     "endpoint everywhere (clustercheck net)"),
    ("peer-lost", r"Connection closed by (remote )?peer|Connection reset by peer|Broken pipe",
     "a peer went away mid-run (its rank or node died)",
     "find the node that died first (its own log, dmesg); clustercheck env on it"),
    ("comms", r"\bGloo\b|ProcessGroup\w*Error|Socket Timeout",
     "a collective failed between ranks", REMEDY_NET),
]
KINDS = [kind for kind, _, _, _ in SIGNATURES]
ECHOES = ("peer-lost", "comms")   # what ranks say when another rank or node failed first
# Not errors: Python's and c10's warnings, DeepSpeed's [WARNING] lines (they name optional modules).
_WARNING = re.compile(r"\b\w*Warning\b|\[WARNING\]|^\s*WARNING\b|^\s*\[?W\d{4}|warnings\.warn|\bWARN(?!\s*\w*Error)")
# ...but NCCL writes its errors at WARN level, and c10d its store's socket timeouts.
_ERROR_AT_WARN_LEVEL = re.compile(r"NCCL WARN|\[c10d\].*timed out after")


def is_warning(line: str) -> bool:
    return bool(_WARNING.search(line)) and not _ERROR_AT_WARN_LEVEL.search(line)


@dataclass
class Cause:
    kind: str
    nodes: List[str]
    ranks: List[int]
    evidence: List[str]
    summary: str
    remedy: str


def torchrun_failures(text: str) -> List[Dict[str, str]]:
    """The entries of torchrun's failure summary ("Failures:" and "Root Cause"), root cause first."""
    entries: List[Dict[str, str]] = []
    for section in re.split(r"^\s*(?=Root Cause \(first observed failure\):|Failures:)", text, flags=re.M):
        root = section.startswith("Root Cause")
        for block in re.split(r"^\s*\[\d+\]:\s*$", section, flags=re.M)[1:]:
            entry = {}
            for key, value in re.findall(r"^\s{2,}(\w+)\s*:\s*(.*)$", block.split("=====")[0], flags=re.M):
                entry.setdefault(key, value.strip())
            if entry:
                entry["root"] = "yes" if root else ""
                entries.append(entry)
    return sorted(entries, key=lambda e: not e["root"])


def _rank_of(line: str, entry: Optional[Dict[str, str]] = None) -> Optional[int]:
    match = re.match(r"\s*\[(?:default)?rank(\d+)\]:", line)
    if match:
        return int(match.group(1))
    if entry and re.match(r"\d+", entry.get("rank", "")):
        return int(re.match(r"\d+", entry["rank"]).group(0))
    return None


def _signal(entry: Dict[str, str]) -> str:
    code = entry.get("exitcode", "")
    named = re.search(r"Signal (\d+) \((SIG\w+)\)", entry.get("traceback", ""))
    if named:
        return f"signal {named.group(1)} ({named.group(2)})"
    return f"exit code {code.split()[0]}" if code else ""


def _hits(runs: Dict[str, NodeRun], failures: Dict[str, List[Dict[str, str]]]
          ) -> Dict[str, Dict[str, List[Tuple[str, Optional[int]]]]]:
    """kind -> node -> [(line, rank)] of the error lines that match it, summary entries included."""
    found: Dict[str, Dict[str, List[Tuple[str, Optional[int]]]]] = {kind: {} for kind in KINDS}
    for node, run in runs.items():
        text = run.stderr or "\n".join(run.stderr_tail)
        entries = failures[node]
        lines = [(line, _rank_of(line)) for line in text.splitlines() + [run.error] if line.strip()]
        lines = [(f"rank {e.get('rank', '?')} on {e.get('host', node)}: {_signal(e)}: {e.get('traceback', '')}",
                  _rank_of("", e)) for e in entries] + lines
        for line, rank in lines:
            if is_warning(line):
                continue
            for kind, pattern, _, _ in SIGNATURES:
                if re.search(pattern, line):
                    found[kind].setdefault(node, []).append((line.strip(), rank))
                    break
    return found


def classify(runs: Dict[str, NodeRun], timeout_s: float, stalled_s: Optional[float] = None,
             forensics: Optional[Forensics] = None) -> Cause:
    """The most telling cause of a failed run, and the nodes (and ranks) it points at.

    A run stopped for want of progress (stalled_s) is a hang whatever its ranks printed; the
    stacks taken before it was stopped (forensics) name the odd ranks."""
    if stalled_s is not None and not any(r.lost or r.exit_code not in (0, None) for r in runs.values()):
        return hang_cause(runs, timeout_s, stalled_s, forensics)
    lost = [n for n, r in runs.items() if r.lost]
    failures = {n: torchrun_failures(r.stderr or "\n".join(r.stderr_tail)) for n, r in runs.items()}
    hits = _hits(runs, failures)
    roots = [(n, e) for n, entries in failures.items() for e in entries if e["root"]]
    for kind, _, summary, remedy in SIGNATURES:
        if lost and kind in ("watchdog", "nccl", "rendezvous", "peer-lost", "comms"):
            break  # a node went down: the others' connection errors are its echo
        if roots and kind in ECHOES:
            return _first_failure(*roots[0])   # torchrun's first failed rank says more than a peer's echo
        nodes = hits[kind]
        if not nodes:
            continue
        evidence = [f"{node}: {lines[0][0][:300]}" for node, lines in nodes.items()]
        ranks = sorted({rank for lines in nodes.values() for _, rank in lines if rank is not None})
        return Cause(kind, list(nodes), ranks, evidence, summary, remedy)
    if lost:
        return Cause("node-down", lost, [], [f"{n}: the connection dropped while training ran" for n in lost],
                     "a node went down mid-run", "check the node (power, kernel log, OOM killer); drain it if it "
                                                  "does not come back")
    if any(r.exit_code is None and not r.cut_short for r in runs.values()):
        return hang_cause(runs, timeout_s, None, forensics)
    if roots:   # torchrun names the first rank that failed, even when nothing says why
        return _first_failure(*roots[0])
    failed = {n: r for n, r in runs.items() if r.exit_code not in (0, None)}
    return Cause("error", list(failed), [], [f"{n}: exit {r.exit_code}: {r.error}" for n, r in failed.items()],
                 "the trainer failed", "see the log tail (--json has every node's)")


def hang_cause(runs: Dict[str, NodeRun], timeout_s: float, stalled_s: Optional[float],
               forensics: Optional[Forensics]) -> Cause:
    hung = [n for n, r in runs.items() if r.exit_code is None and not r.cut_short]
    summary, evidence, odd, ranks = hang_report(stalled_s, forensics, timeout_s)
    if forensics is None:
        evidence = [f"{n}: {summary}, killed" for n in hung]
    return Cause("hang", odd or hung, ranks, evidence, summary, REMEDY_HANG)


def _first_failure(node: str, entry: Dict[str, str]) -> Cause:
    rank = _rank_of("", entry)
    return Cause("error", [node], [rank] if rank is not None else [],
                 [f"{node}: rank {entry.get('rank', '?')} on {entry.get('host', node)} ended with {_signal(entry)}",
                  f"{node}: {entry.get('traceback', '')}"],
                 f"rank {entry.get('rank', '?').split()[0]} failed first ({_signal(entry)})",
                 "read that rank's traceback (--json has every node's stderr)")
