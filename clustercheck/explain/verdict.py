"""The verdict on a user's logs: the cause smoke's classifier finds in them, what the recorded outputs among
them say, and UNKNOWN (never READY) where nothing in them is recognised."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status, worst
from clustercheck.display.findings import findings_lines, json_header
from clustercheck.explain.reader import LogView, read_logs
from clustercheck.explain.recorded import judge_recorded
from clustercheck.explain import nccl_view
from clustercheck.failure.classify import UNCLASSIFIED, Cause, NodeLines, classify
from clustercheck.failure.lines import is_error, is_warning, signature_of


@dataclass
class Explained:
    view: LogView
    findings: List[Finding] = field(default_factory=list)
    cause: Dict = field(default_factory=dict)
    nccl: Dict = field(default_factory=dict)       # host -> the path NCCL's lines say it took

    @property
    def exit_code(self) -> int:
        return worst(self.findings).exit_code


_FAILED = re.compile(r"exitcode\s*:|Root Cause \(first observed failure\)|failed \(exitcode|exits with return code|"
                     r"terminated with (?:exit code|signal)")


def telling(view: LogView) -> bool:
    """Whether any line says anything the classifier reads: a known cause, an error of its own, or a launcher
    saying a rank failed."""
    return any(((signature_of(line) or is_error(line)) and not is_warning(line)) or _FAILED.search(line)
               for lines in view.lines.values() for line in lines)


def where(cause: Cause) -> str:
    ranks = (f"rank {', '.join(map(str, cause.ranks))}" if cause.ranks else
             f"local rank {', '.join(map(str, cause.local_ranks))}" if cause.local_ranks else "")
    nodes = fold(cause.nodes) if cause.nodes and cause.nodes != ["log"] else ""
    return " on ".join(filter(None, [ranks, nodes])) or "the job"


def cause_finding(cause: Cause) -> Finding:
    if cause.kind == UNCLASSIFIED:
        return Finding("explain.cause", Status.UNKNOWN, f"{where(cause)} failed first; {cause.summary}",
                       cause.evidence, cause.remedy, cause.nodes)
    if not cause.nodes:    # only peers' echoes: the node that failed first is not in these logs
        return Finding("explain.cause", Status.UNKNOWN, cause.summary, cause.evidence, cause.remedy)
    failed = "the job failed" if where(cause) == "the job" else f"{where(cause)} failed first"
    return Finding(f"explain.{cause.kind}", Status.FAIL, f"{failed}: {cause.summary}",
                   cause.evidence, cause.remedy, [n for n in cause.nodes if n != "log"])


def explain(paths: List[str]) -> Explained:
    view = read_logs(paths)
    result = Explained(view)
    for path, text in view.recorded.items():
        result.findings += judge_recorded(path, text)
    if view.lines and telling(view):
        cause = classify({node: NodeLines(lines) for node, lines in view.lines.items()})
        assert cause is not None, "every node of a log has ended: the judge always names a cause"
        result.cause = {"kind": cause.kind, "nodes": cause.nodes, "ranks": cause.ranks,
                        "local_ranks": cause.local_ranks, "summary": cause.summary, "remedy": cause.remedy,
                        "evidence": cause.evidence}
        result.findings.insert(0, cause_finding(cause))
    elif not view.recorded and not any(r["lines"] for r in view.nccl_ranks.values()):
        result.findings.append(Finding("explain.nothing", Status.UNKNOWN,
                                       f"nothing in {len(view.files)} file(s) ({view.bytes_read:,} bytes) reads as a "
                                       f"failure or as an output clustercheck knows", [],
                                       "is this the failing job's log (its stderr, all ranks)? a log cut before the "
                                       "error says nothing; clustercheck explain reads torchrun, DeepSpeed, "
                                       "accelerate and Slurm logs, nvidia-smi, dcgmi, dmesg and nccl-tests outputs"))
    if view.nccl_ranks:
        result.nccl, nccl_findings = nccl_view.judge(view.nccl_ranks)
        result.findings += nccl_findings
    if view.cut_lines:
        result.findings.append(Finding("explain.cut", Status.OK, f"{view.cut_lines} line(s) longer than "
                                                                 f"{64 * 1024:,} characters were read cut"))
    if view.skipped:
        result.findings.append(Finding("explain.skipped", Status.OK, f"{len(view.skipped)} file(s) of the "
                                                                     f"directories are not logs, left out",
                                       view.skipped[:5]))
    return result


def render(result: Explained, as_json: bool, verbose: bool) -> str:
    view = result.view
    if as_json:
        return json.dumps({**json_header("explain", result.findings), "cause": result.cause or None,
                           "files": view.files, "bytes": view.bytes_read, "nodes": sorted(view.lines),
                           "recorded": sorted(view.recorded), "skipped": view.skipped, "nccl_paths": result.nccl},
                          indent=1)
    return "\n".join([f"clustercheck explain: {len(view.files)} file(s), {view.bytes_read:,} bytes, "
                      f"{len(view.lines)} source(s) of lines", "", *nccl_view.screen_lines(result.nccl),
                      *findings_lines(result.findings, verbose)])
