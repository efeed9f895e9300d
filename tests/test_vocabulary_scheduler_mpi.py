"""The schedulers' and the MPI launchers' rows (clustercheck/vocabulary/scheduler.py, mpi.py): each row reads a line
made from the format string or help text it cites (the source named beside each line), healthy lines read as
nothing, and whole failure logs replayed through smoke's classifier name the cause."""

import pytest

from clustercheck.ranks.runs import NodeRun
from clustercheck.stages.smoke.classify import classify, is_warning
from clustercheck.vocabulary import messages, mpi, read_line, scheduler
from clustercheck.vocabulary.kinds import FAILED

# (line, kind, code, tier or None for the kind's own): each instantiated from the format string its row cites.
SCHEDULER = [
    # src/slurmd/slurmstepd/req.c: "*** %s ON %s CANCELLED AT %s DUE TO ... ***"
    ("slurmstepd: error: *** JOB 5521 ON gpu-07 CANCELLED AT 2024-03-01T10:00:00 DUE TO TIME LIMIT ***",
     "scheduler", "time limit", None),
    ("slurmstepd: error: *** STEP 5521.0 ON gpu-07 CANCELLED AT 2024-03-01T10:00:00 DUE TO PREEMPTION ***",
     "scheduler", "preemption", None),
    ("slurmstepd: error: *** JOB 5521 ON gpu-07 CANCELLED AT 2024-03-01T10:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD "
     "LOG FOR DETAILS ***", "scheduler", "node failure", None),
    ("srun: error: Node failure on gpu-08", "scheduler", "node failure", None),
    ("slurmstepd: error: *** JOB 608 ON n3 CANCELLED AT 2022-08-12T10:00:00 DUE TO JOB REQUEUE ***", "scheduler",
     "requeued", None),
    ("slurmstepd: error: *** JOB 608 ON n3 CANCELLED AT 2022-08-12T10:00:00 DUE TO SOMETHING NEW ***", "scheduler",
     "cancelled for a reason", None),
    ("slurmstepd: error: *** STEP 7.1 ON k65 CANCELLED AT 2023-04-13T18:23:49 ***", "scheduler", "cancelled", FAILED),
    ("slurmstepd: error: *** STEP 7.0 ON k65 CANCELLED AT 2023-04-13T18:23:49 DUE TO TASK FAILURE ***", "scheduler",
     "task failure", FAILED),
    ("slurmstepd: error: *** JOB 7 ON k65 CANCELLED AT 2023-04-13T18:23:49 DUE to SIGNAL Terminated ***", "scheduler",
     "cancelled by signal", FAILED),
    ("slurmstepd: error: *** STEP 7.0 ON k65 FAILED (non-zero exit code or other failure mode) ***", "scheduler",
     "step failed", FAILED),
    # src/slurmd/slurmstepd/step_terminate_monitor.c; slurm_errno.c ESLURMD_KILL_TASK_FAILED
    ("slurmstepd: error: *** STEP 7.0 STEPD TERMINATED ON k65 AT 2023-04-13T18:30:00 DUE TO JOB NOT ENDING WITH "
     "SIGNALS ***", "scheduler", "unkillable step", None),
    ("slurmd: error: Task launch for StepId=7.0 failed on node k65: Kill task failed", "scheduler", "task launch",
     None),
    ("slurmctld: error: node k65: Kill task failed", "scheduler", "unkillable step", None),
    # src/srun/launch.c, src/srun/allocate.c, src/sbatch/sbatch.c, src/salloc/salloc.c
    ("srun: error: Unable to create step for job 4359715: More processors requested than permitted", "scheduler",
     "step creation", None),
    ("srun: error: Unable to allocate resources: Requested node configuration is not available", "scheduler",
     "step creation", None),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     "scheduler", "submission refused", None),
    ("salloc: error: Job submit/allocate failed: Job violates accounting/QOS policy", "scheduler",
     "submission refused", None),
    ("srun: error: Job allocation 881 has been revoked", "scheduler", "submission refused", None),
    # src/api/step_launch.c, src/srun/launch.c
    ("srun: error: Task launch for StepId=881.0 failed on node n2: Socket timed out on send/recv operation",
     "scheduler", "task launch", None),
    ("srun: error: task 3 launch failed: Slurmd could not execve job", "scheduler", "task launch", None),
    ("srun: error: timeout waiting for task launch, started 6 of 8 tasks", "scheduler", "task launch", None),
    ("srun: error: Application launch failed: Job prolog failed", "scheduler", "task launch", None),
    # slurm_errno.c and auth/munge
    ("slurmd: error: Invalid job credential from 1000@10.0.0.5: Job credential expired", "scheduler", "credential",
     None),
    ("srun: error: Munge decode failed: Expired credential", "scheduler", "credential", None),
    ("srun: error: Unable to confirm allocation for job 881: Zero Bytes were transmitted or received", "scheduler",
     "controller communication", None),
    # task/cgroup (before and since 23.02), jobacct_gather, job_mem_limit.c, srun's task exit
    ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=25981927.1. Some of your processes may have been "
     "killed by the cgroup out-of-memory handler.", "killed", "oom-kill", None),
    ("slurmstepd: error: Detected 2 oom_kill events in StepId=881.0. Some of the step tasks have been OOM Killed.",
     "killed", "oom-kill", None),
    ("srun: error: k300: task 2: Out Of Memory", "killed", "oom-kill", None),
    ("slurmstepd: error: StepId=881.0 exceeded memory limit (33554432 > 16777216), being killed", "killed",
     "memory limit", None),
    ("slurmd: Job 881 exceeded memory limit (33554432>16777216), cancelling it", "killed", "memory limit", None),
    # src/slurmd/slurmstepd/task.c "execve(): %s: %m", "execve(): bad interpreter(%s): %m"
    ("slurmstepd: error: execve(): python3: No such file or directory", "missing-file", "execve ENOENT", None),
    ("slurmstepd: error: execve(): bad interpreter(/opt/venv/bin/python): No such file or directory",
     "missing-file", "execve ENOENT", None),
    ("slurmstepd: error: execve(): ./train.sh: Permission denied", "permission", "execve EACCES", None),
    # src/plugins/mpi/pmix PMIXP_ERROR (" %s: %s: %s [%d]: %s:%d: " format), mpi/pmi2, interfaces/mpi.c
    ("slurmstepd: error:  mpi/pmix_v3: pmixp_p2p_send: n2 [1]: pmixp_utils.c:372: send failed, rc=1001, exceeded "
     "the retry limit", "mpi", "mpi/pmix", None),
    ("slurmstepd: error:  mpi/pmix_v4: pmixp_coll_ring_check: n1 [0]: pmixp_coll_ring.c:736: 0x7f: collective "
     "timeout seq=0", "mpi", "mpi/pmix", None),
    ("slurmstepd: error: mpi/pmi2: failed to send temp kvs to compute nodes", "mpi", "mpi/pmi2", None),
    ("srun: error: Invalid MPI type 'pmix', --mpi=list for acceptable types", "mpi", "mpi plugin", None),
    ("srun: error: MPI: Cannot create context for mpi/pmix", "mpi", "mpi plugin", None),
    ("srun: error: Couldn't load specified plugin name for mpi/pmix_v3: Plugin init() callback failed", "mpi",
     "mpi plugin", None),
    # srun's task exit: "%s: %s %s: %s%s" with strsignal()
    ("srun: error: gpu-07: task 0: Killed", "killed", "task SIGKILL", None),
    ("srun: error: gpu-07: tasks 0-3: Segmentation fault (core dumped)", "crashed", "task SIGSEGV", None),
    ("srun: error: gpu-07: task 5: Bus error", "crashed", "task SIGBUS", None),
    ("srun: error: gpu-07: task 1: Aborted (core dumped)", "crashed", "task SIGABRT", FAILED),
    ("srun: error: gpu-07: task 1: Illegal instruction", "crashed", "task SIGILL", None),
    ("srun: error: gpu-07: task 1: Floating point exception", "crashed", "task SIGFPE", None),
    # OpenPBS src/resmom/mom_main.c "=>> PBS: job killed: %s"
    ("=>> PBS: job killed: walltime 86415 exceeded limit 86400", "scheduler", "time limit (PBS, LSF)", None),
    ("=>> PBS: job killed: mem 4194304kb exceeded limit 2097152kb", "killed", "memory limit (PBS)", None),
    ("=>> PBS: job killed: vmem 9194304kb exceeded limit 8097152kb", "killed", "memory limit (PBS)", None),
    ("=>> PBS: job killed: ncpus 17.3 exceeded limit 16 (burst)", "scheduler", "limit (PBS)", None),
    # Torque's end-of-job mail (msg_momjoboverwalltimelimit, msg_momjobovermemlimit); the walltime line as
    # cBio/cbio-cluster#256 shows it (issue 48b's build half)
    ("Job exceeded its walltime limit. Job was aborted", "scheduler", "time limit (Torque)", None),
    ("Job exceeded a memory resource limit (vmem, pvmem, etc.). Job was aborted", "killed", "memory limit (Torque)",
     None),
    # LSF's termination reasons (bacct / bhist -l)
    ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "scheduler", "time limit (PBS, LSF)", None),
    ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", "killed", "memory limit (LSF)", None),
    ("TERM_CPULIMIT: job killed after reaching LSF CPU usage limit.", "scheduler", "limit (LSF)", None),
    ("TERM_PREEMPT: job killed after preemption.", "scheduler", "preemption (LSF)", None),
    ("TERM_ZOMBIE: job exited while LSF is not available.", "scheduler", "node failure (LSF)", None),
    ("TERM_OWNER: job killed by owner.", "scheduler", "killed by owner (LSF)", FAILED),
    ("TERM_CWD_NOTEXIST: current working directory is not accessible or does not exist on the execution host.",
     "missing-file", "working directory (LSF)", None),
]

