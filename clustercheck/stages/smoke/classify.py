"""Why a smoke run failed, and where: the run's facts turned into what the failure judge reads (every node's
lines and how its torchrun ended: clustercheck/failure/classify.py, the judge explain calls too), and a run
stopped for want of progress judged a hang, from the stacks taken before it was stopped."""

from __future__ import annotations

from typing import Dict, Optional

from clustercheck.failure.classify import UNCLASSIFIED, Cause, NodeLines, torchrun_failures
from clustercheck.failure.classify import classify as judge
from clustercheck.failure.lines import is_warning
from clustercheck.ranks.forensics import REMEDY_HANG, Forensics, hang_report
from clustercheck.ranks.runs import NodeRun

__all__ = ["UNCLASSIFIED", "Cause", "classify", "hang_cause", "is_warning", "node_lines", "torchrun_failures"]


def node_lines(run: NodeRun) -> NodeLines:
    """A node's run as the judge's facts: everything its ranks wrote to stderr, then the tool's own error."""
    lines = (run.stderr or "\n".join(run.stderr_tail)).splitlines() + ([run.error] if run.error else [])
    return NodeLines(lines, run.exit_code, run.lost, run.cut_short, run.ended_s)


def classify(runs: Dict[str, NodeRun], timeout_s: float, stalled_s: Optional[float] = None,
             forensics: Optional[Forensics] = None) -> Cause:
    """The most telling cause of a failed run, and the nodes (and ranks) it points at.

    A run stopped for want of progress (stalled_s) is a hang whatever its ranks printed; the
    stacks taken before it was stopped (forensics) name the odd ranks."""
    if stalled_s is not None and not any(r.lost or r.exit_code not in (0, None) for r in runs.values()):
        return hang_cause(runs, timeout_s, stalled_s, forensics)
    cause = judge({node: node_lines(run) for node, run in runs.items()})
    return cause if cause is not None else hang_cause(runs, timeout_s, None, forensics)


def hang_cause(runs: Dict[str, NodeRun], timeout_s: float, stalled_s: Optional[float],
               forensics: Optional[Forensics]) -> Cause:
    hung = [n for n, r in runs.items() if r.exit_code is None and not r.cut_short]
    summary, evidence, odd, ranks = hang_report(stalled_s, forensics, timeout_s)
    if forensics is None:
        evidence = [f"{n}: {summary}, killed" for n in hung]
    return Cause("hang", odd or hung, ranks, evidence, summary, forensics.remedy if forensics else REMEDY_HANG)
