"""What NCCL's own diagnostics said (NCCL 2.31 and later, `NCCL_RUN_DIAGNOSTICS=1`, `NCCL_RUN_RAS_DIAGNOSTICS=1`):
the `NCCL DIAG` lines each rank wrote (onnode/ncclpath.py keeps them per rank), judged.

NCCL's documentation (Troubleshooting, Diagnostics) says the basic reports carry the `NCCL DIAG` prefix and bypass
the debug filter; the active checks write data over each path NCCL means to use (the P2P edges inside a node, the
network between nodes) and say which edge failed; the RAS diagnostics compare the GPU, the CUDA driver and NCCL's
configuration across ranks. No recorded DIAG line was found in NCCL's source (the 2.30 snapshot predates them) nor
in its documentation's excerpts, so this reader follows the documented structure, not a sample's rows:
- a line that says a check failed, a mismatch or a difference (the words in FAILED) is a WARN naming the node
  and quoting the line: NCCL makes its diagnostics informational, a failed edge does not fail the communicator;
- a `name: value` (or `name=value`) fact that differs between ranks is a WARN naming the odd ranks' nodes (the
  majority is the baseline, as everywhere in clustercheck).
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Dict, List

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status

FAILED = re.compile(r"\b(?:FAIL(?:ED|URE)?|[Ff]ail(?:ed|ure)|MISMATCH|[Mm]ismatch|differ(?:s|ent)?|ERROR|[Ee]rror|"
                    r"[Ii]nconsistent|unreachable|corrupt\w*)\b")
FACT = re.compile(r"^([A-Za-z][\w .()/-]{1,60}?)\s*[:=]\s*(\S.{0,120}?)\s*$")
MAX_SAID = 8


def _node(rank: Dict) -> str:
    return str(rank.get("host") or "log")


def judge_diag(ranks: List[Dict]) -> List[Finding]:
    """[] where no rank wrote a DIAG line; else what they said failed or differed, or one OK saying how many
    ranks' diagnostics passed."""
    said = [(rank, line) for rank in ranks for line in rank.get("diag") or []]
    if not said:
        return []
    findings: List[Finding] = []
    failed = [(rank, line) for rank, line in said if FAILED.search(line)]
    if failed:
        nodes = sorted({_node(r) for r, _ in failed})
        findings.append(Finding("nccl.diag", Status.WARN, f"NCCL's own diagnostics report a problem on {fold(nodes)}",
                                [f"{_node(r)}: NCCL DIAG {line}" for r, line in failed[:MAX_SAID]],
                                "read the edge or the value NCCL names: a failed P2P edge is the GPUs' link (nvidia-smi "
                                "topo -m, clustercheck device), a failed network edge the NIC or its cable, a value "
                                "that differs the node's software (clustercheck env compares them)", nodes))
    findings += _differing(said)
    if not findings:
        findings.append(Finding("nccl.diag", Status.OK, f"NCCL's own diagnostics passed on {len(ranks)} rank(s) "
                                                        f"({len(said)} DIAG line(s), none failed or differed)"))
    return findings


def _differing(said) -> List[Finding]:
    values: Dict[str, Dict[str, str]] = {}
    for rank, line in said:
        match = FACT.match(line)
        if match and not FAILED.search(line):
            values.setdefault(match.group(1), {})[f"{_node(rank)}:{rank.get('pid')}"] = match.group(2)
    findings = []
    for name, by_rank in values.items():
        counts = Counter(by_rank.values())
        if len(counts) < 2 or len(by_rank) < 2:
            continue
        usual = counts.most_common(1)[0][0]
        odd = {who: value for who, value in by_rank.items() if value != usual}
        nodes = sorted({who.rsplit(":", 1)[0] for who in odd})
        findings.append(Finding("nccl.diag", Status.WARN, f"NCCL's diagnostics: {name} differs between ranks on "
                                                          f"{fold(nodes)} (most ranks: {usual})",
                                [f"{who}: {value}" for who, value in list(odd.items())[:MAX_SAID]],
                                "one software stack on every node (driver, CUDA, NCCL, its settings): clustercheck env "
                                "names what differs", nodes))
    return findings
