"""The records of a torchrun launch (what to start, what every node ran and said) and how they read.

Pure data and text: the judges of bench and smoke read these without the launcher itself
(torchrun.py, which starts and follows the ranks over the connections).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from clustercheck.ranks.forensics import Forensics

DEFAULT_RDZV_PORT = 29400     # torchrun's c10d rendezvous (--rdzv-endpoint): net tests it, bench and smoke use it


@dataclass
class NodeRun:
    """One node's torchrun: its events, how it ended, and what it said on stderr."""

    node: str
    events: List[Dict] = field(default_factory=list)
    exit_code: Optional[int] = None     # None: still running at the deadline (killed then)
    lost: bool = False                  # the connection to the node dropped
    error: str = ""                     # could not start, or the telling line of stderr
    stderr: str = ""                    # all of it that was kept (its head and its last megabytes)
    stderr_tail: List[str] = field(default_factory=list)
    diag: List[str] = field(default_factory=list)      # NCCL's DIAG report (2.31+): rank 0's stdout, not its events
    ended_s: Optional[float] = None     # seconds after launch
    cut_short: bool = False             # stopped by the tool because another node had failed


@dataclass
class RanksRun:
    """One run of ranks across the nodes: every node's events and how its ranks ended, and the run's settings.
    A torchrun launch of the tool's (ranks/torchrun.py) or the job's own ranks (the check inside the job,
    injob/judge.py): the bench's and the smoke's judges read it, whoever started the ranks."""

    name: str
    runs: Dict[str, NodeRun]
    wall_s: float
    config: Dict

    stalled_s: Optional[float] = None    # stopped after this long without progress (None: it did not stall)
    forensics: Optional[Forensics] = None  # who was stuck where, from the stacks taken before it was stopped
    nccl: Optional[Any] = None             # ranks/nccl_capture.NcclLogCapture: the path NCCL took, per node

    def events(self, kind: str) -> List[Dict]:
        return [e for run in self.runs.values() for e in run.events if e.get("event") == kind]

    @property
    def start(self) -> Optional[Dict]:
        found = self.events("start")
        return found[0] if found else None


@dataclass
class Launch:
    """What to start: the script's path on each node, its arguments, ranks per node, environment."""

    name: str
    script_paths: Dict[str, str]
    args: Sequence[str]
    nproc: Dict[str, int]
    rdzv_port: int
    timeout_s: float
    env: Dict[str, str] = field(default_factory=dict)
    config: Dict = field(default_factory=dict)   # recorded with the stage
    stall_s: Optional[float] = None              # no progress for this long (once there was some): a hang
    stall_cap_s: Optional[float] = None          # the adaptive window never grows past this (bench: its op timeout)
    capture_nccl: bool = False                   # NCCL's INFO log to a file per rank, summarised per node
    keep_logs: bool = False                      # and the files kept in the run directory


LAUNCHERS = {"srun": "torchrun on every node through Slurm job steps (srun --overlap)",
             "ssh": "torchrun on every node over SSH", "local": "torchrun on this machine"}


def launched_by(stages: Sequence[RanksRun]) -> str:
    """", torchrun on every node through Slurm job steps (srun --overlap)" for a header line ("" if none ran)."""
    kinds = [s.config.get("launcher") for s in stages if s is not None and s.config.get("launcher")]
    return f", {LAUNCHERS.get(kinds[0], kinds[0])}" if kinds else ""


def stalled_text(event: Dict) -> str:
    """The progress line of a run about to be stopped: what happens in the seconds before it is."""
    why = (f"no progress for {event['quiet_s']:.0f} s" if event.get("quiet_s") is not None
           else "still running at the deadline")
    return f"{why}: taking every rank's stack on {len(event.get('nodes') or [])} node(s) before stopping the run"


def telling_line(lines: List[str]) -> str:
    """The line of stderr that says what went wrong (torchrun buries it in tracebacks)."""
    keep = [line.strip() for line in lines if line.strip() and not line.startswith((" ", "Traceback", "[W", "W1",
                                                                                       "warnings.warn"))]
    keep = [line for line in keep if "FutureWarning" not in line and "UserWarning" not in line]
    for marker in ("Error", "error", "Exception", "failed", "Failed", "Timeout", "timed out", "Killed"):
        hits = [line for line in keep if marker in line]
        if hits:
            return hits[-1][:400]
    return keep[-1][:400] if keep else ""


# What a process that aborted while the interpreter or C++ runtime tore down prints (std::terminate on a
# joinable std::thread, a forced unwind caught without rethrow, CPython's fatal abort), and how torchrun
# reports a worker ended by SIGABRT.
ABORT_MARKS = ("terminate called without an active exception", "FATAL: exception not rethrown",
               "Fatal Python error: Aborted", "Signal 6 (SIGABRT)", "exitcode  : -6", "exitcode: -6")


def aborted_at_exit(run: NodeRun) -> bool:
    """The node's torchrun failed only because a rank aborted (SIGABRT) as it exited: judged with the
    run's summary, which proves every rank finished training, this is teardown, not a crash in training."""
    return run.exit_code not in (0, None) and not run.lost and any(mark in run.stderr for mark in ABORT_MARKS)


def ended_well(stage: Optional["RanksRun"], summary: Optional[Dict]) -> bool:
    """Every rank finished (the summary, which every rank's numbers went into) and every node's torchrun
    ended cleanly, or failed only by an abort at exit."""
    return (stage is not None and summary is not None
            and all(r.exit_code == 0 or aborted_at_exit(r) for r in stage.runs.values()))
