"""NCCL's own account of the path it took, captured from the ranks of a launch (issue 38).

Ranks on NCCL run with NCCL_DEBUG=INFO written to a file per process in their node's run directory
(NCCL_DEBUG_FILE=nccl.%h.%p.log: NCCL puts the host and pid in), never to the console; after the launch each
node reads its own files with onnode/nccl_log_reader.py and sends back only the summary (8 ranks' INFO lines stay on
the node), and the files are removed unless the user keeps them. A user's own NCCL_DEBUG or NCCL_DEBUG_FILE is
respected and said: their file is read where its name says where it is; their console output, from the ranks'
stderr the launch collected; else the path is unknown, with why.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from clustercheck.core.inventory import Node
from clustercheck.core.result import Finding, Status
from clustercheck.node.facts import Probed, get, interpreter
from clustercheck.nccl.diag_judge import judge_nccl_diag
from clustercheck.nccl.path_judge import NodePath, judge_paths, paths_by_node
from clustercheck.onnode import inline_command
from clustercheck.onnode.nccl_log_reader import summarize
from clustercheck.ranks.runs import RanksRun, NodeRun

if TYPE_CHECKING:    # the judges import this module: no transport (paramiko) at their import
    from clustercheck.transport.fanout import Cluster

LOG_NAME = "nccl.%h.%p.log"            # NCCL replaces %h with the host name, %p with the pid
SUBSYS = "INIT,NET,ENV,BOOTSTRAP"      # the versions, bootstrap, plugin, devices, connections, settings
# NCCL 2.31's own checks (docs: Troubleshooting, Diagnostics): the active P2P / network check and the RAS comparison
# of GPUs, driver, ECC, NVLink and NCCL_* across ranks, reported as `NCCL DIAG` lines on rank 0's standard output
DIAG_ENV = {"NCCL_RUN_DIAGNOSTICS": "1", "NCCL_RUN_RAS_DIAGNOSTICS": "1"}
DIAG_SINCE = (2, 31)
READ_TIMEOUT_S = 60.0


@dataclass
class NcclLogCapture:
    """How NCCL's log is taken in this launch, and what came back: node -> its ranks' summary."""

    env: Dict[str, str] = field(default_factory=dict)    # what the ranks get (empty: the user's settings stand)
    said: str = ""                                        # the user's own settings, as respected
    keep: bool = False
    kept_in: str = ""                                     # where the files were kept (--keep-logs), on each node
    summaries: Dict[str, Dict] = field(default_factory=dict)
    problems: Dict[str, str] = field(default_factory=dict)


def nccl_version(facts: Optional[Dict]) -> Optional[str]:
    """The NCCL torch loads on the node: torch.cuda.nccl.version() where the probe ran --deep, else the version of
    its nvidia-nccl wheel (None: neither read)."""
    wheel = get(facts, "packages", "versions", "nccl_wheel")
    return get(facts, "deep", "nccl") or (wheel.split()[-1] if isinstance(wheel, str) and wheel.split() else None)


def has_diagnostics(versions: Sequence[Optional[str]]) -> bool:
    """Whether every node's NCCL (torch.cuda.nccl.version(), from the probe) has NCCL's own diagnostics."""
    found = [tuple(int(p) for p in v.split(".")[:2]) for v in versions if v and v.split(".")[0].isdigit()]
    return bool(found) and len(found) == len(versions) and min(found) >= DIAG_SINCE


def plan_capture(user_env: Dict[str, str], keep: bool = False, diagnostics: bool = False) -> NcclLogCapture:
    """The variables the ranks get; none where the user set NCCL_DEBUG or NCCL_DEBUG_FILE (said, not overridden).
    diagnostics: the nodes' NCCL runs its own checks (2.31+): turned on unless the user set them."""
    diag = {k: v for k, v in DIAG_ENV.items() if k not in user_env} if diagnostics else {}
    mine = {k: v for k, v in user_env.items() if k in ("NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS")}
    if mine:
        said = "your " + ", ".join(f"{k}={v}" for k, v in sorted(mine.items())) + " respected"
        return NcclLogCapture(diag, said, keep)
    return NcclLogCapture({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": SUBSYS, "NCCL_DEBUG_FILE": LOG_NAME, **diag}, "",
                          keep)


def read_diag(capture: NcclLogCapture, runs: Dict[str, NodeRun], with_stderr: bool = True) -> None:
    """NCCL's DIAG report, which bypasses NCCL_DEBUG_FILE: rank 0's standard output (the launch's stderr where
    the launcher merges them), kept with the node's summary."""
    for node, run in runs.items():
        lines = run.diag + ((run.stderr or "").splitlines() if with_stderr else [])
        said = summarize(line for line in lines if "NCCL DIAG" in line)
        diag = [r for r in said["ranks"] if r["diag"]]
        if diag:
            capture.summaries.setdefault(node, {"ranks": [], "files": 0})["ranks"] += diag


def _pattern(debug_file: str) -> str:
    """NCCL_DEBUG_FILE's name as a shell glob (%h, %p and NCCL's other fields: any)."""
    return "".join("*" if part.startswith("%") else part for part in _split_fields(debug_file))


def _split_fields(text: str) -> List[str]:
    parts, i = [], 0
    while i < len(text):
        if text[i] == "%" and i + 1 < len(text):
            parts.append(text[i:i + 2])
            i += 2
        else:
            parts.append(text[i])
            i += 1
    return parts


def read_command(node: Node, run_dir: str, pattern: str, remove: bool, keep_in: str = "") -> str:
    """On the node: summarize the NCCL log files of the run, then remove them, or move them to keep_in (a
    directory under the node's home: the run directory goes with the run)."""
    glob_path = pattern if pattern.startswith("/") else os.path.join(run_dir, pattern)
    summarize_cmd = inline_command(interpreter(node), "nccl_log_reader.py", [])
    # the glob expands on the node; no file: the reader gets none and says no rank
    files = f"set -- {shlex.quote(os.path.dirname(glob_path))}/{os.path.basename(glob_path)}; " \
            f"[ -e \"$1\" ] || set --; "
    cleanup = ' ; rm -f -- "$@"' if remove else ""
    if keep_in:
        cleanup = f' ; [ $# -eq 0 ] || {{ mkdir -p "$HOME/{keep_in}" && mv -- "$@" "$HOME/{keep_in}/"; }}'
    return f"{files}{summarize_cmd} \"$@\"{cleanup}"


def read_captured(cluster: "Cluster", nodes: Sequence[Node], run_dirs: Dict[str, str], capture: NcclLogCapture,
                  runs: Dict[str, NodeRun], user_env: Dict[str, str]) -> NcclLogCapture:
    """Each node's summary of its ranks' NCCL lines (from their files, or their stderr where NCCL wrote to it)."""
    debug_file = capture.env.get("NCCL_DEBUG_FILE") or user_env.get("NCCL_DEBUG_FILE")
    if debug_file:
        _read_files(cluster, nodes, run_dirs, capture, debug_file)
    elif user_env.get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE"):
        for node, run in runs.items():     # the user's NCCL_DEBUG without a file: NCCL wrote to the ranks' stderr
            capture.summaries[node] = summarize((run.stderr or "").splitlines())
    else:
        for node in runs:
            capture.problems[node] = (f"NCCL_DEBUG={user_env.get('NCCL_DEBUG')} is set in your environment: NCCL "
                                      f"says too little of its path at that level")
    read_diag(capture, runs, with_stderr=bool(debug_file))     # else the stderr summary above holds them
    return capture


def _read_files(cluster: "Cluster", nodes: Sequence[Node], run_dirs: Dict[str, str], capture: NcclLogCapture,
                debug_file: str) -> None:
    ours = "NCCL_DEBUG_FILE" in capture.env
    remove = not capture.keep and ours     # a user's own file is theirs: never removed
    if capture.keep and ours:
        capture.kept_in = f"clustercheck-logs/{os.path.basename(os.path.dirname(next(iter(run_dirs.values()))))}" \
            if run_dirs else ""
    commands = {n.name: read_command(n, run_dirs[n.name], _pattern(debug_file), remove, capture.kept_in)
                for n in nodes if n.name in run_dirs}
    results = cluster.each(lambda transport, node: transport.run(commands[node.name], READ_TIMEOUT_S),
                           [n for n in nodes if n.name in commands], what="reading NCCL's logs")
    for result in results:
        if not result.ok:
            capture.problems[result.node] = result.detail or result.outcome.value
            continue
        try:
            capture.summaries[result.node] = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            capture.problems[result.node] = "the node's NCCL log summary could not be read"


def unread(capture: NcclLogCapture) -> Optional[str]:
    """Why no path could be read on any node ("" where some could)."""
    if any(s.get("ranks") for s in capture.summaries.values()):
        return ""
    if capture.problems:
        return "; ".join(f"{n}: {why}" for n, why in list(capture.problems.items())[:3])
    return "no NCCL line was written (did the ranks reach NCCL's init?)"


def captured_paths(stages: Sequence[Optional[RanksRun]]) -> Dict[str, NodePath]:
    """The path NCCL took on each node, from the launches' captures ({} on Gloo or where none came back)."""
    summaries: Dict[str, Dict] = {}
    for stage in stages:
        capture = stage.nccl if stage is not None else None
        for node, summary in ((capture.summaries if capture else {}) or {}).items():
            merged = summaries.setdefault(node, {"ranks": [], "files": 0})
            merged["ranks"] += summary.get("ranks") or []
            merged["files"] += int(summary.get("files") or 0)
    return paths_by_node(summaries)


def capture_findings(stages: Sequence[Optional[RanksRun]], probed: Sequence[Probed]) -> List[Finding]:
    """Which path NCCL really took, judged against what each node has; what could not be read, said."""
    captures = [s.nccl for s in stages if s is not None and s.nccl is not None]
    if not captures:
        return []
    paths = captured_paths(stages)
    findings = judge_paths(paths, {p.name: p.facts for p in probed})
    findings += judge_nccl_diag([r for p in paths.values() for r in p.ranks])
    why = unread(captures[0])
    if why:
        findings.append(Finding("nccl.path", Status.UNKNOWN, f"could not read the path NCCL took: {why}",
                                [captures[0].said] if captures[0].said else [],
                                "rerun with NCCL_DEBUG unset (clustercheck captures NCCL's INFO log itself), or "
                                "NCCL_DEBUG=INFO NCCL_DEBUG_FILE=nccl.%h.%p.log", []))
    elif captures[0].said:
        findings.append(Finding("nccl.capture", Status.OK, f"NCCL's log: {captures[0].said}"))
    if captures[0].kept_in:
        findings.append(Finding("nccl.capture", Status.OK, f"the ranks' NCCL logs are kept in "
                                                           f"~/{captures[0].kept_in} on each node"))
    return findings
