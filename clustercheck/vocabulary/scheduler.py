"""The schedulers' own messages: Slurm's srun, sbatch, salloc, slurmstepd and slurmd, its task/cgroup,
jobacct_gather, auth/munge and mpi (pmix, pmi2) plugins; OpenPBS's MOM; LSF's termination reasons. Each row cites
the file and the format string (SchedMD/slurm master, 2026-08; openpbs/openpbs master) whose output it reads.

The kind is what the user must do: the scheduler ended the step (time limit, preemption, a node failure, a
credential or a step it could not create: "scheduler"); a memory limit the scheduler enforced killed a task
("killed"); srun's MPI plugin could not wire the ranks up ("mpi"); a task could not exec its program
("missing-file", "permission"). A line that only says a step ended because something else failed (another
task, a signal someone sent) proves less than its kind: tier FAILED, any cause a rank shows says more.
"""

from __future__ import annotations

import signal
from typing import List

from clustercheck.vocabulary.kinds import FAILED
from clustercheck.vocabulary.spaces import Row
from clustercheck.vocabulary.system import SIGNAL_KINDS, WEAK_SIGNALS

SLURM = "SchedMD/slurm "
REQ = SLURM + "src/slurmd/slurmstepd/req.c "   # _handle_signal_container's "*** %s ON %s CANCELLED AT %s ... ***"
PBS = "openpbs/openpbs src/resmom/mom_main.c "
TORQUE = "adaptivecomputing/torque src/server (the job's end mail, req_jobobit.c) "
LSF = "IBM Spectrum LSF's termination reasons (bacct / bhist -l / the job report; lsbatch.h TERM_*) "