MPI = [
    # open-mpi/ompi v4.1.8 orte/mca/errmgr/base/help-errmgr-base.txt; openpmix/prrte help-errmgr-base.txt
    ("ORTE was unable to reliably start one or more daemons.", "mpi", "daemon launch", None),
    ("prterun was unable to reliably start one or more daemons.", "mpi", "daemon launch", None),
    ("An ORTE daemon has unexpectedly failed after launch and before", "mpi", "daemon failed", None),
    ("An PRTE daemon has unexpectedly failed after launch and before", "mpi", "daemon failed", None),
    ("ORTE has lost communication with a remote daemon.", "peer-lost", "lost daemon", None),
    ("PRTE has lost communication with a remote daemon.", "peer-lost", "lost daemon", None),
    ("mpirun has detected that a required daemon terminated during execution", "peer-lost", "lost daemon", None),
    ("ORTE is unable to establish a communication connection to the", "mpi", "no connect", None),
    ("ORTE does not know how to route a message to the specified daemon", "mpi", "no connect", None),
    # orte/mca/plm/base/help-plm-base.txt, plm/rsh/help-plm-rsh.txt
    ("A daemon died unexpectedly with status 127 while attempting", "mpi", "daemon died at launch", None),
    ("A daemon died unexpectedly on signal 1  while attempting to", "mpi", "daemon died at launch", None),
    ("The rsh PLS component was not able to find the executable \"orted\" in", "mpi", "no orted", None),
    ("The value of the MCA parameter \"plm_rsh_agent\" was set to a path", "mpi", "no orted", None),
    # orte/mca/oob/tcp/help-oob-tcp.txt
    ("Open MPI detected a mismatch in versions between two processes.  This", "mpi", "oob", None),
    ("No sockets were able to be opened on the available protocols", "mpi", "oob", None),
    ("Unfortunately, the connection was refused due to a failure to", "mpi", "oob", None),
    # opal/mca/btl/tcp/help-mpi-btl-tcp.txt
    ("An MPI communication peer process has unexpectedly disconnected.  This", "peer-lost", "peer hung up", None),
    ("WARNING: Open MPI failed to TCP connect to a peer MPI process.  This", "mpi", "tcp connect", None),
    # help-orte-runtime.txt, help-mpi-runtime.txt, help-orterun.txt, help-mpi-errors.txt, help-mca-bml-r2.txt
    ("It looks like orte_init failed for some reason; your parallel process is", "mpi", "init failed", None),
    ("It looks like MPI_INIT failed for some reason; your parallel process is", "mpi", "init failed", None),
    ("Open RTE was unable to initialize properly.  The error occured while", "mpi", "init failed", None),
    ("[gpu01:12345] *** An error occurred in MPI_Init_thread", "mpi", "MPI_Init", None),
    ("MPI_INIT has failed because at least one MPI process is unreachable", "mpi", "unreachable", None),
    ("At least one pair of MPI processes are unable to reach each other for", "mpi", "unreachable", None),
    ("PMIx_Init failed for the following reason:", "mpi", "direct launch", None),
    ("No PMIx server was reachable, but a PMI1/2 was detected.", "mpi", "direct launch", None),
    ("The application appears to have been direct launched using \"srun\",", "mpi", "direct launch", None),
    # the runtimes' error logs: ORTE_ERROR_LOG, OPAL_ERROR_LOG, PMIX_ERROR_LOG, PRTE_ERROR_LOG
    ("[n1:01234] [[5120,0],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer in file util/show_help.c "
     "at line 501", "mpi", "runtime error log", FAILED),
    ("[n1:01234] OPAL ERROR: Not initialized in file pmix3x_client.c at line 112", "mpi", "runtime error log",
     FAILED),
    ("[n1:01234] PMIX ERROR: UNREACHABLE in file ptl_tcp_component.c at line 1849", "mpi", "runtime error log",
     FAILED),
    # help-orterun.txt / help-prun.txt: starting the program
    ("mpirun was unable to find the specified executable file, and therefore", "missing-file",
     "executable not found", None),
    ("prterun was unable to find the specified executable file, and therefore did", "missing-file",
     "executable not found", None),
    ("change to the specified working directory:", "missing-file", "working directory", None),
    ("the specified working directory:", "missing-file", "working directory", None),
    ("mpirun was unable to launch the specified application as it could not access", "permission",
     "executable not accessible", None),
    ("access an executable:", "permission", "executable not accessible", None),
    ("Error: system limit exceeded on number of pipes that can be open", "open-files", "system limit", None),
    ("mpirun was unable to start the specified application as it encountered an", "mpi", "failed to start", None),
    # help-orte-rmaps-base.txt / help-prte-rmaps-base.txt
    ("There are not enough slots available in the system to satisfy the 16", "mpi", "not enough slots", None),
    # opal/mca/btl/openib/btl_openib_component.c handle_wc, help-mpi-btl-openib.txt
    ("[[43536,1],3][btl_openib_component.c:3645:handle_wc] from gpu01 to: gpu02 error polling LP CQ with status "
     "RETRY EXCEEDED ERROR status number 12 for wr_id 2c5a000 opcode 0  vendor error 129 qp_idx 0", "ib",
     "openib completion", None),
    ("[gpu01][[43536,1],3][btl_openib_component.c:3769:poll_device] error polling HP CQ with -2 errno says No such "
     "file or directory", "ib", "openib completion", None),
    # opal/mca/btl/vader/btl_vader_get.c "Read %ld, expected %lu, errno = %d" (horovod/horovod#1167, in a container)
    ("[1,1]<stderr>:[edc6f559242d:00026] Read -1, expected 36864, errno = 1", "ptrace", "vader CMA copy", None),
    ("The InfiniBand retry count between two MPI processes has been", "ib", "openib retry exceeded", None),
    ("The OpenFabrics \"receiver not ready\" retry count on a per-peer", "ib", "openib retry exceeded", None),
    # pmodels/mpich src/pm/hydra: HYDU_error_printf "[%s] %s (%s:%d): " + the message
    ("[proxy:0:0@n1] HYDU_create_process (lib/utils/launch.c:73): execvp error on file train (No such file or "
     "directory)", "missing-file", "execvp ENOENT", None),
    ("[proxy:0:0@n1] HYDU_create_process (lib/utils/launch.c:73): execvp error on file ./a.out (Permission denied)",
     "permission", "execvp EACCES", None),
    ("[proxy:0:1@n2] main (proxy/pmip.c:101): unable to connect to server n1 at port 40123 (check for firewalls!)",
     "mpi", "proxy connect", None),
    ("[mpiexec@n1] HYDU_sock_connect (lib/utils/sock.c:141): unable to connect from \"n1\" to \"n2\" (No route to "
     "host)", "mpi", "proxy connect", None),
    ("[mpiexec@n1] HYDT_bsci_launch_procs (lib/tools/bootstrap/src/bsci_launch.c:17): launcher returned error while "
     "launching processes", "mpi", "launch failed", None),
    ("[mpiexec@n1] HYDT_bscu_wait_for_completion (tools/bootstrap/utils/bscu_wait.c:76): one of the processes "
     "terminated badly; aborting", "mpi", "proxy terminated badly", FAILED),
    # a rank ended by a signal: Open MPI 4's one line, PRRTE's wrapped second line, Hydra's exit string
    ("mpirun noticed that process rank 1 with PID 0 on node gpu02 exited on signal 9 (Killed).", "killed",
     "exited on SIGKILL", None),
    ("signal 9 (Killed).", "killed", "exited on SIGKILL", None),
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)", "killed", "exited on SIGKILL", None),
    ("mpirun noticed that process rank 0 with PID 7 on node n1 exited on signal 11 (Segmentation fault).", "crashed",
     "exited on SIGSEGV", None),
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Segmentation fault (signal 11)", "crashed",
     "exited on SIGSEGV", None),
    ("signal 7 (Bus error).", "crashed", "exited on SIGBUS", None),
    ("mpirun noticed that process rank 2 with PID 9 on node n1 exited on signal 4 (Illegal instruction).", "crashed",
     "exited on SIGILL", None),
    ("mpirun noticed that process rank 2 with PID 9 on node n1 exited on signal 8.", "crashed", "exited on SIGFPE",
     None),
    ("mpirun noticed that process rank 2 with PID 9 on node n1 exited on signal 6 (Aborted).", "crashed",
     "exited on SIGABRT", FAILED),
]


