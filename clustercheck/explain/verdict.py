"""The verdict on a user's logs: the cause smoke's classifier finds in them, what the recorded outputs among
them say, READY only where a log shows the job ended well (vocabulary/ends.py), and UNKNOWN otherwise: a log with
no error and no end stopped early (a hang in progress, when its last lines are NCCL's or a collective's, or a log
cut there), and the count of what was read and recognised says how much there was to go on."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status, note, worst
from clustercheck.display.findings import findings_lines, json_header
from clustercheck.explain.reader import LogView, read_logs
from clustercheck.explain.recorded import judge_recorded
from clustercheck.explain import nccl_view
from clustercheck.explain import flight_view
from clustercheck.failure.classify import UNCLASSIFIED, Cause, NodeLines, classify
from clustercheck.failure.lines import is_error, is_warning, signature_of
from clustercheck.vocabulary import ends
from clustercheck.vocabulary.kinds import KINDS


@dataclass
class Explained:
    view: LogView
    findings: List[Finding] = field(default_factory=list)
    cause: Dict = field(default_factory=dict)
    nccl: Dict = field(default_factory=dict)       # host -> the path NCCL's lines say it took
    flight: Dict = field(default_factory=dict)     # the Flight Recorder dumps' judgement (flight_view.py)

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


# The last lines of a log that stopped inside the job's distributed set-up or a collective: NCCL's own lines,
# torch.distributed's waits and barriers, a collective's name, DeepSpeed's engine set-up (its [INFO] lines from
# config.py / engine.py / logging.py, printed just before the first step's collectives), and the launchers' own
# words as they start the ranks, where nothing of the ranks follows (stuck in the rendezvous or the process group's
# set-up, waiting for nodes that never came): torch/distributed/launch.py's FutureWarning "The module
# torch.distributed.launch is deprecated", torch/distributed/run.py's "Setting OMP_NUM_THREADS environment variable
# for each process", torch/distributed/elastic/agent/server/api.py's "[%s] Rendezvous'ing worker group" and
# "[%s] Starting worker group"; PyTorch Lightning's "Initializing distributed: GLOBAL_RANK: %d, MEMBER: %d/%d"
# (lightning/fabric/utilities/distributed.py _init_dist_connection; 1.x: "initializing ddp: GLOBAL_RANK: ...")
_IN_COLLECTIVE = re.compile(r"NCCL INFO|NCCL WARN|Init COMPLETE|Connected all (?:rings|trees)|ProcessGroupNCCL|"
                            r"The module torch\.distributed\.launch is deprecated|"
                            r"Setting OMP_NUM_THREADS environment variable for each process|"
                            r"Rendezvous'ing worker group|Starting worker group|"
                            r"(?i:initializing (?:ddp|distributed)): GLOBAL_RANK: \d+, MEMBER: \d+/\d+|"
                            r"\b(?:all_?reduce|all_?gather|reduce_?scatter|broadcast|barrier|all_to_all)\b|"
                            r"[Ww]aiting (?:for|in|on)\b|store[_ ]based[_ ]barrier|Channel \d+/\d+ :|"
                            r"\[INFO\] \[(?:config|engine|logging|utils|stage_1_and_2|stage3|comm|"
                            r"partition_parameters)\.py:\d+:|DeepSpeedEngine configuration|"
                            r"Initializing process group|init_process_group|Added key: store_based_barrier_key")


def stopped_in_collective(view: LogView) -> List[str]:
    """The files whose last lines are NCCL's or a collective's: a log that stops there, with no error and no end,
    is a hang in progress (or a log cut there)."""
    return [path for path, tail in view.tails.items()
            if any(_IN_COLLECTIVE.search(line) for line in tail)]


def diagnostics_only(view: LogView) -> bool:
    """The lines are NCCL's DIAG report alone (NCCL 2.31's RAS / active diagnostics): an output whose checks are
    its own (nccl/diag_judge.py judges them), not a job's log that should show the job's end."""
    ranks = [r for r in view.nccl_ranks.values() if r["lines"]]
    return bool(ranks) and not view.candidates and all(len(r["diag"]) >= r["lines"] for r in ranks)


def no_end_finding(view: LogView, in_collective: List[str]) -> Finding:
    """UNKNOWN, never READY: nothing reads as a failure, and nothing says the job ended well."""
    recognised = view.candidates + sum(r["lines"] for r in view.nccl_ranks.values())
    counted = f"{view.total_lines:,} line(s) in {len(view.files)} file(s), {recognised:,} recognised"
    if in_collective:
        hang = KINDS["hang"]
        return Finding("explain.hang", Status.UNKNOWN,
                       f"the log stops inside the job's distributed set-up or a collective, with no error and no word "
                       f"that the job ended: a hang in progress, or a log cut there ({counted})",
                       [f"{path}: last line: {view.tails[path][-1][:200]}" for path in in_collective[:4]], hang.remedy)
    return Finding("explain.no-end", Status.UNKNOWN,
                   f"nothing here reads as a failure, and nothing says the job ended well (the launcher's or the "
                   f"trainer's last words): {counted}",
                   [f"{path}: last line: {tail[-1][:200]}" for path, tail in list(view.tails.items())[:4] if tail],
                   "is this the whole log of the job (its stderr, all ranks)? a log cut before the error or the end "
                   "says neither; clustercheck explain reads torchrun, DeepSpeed, accelerate, Lightning and Slurm "
                   "logs, nvidia-smi, dcgmi, dmesg and nccl-tests outputs")


def explain(paths: List[str]) -> Explained:
    view = read_logs(paths)
    result = Explained(view)
    for path, text in view.recorded.items():
        result.findings += judge_recorded(path, text)
    logs = view.total_lines > 0      # a file read as a log (not only recorded outputs): READY only on its end
    if view.lines and telling(view):
        cause = classify({node: NodeLines(lines) for node, lines in view.lines.items()})
        assert cause is not None, "every node of a log has ended: the judge always names a cause"
        result.cause = {"kind": cause.kind, "nodes": cause.nodes, "ranks": cause.ranks,
                        "local_ranks": cause.local_ranks, "summary": cause.summary, "remedy": cause.remedy,
                        "evidence": cause.evidence}
        result.findings.insert(0, cause_finding(cause))
    elif logs and view.ends:
        node, line = view.ends[-1]
        result.findings.append(Finding("explain.ended", Status.OK,
                                       f"the job ended well: {ends.ended_well(line).who} says so and nothing reads "
                                       f"as a failure", [f"{node}: {line[:200]}" for node, line in view.ends[-3:]]))
    elif logs and not diagnostics_only(view):
        in_collective = stopped_in_collective(view)
        finding = no_end_finding(view, in_collective)
        if in_collective:
            result.cause = {"kind": "hang", "nodes": [], "ranks": [], "local_ranks": [],
                            "summary": finding.summary, "remedy": finding.remedy, "evidence": finding.evidence}
        result.findings.append(finding)
    if view.nccl_ranks:
        result.nccl, nccl_findings = nccl_view.judge(view.nccl_ranks)
        result.findings += nccl_findings
    result.flight, flight_findings = flight_view.judge(view.flight)     # Flight Recorder dumps
    result.findings += flight_findings
    if view.cut_lines:
        result.findings.append(note("explain.cut", f"{view.cut_lines} line(s) longer than {64 * 1024:,} characters "
                                                   f"were read cut"))
    if view.skipped:
        result.findings.append(note("explain.skipped", f"{len(view.skipped)} file(s) of the directories are not "
                                                       f"logs, left out", view.skipped[:5]))
    return result


def render(result: Explained, as_json: bool, verbose: bool) -> str:
    view = result.view
    if as_json:
        return json.dumps({**json_header("explain", result.findings), "cause": result.cause or None,
                           "files": view.files, "bytes": view.bytes_read, "nodes": sorted(view.lines),
                           "recorded": sorted(view.recorded), "skipped": view.skipped, "nccl_paths": result.nccl,
                           "flight_recorder": result.flight or None},
                          indent=1)
    return "\n".join([f"clustercheck explain: {len(view.files)} file(s), {view.bytes_read:,} bytes, "
                      f"{len(view.lines)} source(s) of lines", "", *nccl_view.screen_lines(result.nccl),
                      *flight_view.screen_lines(result.flight),
                      *findings_lines(result.findings, verbose)])
