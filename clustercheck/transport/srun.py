"""A node reached through Slurm: `srun --overlap` into the running allocation, no SSH at all.

Each node's commands go through the same session loop as over SSH (agent.py), started as one
job step per node: `srun --jobid=JOB --nodes=1 --ntasks=1 --nodelist=NODE --overlap --unbuffered
/bin/sh -c LOOP`. srun carries the loop's stdin and stdout, so the guarantees are the same: a
deadline per command, every command in its own process group, and when the tool closes the
step's stdin (Ctrl-C, a crash: the pipe closes with the process) the loop kills everything and
exits, which ends the step. What Slurm refuses (a node outside the allocation, a drained node, a
cancelled job) is the node's outcome, with Slurm's own message.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import List, Optional

from clustercheck.transport.agent import AgentUnavailable, Session, SessionLost
from clustercheck.transport.base import Outcome, TransportError
from clustercheck.transport.local import LocalTransport, ProcessPipe

HELLO_TIMEOUT_S = 60.0   # a step starts in ~50 ms; a busy slurmctld can take seconds
# What the job's own shape puts in the environment and srun would read as this step's request
# (eight tasks per node, a CPU count, GPUs per task...): the step is one task on one node.
STEP_SHAPE = ("SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK",
              "SLURM_GPUS_PER_TASK", "SLURM_TRES_PER_TASK", "SLURM_EXACT", "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_GPU",
              "SLURM_MEM_PER_NODE", "SLURM_DISTRIBUTION", "SLURM_CPU_BIND")


class StepPipe(ProcessPipe):
    """The session's srun. Closing it waits for the step to end; an srun that had to be killed
    leaves its step to Slurm, so the step is cancelled by its name (scancel JOB.STEP)."""

    GRACE_S = 10.0   # for srun to pass the closed stdin on and the step to end

    def __init__(self, argv, job_id: str, step_name: str):
        self.job_id, self.step_name = job_id, step_name
        super().__init__(argv)

    def close(self) -> None:
        super().close()
        if self.proc.returncode is not None and self.proc.returncode < 0:
            cancel_steps(self.job_id, self.step_name)


def cancel_steps(job_id: str, step_name: str) -> None:
    try:
        listed = subprocess.run(["squeue", "-s", "-h", "-j", job_id, "-o", "%i %j"], capture_output=True, text=True,
                                timeout=10).stdout
        steps = [line.split()[0] for line in listed.splitlines() if line.split()[1:] == [step_name]]
        if steps:
            subprocess.run(["scancel", "--signal=KILL", *steps], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        pass   # the job's end takes the step with it


def srun_argv(job_id: str, node: str, step_name: str = "clustercheck") -> List[str]:
    return ["env", *(arg for name in STEP_SHAPE for arg in ("-u", name)), "srun", f"--jobid={job_id}", "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--overlap",
            "--unbuffered", "--quiet", "--kill-on-bad-exit=0", "--cpu-bind=none", f"--job-name={step_name}"]


def allocation() -> Optional[str]:
    """The job id of the allocation this process runs in (SLURM_JOB_ID), if any.

    Not in a prolog or epilog (SLURM_SCRIPT_CONTEXT): no step can start there."""
    if os.environ.get("SLURM_SCRIPT_CONTEXT"):
        return None
    return os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID") or None


class SrunTransport(LocalTransport):
    """Commands on `name` through job steps of allocation `job_id`."""

    kind = "srun"

    def __init__(self, name: str, job_id: str, session: bool = True):
        super().__init__(name, session)
        self.job_id = job_id
        self.step_name = f"clustercheck-{os.getpid()}-{name}"   # this session's step, to cancel if need be
        self.prefix = srun_argv(job_id, name, self.step_name)
        self.refused: Optional[TransportError] = None   # Slurm said no once: every later call is told at once

    def connect(self) -> None:
        """Start the node's step now: what Slurm refuses is the node's outcome, before any work."""
        if shutil.which("srun") is None:
            raise TransportError(Outcome.SLURM_REFUSED, "srun is not installed on this machine")
        if self.use_session:
            self._session()
            return
        result = self._exec("true", HELLO_TIMEOUT_S)
        if not result.ok:
            raise TransportError(Outcome.SLURM_REFUSED, f"{self.name}: {result.stderr.strip() or result.detail}")

    def _new_session(self) -> Session:
        if self.refused is not None:
            raise self.refused
        try:
            return Session(self.name, lambda argv: StepPipe(self.prefix + list(argv), self.job_id, self.step_name),
                           HELLO_TIMEOUT_S)
        except AgentUnavailable as exc:
            self.refused = TransportError(Outcome.SLURM_REFUSED, f"{self.name}: {exc}")
            raise self.refused from None

    def _argv(self, command: str) -> list:
        return self.prefix + super()._argv(command)

    def _lost(self, exc: SessionLost, doing: str) -> TransportError:
        return TransportError(Outcome.SLURM_REFUSED, f"{self.name}: the job step ended while {doing} ({exc}): "
                                                     f"node down, or the job cancelled?")

    def put(self, data: bytes, name: str, mode: int = 0o600, timeout_s: float = 30.0) -> str:
        session = self._session()
        if session is None:
            raise TransportError(Outcome.SLURM_REFUSED, f"{self.name}: no job step to write {name} through "
                                                        f"({self.session_problem or 'sessions are off'})")
        try:
            return session.put(data, name, mode, timeout_s)
        except SessionLost as exc:
            raise self._lost(exc, f"writing {name}") from None