@pytest.mark.parametrize("line, kind, code, tier", SCHEDULER + MPI, ids=[c[0][:48] for c in SCHEDULER + MPI])
def test_each_row_reads_the_line_its_source_prints(line, kind, code, tier):
    meaning = read_line(line)
    assert meaning is not None and (meaning.kind, meaning.code) == (kind, code), meaning
    assert meaning.tier == tier if tier is not None else meaning.row_tier == -1   # None: the kind's own tier


@pytest.mark.parametrize("module, lines", [(scheduler, SCHEDULER), (mpi, MPI)], ids=["scheduler", "mpi"])
def test_every_row_has_a_line_and_lives_in_its_layers_module(module, lines):
    assert {row.code for row in module.ROWS} == {code for _, _, code, _ in lines}
    assert {row.space for row in module.ROWS} == {module.__name__.rsplit(".", 1)[1]}
    assert not [row for row in messages.ROWS if row.space in ("scheduler", "mpi")]   # moved out of messages.py


HEALTHY = [
    # srun / sbatch / salloc going about a healthy job
    "srun: job 123 queued and waiting for resources",
    "srun: job 123 has been allocated resources",
    "srun: Step created for StepId=123.0",
    "salloc: Granted job allocation 123",
    "Submitted batch job 123",
    "srun: Job 123 step creation temporarily disabled, retrying (Requested nodes are busy)",
    "slurmstepd: info: StepId=123.0 hit memory limit at least once during execution. This may or may not result in "
    "some failure.",
    "srun: error: n1: tasks 0-15: Terminated",          # SIGTERM: how Slurm stops the other tasks
    "srun: error: n1: task 3: Exited with exit code 1",  # only that a task failed: its own lines say why
    "   RunTime=00:10:00 TimeLimit=1-00:00:00 TimeMin=N/A",
    "   JobState=RUNNING Reason=None Dependency=(null)",
    "export TERM=xterm-256color",
    # mpirun command lines and Open MPI's own healthy output
    "mpirun --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -np 16 -H n1:8,n2:8 python train.py",
    "mpirun -np 2 --mca btl openib,self,vader --mca plm_rsh_agent ssh ./a.out",
    "srun --mpi=pmix -n 16 python train.py",
    "mpirun noticed that process rank 3 with PID 4242 on node gpu02 exited on signal 15 (Terminated).",
    "Primary job  terminated normally, but 1 process returned",
    "a non-zero exit code. Per user-direction, the job has been aborted.",
    "signal 15 (Terminated).",
    "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Terminated (signal 15)",
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
    "The specified working directory was created.",
]


