"""What NCCL's own diagnostics said (NCCL 2.31 and later: `NCCL_RUN_DIAGNOSTICS=1` runs the active checks, a P2P
transfer over every GPU pair NCCL means to use; `NCCL_RUN_RAS_DIAGNOSTICS=1`, `ncclras -D` or the RAS port's
`diagnostics` command compare GPU inventory, CUDA driver, ECC, NVLink and the NCCL_* variables across ranks), judged
from the `NCCL DIAG` lines (onnode/nccl_log_reader.py keeps them per rank).

The structure is NCCL's documentation's (docs/userguide/source/troubleshooting/diagnostics.rst and ras.rst, "RAS
Diagnostics", NVIDIA/nccl 8898068; the recorded examples are in tests/data/nccl-diag): each line `[host:pid] NCCL
DIAG [TAG] check: text`, a header (`=== ... ===`) and a completion line; `[OK]` a check that reported nothing,
`[INFO]` "a condition that may require review" (a failed verification, inconsistent values, missing information);
a check may group ranks by value over several lines (`NCCL_DEBUG=WARN on rank(s) {4,5,6,7}`). NCCL makes them
informational (init goes on), so an `[INFO]` is a WARN here, naming the check, its lines and the ranks of the
smaller group; the report does not say which node holds a rank, so no node is blamed. A tag NCCL may add later is
said with its name, never dropped. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Dict, List, Tuple

from clustercheck.core.result import Finding, Status

_RESULT = re.compile(r"^\[(\w+)\]\s+([^:]{1,60}):\s*(.*)$")
_GROUP = re.compile(r"(\S+?)\s+on rank\(s\)\s+\{([^}]*)\}")
_DONE = re.compile(r"diagnostics completed in ([\d.]+ \w+) across (\d+) (?:ranks|RAS peers)")
MAX_SAID = 8
# what to look at when a check says [INFO], by the check's name as NCCL prints it
REMEDY = {"p2p": "a GPU pair whose P2P transfer failed: its NVLink or PCIe path (nvidia-smi topo -m, nvidia-smi nvlink "
                 "-s; clustercheck device), or a container without IPC between the ranks",
          "GPU inventory": "nodes with other GPU counts or models than the rest: clustercheck env names them",
          "CUDA driver version": "one driver on every node: clustercheck env compares the drivers",
          "ECC": "a GPU with uncorrected ECC errors: drain the node, reset the GPU (clustercheck device)",
          "NVLink": "a node with NVLinks down: nvidia-smi nvlink -s, then the fabric manager; clustercheck env",
          "NCCL environment": "the same NCCL_* variables on every rank: set them in the launcher, not per node"}


def _results(ranks: List[Dict]) -> Tuple[List[Tuple[str, str, str]], List[str]]:
    found, done = [], []
    for rank in ranks:
        for line in rank.get("diag") or []:
            match = _RESULT.match(line)
            if match:
                found.append((match.group(1).upper(), match.group(2).strip(), line))
            elif _DONE.search(line):
                done.append(line)
    return found, done


def _smaller_groups(lines: List[str]) -> List[str]:
    groups: Dict[str, List[str]] = {}
    for line in lines:
        for value, ranks in _GROUP.findall(line):
            groups[value] = [r.strip() for r in ranks.split(",") if r.strip()]
    if len(groups) < 2:
        return []
    sizes = sorted(len(r) for r in groups.values())
    largest = max(groups, key=lambda v: len(groups[v])) if sizes[-1] > sizes[-2] else None    # a tie: every group
    return [f"{value} on rank(s) {', '.join(ranks)}" for value, ranks in groups.items() if value != largest]


def judge_nccl_diag(ranks: List[Dict]) -> List[Finding]:
    """[] where no rank wrote a DIAG result; else one WARN per check NCCL flagged, or one OK naming the checks
    that passed."""
    found, done = _results(ranks)
    if not found:
        return []
    flagged: Dict[str, List[str]] = {}
    for tag, check, line in found:
        if tag != "OK":
            flagged.setdefault(check, []).append(f"NCCL DIAG {line}")
    findings = []
    for check, lines in flagged.items():
        odd = _smaller_groups(lines)
        tags = sorted({line.split("]")[0] + "]" for line in lines})
        findings.append(Finding("nccl.diag", Status.WARN, f"NCCL's own diagnostics flag {check} ({', '.join(tags)})"
                                                          f"{': ' + '; '.join(odd) if odd else ''}",
                                lines[:MAX_SAID], REMEDY.get(check, "read the check NCCL names (NCCL's "
                                                                    "Troubleshooting: Diagnostics)")))
    passed = sorted({check for tag, check, _ in found if tag == "OK"} - set(flagged))
    if passed:
        findings.append(Finding("nccl.diag", Status.OK, f"NCCL's own diagnostics passed: {', '.join(passed)}",
                                done[:2]))
    return findings