ROWS: List[Row] = [
    # ---- Slurm: slurmstepd's verdict on the step (src/slurmd/slurmstepd/req.c) ----------------------------------
    Row("scheduler", r"(?:CANCELLED AT \S+ )?DUE TO TIME LIMIT|Reason=TimeLimit|JobState=TIMEOUT|time limit exceeded|"
                     r"Job \d+ exceeded (?:its )?time", "scheduler",
        "time limit", REQ + "\"*** %s ON %s CANCELLED AT %s DUE TO TIME LIMIT ***\"; src/salloc/salloc.c \"Job %u "
                            "has exceeded its time limit and its allocation has been revoked.\""),
    Row("scheduler", r"(?:CANCELLED AT \S+ )?DUE TO PREEMPTION|[Pp]reempted\b|PREEMPTED", "scheduler", "preemption",
        REQ + "\"*** %s ON %s CANCELLED AT %s DUE TO PREEMPTION ***\""),
    Row("scheduler", r"(?:CANCELLED AT \S+ )?DUE TO NODE FAILURE|srun: error: Node failure on \S+|"
                     r"Node \S+ failed, job", "scheduler",
        "node failure", REQ + "\"*** %s ON %s CANCELLED AT %s DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS "
                              "***\"; src/srun/allocate.c, src/api/step_launch.c \"Node failure on %s\""),
    Row("scheduler", r"CANCELLED AT \S+ DUE TO [A-Z]", "scheduler", "cancelled for a reason",
        REQ + "\"*** %s ON %s CANCELLED AT %s DUE TO %s ***\" (a reason no other row names)"),
    Row("scheduler", r"CANCELLED AT \S+ DUE TO JOB REQUEUE", "scheduler", "requeued",
        REQ + "\"*** %s ON %s CANCELLED AT %s DUE TO JOB REQUEUE ***\" (scontrol requeue, or a preemption that "
              "requeues)"),
    Row("scheduler", r"(?:JOB|STEP) \d+(?:\.\d+)? ON \S+ CANCELLED AT \S+ \*\*\*", "scheduler",
        "cancelled", REQ + "\"*** %s ON %s CANCELLED AT %s ***\" (no reason: scancel, or Slurm ending the step after a "
                           "task failed: any cause a rank shows says more)",
        tier=FAILED),
    # Slurm's echo of another failure: a task failed (--kill-on-bad-exit), someone signalled the step
    Row("scheduler", r"CANCELLED AT \S+ DUE TO TASK FAILURE", "scheduler", "task failure",
        REQ + "\"*** %s ON %s CANCELLED AT %s DUE TO TASK FAILURE ***\" (another task failed first)", tier=FAILED),
    Row("scheduler", r"CANCELLED AT \S+ DUE to SIGNAL \w+", "scheduler", "cancelled by signal",
        REQ + "\"*** %s ON %s CANCELLED AT %s DUE to SIGNAL %s ***\" (strsignal: Terminated, Killed)", tier=FAILED),
    Row("scheduler", r"(?:JOB|STEP) \S+ ON \S+ FAILED \(non-zero exit code or other failure mode\)", "scheduler",
        "step failed", REQ + "\"*** %s ON %s FAILED (non-zero exit code or other failure mode) ***\"", tier=FAILED),
    # the node could not end the step's processes (stuck in D state: storage or a driver): Slurm drains it
    Row("scheduler", r"STEPD TERMINATED ON \S+ AT \S+ DUE TO JOB NOT (?:RUNNING|ENDING WITH SIGNALS)|"
                     r"\bKill task failed\b", "scheduler", "unkillable step",
        SLURM + "src/slurmd/slurmstepd/step_terminate_monitor.c \"*** %s STEPD TERMINATED ON %s AT %s DUE TO JOB NOT "
                "ENDING WITH SIGNALS ***\"; src/common/slurm_errno.c ESLURMD_KILL_TASK_FAILED \"Kill task failed\""),
    # ---- Slurm: allocations and steps srun, sbatch and salloc could not get ---------------------------------
    # (not "Job %u step creation temporarily disabled, retrying": an info() line of a step that waits and then runs)
    Row("scheduler", r"Unable to create step for job \d+|Unable to allocate resources:", "scheduler", "step creation",
        SLURM + "src/srun/launch.c \"Unable to create step for job %u: %m\"; src/srun/allocate.c, src/salloc/salloc.c "
                "\"Unable to allocate resources: %m\""),
    Row("scheduler", r"Batch job submission failed: |Job submit/allocate failed: |"
                     r"Job allocation \d+ has been revoked", "scheduler", "submission refused",
        SLURM + "src/sbatch/sbatch.c \"Batch job submission failed: %m\"; src/salloc/salloc.c \"Job submit/allocate "
                "failed: %m\", src/srun/allocate.c \"Job allocation %u has been revoked\""),
    Row("scheduler", r"Task launch for \S+ failed on node \S+: |\btask \d+ launch failed: |"
                     r"Application launch failed: |timeout waiting for task launch, started \d+ of \d+ tasks|"
                     r"\bJob prolog failed\b|Slurmd could not (?:create a batch directory|set up environment|"
                     r"set UID or GID|execve job|connect IO)", "scheduler", "task launch",
        SLURM + "src/api/step_launch.c \"Task launch for %ps failed on node %s: %m\", \"task %u launch failed: %s\", "
                "\"timeout waiting for task launch, started %d of %d tasks\"; src/srun/launch.c \"Application launch "
                "failed: %m\"; src/common/slurm_errno.c ESLURMD_PROLOG_FAILED \"Job prolog failed\", "
                "ESLURMD_*_ERROR \"Slurmd could not ...\""),
    # ---- Slurm: credentials and the controller's answers (src/common/slurm_errno.c, auth/munge) -------------
    Row("scheduler", r"Invalid job credential|Job credential (?:revoked|expired|replayed)|Munge decode failed: |"
                     r"Invalid authentication credential|Authentication credential expired", "scheduler", "credential",
        SLURM + "src/common/slurm_errno.c ESLURMD_INVALID_JOB_CREDENTIAL \"Invalid job credential\", "
                "ESLURMD_CREDENTIAL_EXPIRED \"Job credential expired\", ESLURM_AUTH_CRED_INVALID \"Invalid "
                "authentication credential\"; src/slurmd/slurmd/req.c \"Invalid job credential from %u@%s: %m\"; "
                "src/plugins/auth/munge/auth_munge.c \"Munge decode failed: %s\" (munged down, clocks out of sync, "
                "another munge.key)"),
    Row("scheduler", r"Zero Bytes were transmitted or received|Unable to confirm allocation for job \d+",
        "scheduler", "controller communication",
        SLURM + "src/common/slurm_errno.c SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT \"Zero Bytes were transmitted or "
                "received\"; src/srun/allocate.c \"Unable to confirm allocation for job %u: %m\""),
    # ---- Slurm: memory (task/cgroup, jobacct_gather, srun) --------------------------------------------------
    Row("scheduler", r"oom[-_]kill event|Exceeded (?:job|step) memory limit|OOM ?Killed|oom_kill|"
                     r"task \d+: Out Of Memory",
        "killed", "oom-kill", SLURM + "src/plugins/task/cgroup/task_cgroup_memory.c \"Detected %lu oom_kill event%s in "
                                      "%ps. Some of the step tasks have been OOM Killed.\" (before: \"Detected %u "
                                      "oom-kill event(s) in %ps. Some of your processes may have been killed by the "
                                      "cgroup out-of-memory handler.\"); src/slurmd/slurmd/job_mem_limit.c \"Exceeded "
                                      "job memory limit\"; src/srun/launch.c \"%s: %s %s: Out Of Memory\""),
    Row("scheduler", r"exceeded (?:virtual )?memory limit \(\d+ ?> ?\d+\), (?:being killed|cancelling it)", "killed",
        "memory limit", SLURM + "src/interfaces/jobacct_gather.c \"%ps exceeded memory limit (%lu > %lu), being "
                                "killed\"; src/slurmd/slurmd/job_mem_limit.c \"Job %u exceeded memory limit "
                                "(%lu>%lu), cancelling it\""),
    # ---- Slurm: a task that could not exec its program (src/slurmd/slurmstepd/task.c) ---------------------
    Row("scheduler", r"execve\(\): [^:\n]+: No such file or directory|execve\(\): bad interpreter\(", "missing-file",
        "execve ENOENT", SLURM + "src/slurmd/slurmstepd/task.c \"execve(): %s: %m\", \"execve(): bad "
                                 "interpreter(%s): %m\" (the program, or its #! interpreter, is not on that node)"),
    Row("scheduler", r"execve\(\): [^:\n]+: Permission denied", "permission", "execve EACCES",
        SLURM + "src/slurmd/slurmstepd/task.c \"execve(): %s: %m\" with EACCES"),
    # ---- Slurm's MPI plugins: srun / slurmstepd could not wire the ranks up -----------------------------------
    Row("scheduler", r"\berror: +mpi/pmix(?:_v\d+)?: ", "mpi", "mpi/pmix",
        SLURM + "src/plugins/mpi/pmix/pmixp_debug.h PMIXP_ERROR: error(\" %s: %s: %s [%d]: %s:%d: \" format, "
                "plugin_type (\"mpi/pmix_v3\" ...), ...) (pmixp_coll_ring.c \"%p: collective timeout seq=%d\", "
                "mpi_pmix.c \"pmi/pmix: can not load PMIx library\", pmixp_client.c \"PMIx_server_init failed with "
                "error %d\")"),
    Row("scheduler", r"\berror: +mpi/pmi2: ", "mpi", "mpi/pmi2",
        SLURM + "src/plugins/mpi/pmi2/*.c error(\"mpi/pmi2: ...\") (pmi2.c \"mpi/pmi2: %d failed to send temp kvs to "
                "%s\", setup.c \"mpi/pmi2: failed to create tree socket: %m\")"),
    Row("scheduler", r"MPI: Cannot create context for |MPI: Unable to load any plugin|"
                     r"Invalid MPI type '[^']*', --mpi=list for acceptable types|"
                     r"Couldn't load specified plugin name for mpi/|unable to resolve MPI plugin offset from plugin_id",
        "mpi", "mpi plugin",
        SLURM + "src/interfaces/mpi.c \"MPI: Cannot create context for %s\", \"MPI: Unable to load any plugin\", "
                "\"%s: unable to resolve MPI plugin offset from plugin_id=%u\"; src/srun/srun_job.c \"Invalid MPI type "
                "'%s', --mpi=list for acceptable types\"; src/common/plugin.c \"Couldn't load specified plugin name for "
                "%s: %s\""),
    # ---- OpenPBS's MOM (src/resmom/mom_main.c: "=>> PBS: job killed: %s" with the limit it enforced) ------------
    Row("scheduler", r"PBS: job killed: walltime \d+ exceeded limit|TERM_RUNLIMIT: job killed", "scheduler",
        "time limit (PBS, LSF)", PBS + "\"=>> PBS: job killed: %s\" of \"walltime %lu exceeded limit %lu\"; LSF's "
                                       "TERM_RUNLIMIT \"job killed after reaching LSF run time limit\""),
    # Torque's server mails (and writes to the job's record) its verdict when the MOM killed the job for a limit
    Row("scheduler", r"Job exceeded its (?:walltime|cpu time) limit\. Job was aborted", "scheduler",
        "time limit (Torque)", TORQUE + "msg_momjoboverwalltimelimit \"Job exceeded its walltime limit. Job was "
                                        "aborted\", msg_momjobovercputlimit \"Job exceeded its cpu time limit. Job was "
                                        "aborted\" (after \"Aborted by PBS Server\")"),
    Row("scheduler", r"Job exceeded a memory resource limit \(vmem, pvmem, etc\.\)\. Job was aborted", "killed",
        "memory limit (Torque)", TORQUE + "msg_momjobovermemlimit \"Job exceeded a memory resource limit (vmem, "
                                          "pvmem, etc.). Job was aborted\""),
    Row("scheduler", r"PBS: job killed: (?:v?mem|pv?mem) \d+kb exceeded limit", "killed", "memory limit (PBS)",
        PBS + "\"=>> PBS: job killed: %s\" of \"mem %lukb exceeded limit %lukb\", \"vmem %lukb exceeded limit %lukb\""),
    Row("scheduler", r"PBS: job killed: (?:cput \d+|ncpus [\d.]+) exceeded limit", "scheduler", "limit (PBS)",
        PBS + "\"=>> PBS: job killed: %s\" of \"cput %lu exceeded limit %lu\", \"ncpus %.1f exceeded limit %lu "
              "(burst)\" (more threads than cores asked for: OMP_NUM_THREADS)"),
    # ---- LSF's termination reasons -----------------------------------------------------------------------------
    Row("scheduler", r"\bTERM_(?:MEMLIMIT|SWAP)\b", "killed", "memory limit (LSF)",
        LSF + "TERM_MEMLIMIT \"Job killed after reaching LSF memory usage limit\", TERM_SWAP \"Job killed after "
              "reaching LSF swap usage limit\""),
    Row("scheduler", r"\bTERM_(?:CPULIMIT|DEADLINE|WINDOW|PROCESSLIMIT|THREADLIMIT|LOAD)\b", "scheduler",
        "limit (LSF)", LSF + "TERM_CPULIMIT \"Job killed after reaching LSF CPU usage limit\", TERM_DEADLINE, "
                             "TERM_WINDOW \"Job killed after queue run window closed\", TERM_PROCESSLIMIT, "
                             "TERM_THREADLIMIT, TERM_LOAD \"Job killed after load exceeds threshold\""),
    Row("scheduler", r"\bTERM_PREEMPT\b", "scheduler", "preemption (LSF)", LSF + "TERM_PREEMPT \"Job killed after "
                                                                                 "preemption\""),
    Row("scheduler", r"\bTERM_(?:SLURM|ZOMBIE|RMS)\b", "scheduler", "node failure (LSF)",
        LSF + "TERM_ZOMBIE \"Job exited while LSF is not available\", TERM_SLURM \"Job terminated abnormally in "
              "SLURM (node failure)\", TERM_RMS \"Job exited from an RMS system error\""),
    Row("scheduler", r"\bTERM_(?:OWNER|ADMIN|FORCE_OWNER|FORCE_ADMIN|REQUEUE_OWNER|REQUEUE_ADMIN|BUCKET_KILL)\b",
        "scheduler", "killed by owner (LSF)",
        LSF + "TERM_OWNER \"Job killed by owner\", TERM_ADMIN \"Job killed by root or LSF administrator\" (bkill: who "
              "and why is in bhist -l)", tier=FAILED),
    Row("scheduler", r"\bTERM_CWD_NOTEXIST\b", "missing-file", "working directory (LSF)",
        LSF + "TERM_CWD_NOTEXIST \"Current working directory is not accessible or does not exist on the execution "
              "host\""),
]


def _task_signal_row(name: str) -> Row:
    """srun's report of a task a signal ended: "srun: error: %s: %s %s: %s%s" (hosts, "task"/"tasks", the task ids,
    strsignal, " (core dumped)"): printed at error level only while the step is not being cancelled."""
    text = signal.strsignal(getattr(signal, name))
    return Row("scheduler", rf"error: \S+: tasks? [\d,\-\[\]]+: {text}\b", SIGNAL_KINDS[name], f"task {name}",
               SLURM + f"src/srun/launch.c _task_finish: error(\"%s: %s %s: %s%s\", ..., strsignal()) with "
                       f"{name} ({text!r})",
               tier=FAILED if name in WEAK_SIGNALS else -1)


ROWS += [_task_signal_row(name) for name in SIGNAL_KINDS]