@pytest.mark.parametrize("line", HEALTHY)
def test_what_a_healthy_or_merely_echoing_run_prints_is_no_cause_of_these_layers(line):
    meaning = read_line(line)
    assert meaning is None or meaning.space not in ("scheduler", "mpi"), meaning


def test_open_mpis_warnings_that_it_falls_back_are_warnings_and_the_failed_tcp_connect_is_not():
    for line in ["WARNING: There was an error initializing an OpenFabrics device.",
                 "WARNING: There is at least one non-excluded one OpenFabrics device found,"]:
        assert is_warning(line), line
        meaning = read_line(line)
        assert meaning is None or meaning.space not in ("scheduler", "mpi"), meaning
    assert not is_warning("WARNING: Open MPI failed to TCP connect to a peer MPI process.  This")


def _cause(*nodes):
    runs = {f"n{i + 1}": NodeRun(f"n{i + 1}", exit_code=code, stderr="\n".join(lines))
            for i, (code, lines) in enumerate(nodes)}
    return classify(runs, 600)


def test_an_open_mpi_run_whose_rank_was_killed_names_the_kill_not_the_warnings_around_it():
    """Open MPI 4's mpirun output (help-orterun.txt [orterun:proc-aborted-strsignal] after errmgr's
    [normal-termination-but]), with the openib warning every rank printed at start."""
    log = ["--------------------------------------------------------------------------",
           "WARNING: There was an error initializing an OpenFabrics device.",
           "",
           "  Local host:   gpu02",
           "  Local device: mlx5_0",
           "--------------------------------------------------------------------------",
           "Primary job  terminated normally, but 1 process returned",
           "a non-zero exit code. Per user-direction, the job has been aborted.",
           "--------------------------------------------------------------------------",
           "mpirun noticed that process rank 1 with PID 0 on node gpu02 exited on signal 9 (Killed).",
           "--------------------------------------------------------------------------"]
    cause = _cause((137, log))
    assert cause.kind == "killed", cause


def test_prrte_wraps_the_signal_onto_its_own_line():
    log = ["--------------------------------------------------------------------------",
           "prterun noticed that process rank 0 with PID 5150 on node gpu01 exited on",
           "signal 11 (Segmentation fault).",
           "--------------------------------------------------------------------------"]
    assert _cause((139, log)).kind == "crashed"


def test_orted_not_found_on_the_remote_node_is_the_launcher_failing_to_start():
    log = ["bash: orted: command not found",
           "--------------------------------------------------------------------------",
           "ORTE was unable to reliably start one or more daemons.",
           "This usually is caused by:",
           "",
           "* not finding the required libraries and/or binaries on",
           "  one or more nodes. Please check your PATH and LD_LIBRARY_PATH",
           "  settings, or configure OMPI with --enable-orterun-prefix-by-default"]
    cause = _cause((1, log))
    assert cause.kind == "mpi" and "--prefix" in cause.remedy, cause


def test_slurms_pmix_plugin_failing_names_mpi_and_the_steps_cancellation_is_its_echo():
    n1 = ["slurmstepd: error:  mpi/pmix_v3: pmixp_p2p_send: n1 [0]: pmixp_utils.c:372: send failed, rc=1001, "
          "exceeded the retry limit",
          "slurmstepd: error: *** STEP 881.0 ON n1 CANCELLED AT 2024-05-02T11:00:00 ***",
          "srun: error: n1: task 0: Exited with exit code 1"]
    n2 = ["slurmstepd: error: *** STEP 881.0 ON n2 CANCELLED AT 2024-05-02T11:00:00 DUE TO TASK FAILURE ***"]
    cause = _cause((1, n1), (1, n2))
    assert (cause.kind, cause.nodes) == ("mpi", ["n1"]), cause


def test_a_cgroup_oom_kill_outranks_the_peers_echo_and_srun_names_the_task():
    n1 = ["slurmstepd: error: Detected 1 oom_kill event in StepId=881.0. Some of the step tasks have been OOM "
          "Killed.",
          "srun: error: gpu-07: task 3: Out Of Memory",
          "slurmstepd: error: *** STEP 881.0 ON gpu-07 CANCELLED AT 2024-05-02T11:00:00 DUE TO TASK FAILURE ***"]
    n2 = ["[rank5]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
          "[10.0.0.1]:12717"]
    cause = _cause((1, n1), (1, n2))
    assert (cause.kind, cause.nodes, cause.ranks) == ("killed", ["n1"], [3]), cause


def test_hydra_could_not_exec_the_program_on_a_node():
    log = ["[proxy:0:1@n2] HYDU_create_process (lib/utils/launch.c:73): execvp error on file train.py (No such file "
           "or directory)",
           "",
           "===================================================================================",
           "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
           "=   PID 4242 RUNNING AT n2",
           "=   EXIT CODE: 255",
           "=   CLEANING UP REMAINING PROCESSES",
           "=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES",
           "==================================================================================="]
    assert _cause((255, log)).kind == "missing-file"


def test_a_task_slurm_could_not_exec_is_a_missing_file_and_a_time_limit_ends_everything():
    missing = ["slurmstepd: error: execve(): /scratch/venv/bin/python: No such file or directory",
               "srun: error: n2: task 1: Exited with exit code 2"]
    assert _cause((2, missing)).kind == "missing-file"
    timeout = ["[rank0]: step 900 loss 1.23",
               "slurmstepd: error: *** STEP 881.0 ON n1 CANCELLED AT 2024-05-02T11:00:00 DUE TO TIME LIMIT ***",
               "srun: error: n1: task 0: Killed"]
    assert _cause((1, timeout)).kind == "scheduler"
