"""The MPI launchers' own messages: Open MPI's help texts (ORTE, v4.1.8: orte/, ompi/, opal/), PRRTE's (Open MPI 5's
runtime: prterun, prted), PMIx's and the runtimes' error logs, and MPICH's Hydra (mpiexec, its proxies). Each row
cites the file and the topic or format string it reads.

A help text is several lines; a row reads one, so each topic is found by its distinctive line (its first, or the
line that names what failed). The kind is what the user must do: the launcher could not start or wire up the
ranks ("mpi"), it could not find or run the program ("missing-file", "permission"), it lost a daemon or a peer
that died ("peer-lost": the node that died says why), the InfiniBand transfer under Open MPI's openib BTL failed
("ib"). Where the launcher reports a rank ended by a signal ("mpirun noticed that process rank 0 ... exited on
signal 9 (Killed)"), the signal says the kind, as system.py's signal rows do (SIGKILL: killed; SIGSEGV, SIGBUS,
SIGILL, SIGFPE: crashed; SIGABRT a crash that proves only that the rank failed); SIGTERM, the launcher's own way
of stopping the others, has no row. Lines that only say a rank failed (Hydra's "BAD TERMINATION OF ONE OF YOUR
APPLICATION PROCESSES", Open MPI's "Primary job terminated normally, but 1 process returned a non-zero exit code")
have no row: the rank's own lines say why. Open MPI's WARNINGs that it falls back and carries on ("There was an
error initializing an OpenFabrics device", "no active ports detected") are warnings and have no row either.
"""

from __future__ import annotations

import re
import signal
from typing import List

from clustercheck.vocabulary.kinds import FAILED
from clustercheck.vocabulary.spaces import Row
from clustercheck.vocabulary.system import SIGNAL_KINDS, WEAK_SIGNALS

OMPI4 = "open-mpi/ompi v4.1.8 "
OMPI = "open-mpi/ompi main "
PRTE = "openpmix/prrte master "
HYDRA = "pmodels/mpich src/pm/hydra/"

ROWS: List[Row] = [
    # ---- starting the daemons (orted / prted) on the nodes ----------------------------------------------------
    Row("mpi", r"was unable to reliably start one or more daemons", "mpi", "daemon launch",
        OMPI4 + "orte/mca/errmgr/base/help-errmgr-base.txt [failed-daemon-launch] \"ORTE was unable to reliably start "
                "one or more daemons.\"; " + PRTE + "src/mca/errmgr/base/help-errmgr-base.txt \"%s was unable to "
                "reliably start one or more daemons.\""),
    Row("mpi", r"An? (?:ORTE|PRTE) daemon has unexpectedly failed after launch", "mpi", "daemon failed",
        OMPI4 + "help-errmgr-base.txt [failed-daemon] \"An ORTE daemon has unexpectedly failed after launch and "
                "before communicating back to mpirun.\" (PRRTE: \"An PRTE daemon ...\")"),
    Row("mpi", r"A daemon died unexpectedly (?:with status \d+|on signal \d+)", "mpi", "daemon died at launch",
        OMPI4 + "orte/mca/plm/base/help-plm-base.txt [daemon-died-no-signal] \"A daemon died unexpectedly with status "
                "%d while attempting\", [daemon-died-signal] \"A daemon died unexpectedly on signal %d  while "
                "attempting to\" (its shared libraries not found on the remote node)"),
    Row("mpi", r"The rsh PLS component was not able to find the executable \"orted\"|"
               r"The value of the MCA parameter \"plm_(?:rsh|ssh)_agent\" was set to a path", "mpi", "no orted",
        OMPI4 + "orte/mca/plm/rsh/help-plm-rsh.txt [no-local-orted] \"The rsh PLS component was not able to find the "
                "executable \"orted\" in\", [agent-not-found] \"The value of the MCA parameter \"plm_rsh_agent\" was "
                "set to a path\"; " + PRTE + "src/mca/plm/ssh/help-plm-ssh.txt (plm_ssh_agent)"),
    Row("mpi", r"(?:ORTE|PRTE) is unable to establish a communication connection to the|"
               r"(?:ORTE|PRTE) does not know how to route a message to the specified daemon", "mpi", "no connect",
        OMPI4 + "help-errmgr-base.txt [no-connect] \"ORTE is unable to establish a communication connection to the\", "
                "[no-path] \"ORTE does not know how to route a message to the specified daemon\""),
    Row("mpi", r"Open MPI detected a mismatch in versions between two processes|"
               r"No sockets were able to be opened on the available protocols|"
               r"the connection was refused due to a failure to$", "mpi", "oob",
        OMPI4 + "orte/mca/oob/tcp/help-oob-tcp.txt [version mismatch] \"Open MPI detected a mismatch in versions "
                "between two processes.\", [no-listeners] \"No sockets were able to be opened on the available "
                "protocols\", [authent-fail] \"Unfortunately, the connection was refused due to a failure to\" + "
                "\"authenticate.\"; " + PRTE + "src/rml/oob/help-oob-tcp.txt"),
    # ---- a daemon or a peer lost mid-run: the node that died says why ------------------------------------------
    Row("mpi", r"(?:ORTE|PRTE) has lost communication with a remote daemon|"
               r"has detected that a required daemon terminated during execution", "peer-lost", "lost daemon",
        OMPI4 + "help-errmgr-base.txt [node-died] \"ORTE has lost communication with a remote daemon.\"; "
                "orte/tools/orterun/help-orterun.txt [orterun:daemon-died-during-execution] \"%s has detected that a "
                "required daemon terminated during execution\"; " + PRTE + "help-errmgr-base.txt \"PRTE has lost "
                "communication with a remote daemon.\""),
    Row("mpi", r"An MPI communication peer process has unexpectedly disconnected", "peer-lost", "peer hung up",
        OMPI4 + "opal/mca/btl/tcp/help-mpi-btl-tcp.txt [peer hung up] \"An MPI communication peer process has "
                "unexpectedly disconnected.  This\""),
    # ---- initializing the runtime and MPI, PMIx under a direct launch ----------------------------------------
    Row("mpi", r"It looks like \w+ failed for some reason; your parallel process is|"
               r"Open RTE was unable to initialize properly", "mpi", "init failed",
        OMPI4 + "orte/runtime/help-orte-runtime.txt [orte_init:startup:internal-failure] \"It looks like orte_init "
                "failed for some reason; your parallel process is\"; ompi/runtime/help-mpi-runtime.txt "
                "[mpi_init:startup:internal-failure] \"It looks like %s failed for some reason; your parallel process "
                "is\"; help-orterun.txt [orterun:init-failure] \"Open RTE was unable to initialize properly.\"; "
                + PRTE + "src/runtime/help-prte-runtime.txt (prte_init)"),
    Row("mpi", r"\*\*\* An error occurred in MPI_Init(?:_thread)?\b", "mpi", "MPI_Init",
        OMPI + "ompi/errhandler/help-mpi-errors.txt [mpi_errors_are_fatal] \"%s *** An error occurred %s %s\" "
               "(errhandler_predefined.c: \"in %s\" of MPI_Init)"),
    Row("mpi", r"MPI_INIT has failed because at least one MPI process is unreachable|"
               r"At least one pair of MPI processes are unable to reach each other", "mpi", "unreachable",
        OMPI4 + "ompi/runtime/help-mpi-runtime.txt [mpi_init:startup:pml-add-procs-fail] \"MPI_INIT has failed "
                "because at least one MPI process is unreachable\"; ompi/mca/bml/r2/help-mca-bml-r2.txt [unreachable "
                "proc] \"At least one pair of MPI processes are unable to reach each other for\""),
    Row("mpi", r"PMIx_Init failed for the following reason:|No PMIx server was reachable, but a PMI1/2 was detected|"
               r"The application appears to have been direct launched using \"\w+\"", "mpi", "direct launch",
        OMPI + "ompi/runtime/help-mpi-runtime.txt [no-pmi] \"PMIx_Init failed for the following reason:\", "
               "[no-pmix-but] \"No PMIx server was reachable, but a PMI1/2 was detected.\"; " + OMPI4 +
        "orte/mca/ess/base/help-ess-base.txt [slurm-error] \"The application appears to have been direct launched "
        "using \"srun\",\" (srun --mpi=pmix, or an Open MPI built with Slurm's PMI)"),
    # The runtimes' error traces: a symptom of whatever failed (PMIx 3's gds_ds12 lock errors were printed by jobs
    # that ran on): any cause a line names says more
    Row("mpi", r"\b(?:ORTE|PRTE)_ERROR_LOG: .+ in file \S+ at line \d+|\b(?:OPAL|PMIX|PRTE) ERROR: .+ in file \S+ "
               r"at line \d+", "mpi", "runtime error log",
        OMPI4 + "orte/mca/errmgr/base/errmgr_base_fns.c \"%s ORTE_ERROR_LOG: %s in file %s at line %d\"; "
                "opal/util/error.h OPAL_ERROR_LOG \"OPAL ERROR: %s in file %s at line %d\"; openpmix/openpmix "
                "src/util/pmix_error.h PMIX_ERROR_LOG \"PMIX ERROR: %s in file %s at line %d\"; " + PRTE +
        "src/mca/errmgr/base/errmgr_base_fns.c \"%s PRTE_ERROR_LOG: %s in file %s at line %d\", src/util/error.h "
        "\"PRTE ERROR: %s in file %s at line %d\"", tier=FAILED),
    # ---- starting the program on a node ---------------------------------------------------------------------
    Row("mpi", r"was unable to find the specified executable file, and therefore", "missing-file",
        "executable not found",
        OMPI4 + "help-orterun.txt [orterun:exe-not-found] \"%s was unable to find the specified executable file, and "
                "therefore\"; " + PRTE + "src/mca/schizo/prte/help-prun.txt [prun:exe-not-found] (\"... and therefore "
                "did\")"),
    Row("mpi", r"^\s*(?:change to )?the specified working directory:\s*$", "missing-file", "working directory",
        OMPI4 + "help-orterun.txt [orterun:wdir-not-found] \"%s was unable to launch the specified application as it "
                "could not\" + \"change to the specified working directory:\"; " + PRTE + "help-prun.txt "
                "[prun:wdir-not-found] \"... as it could not find\" + \"the specified working directory:\""),
    Row("mpi", r"was unable to launch the specified application as it could not access\s*$|"
               r"^\s*access an executable:\s*$", "permission", "executable not accessible",
        OMPI4 + "help-orterun.txt [orterun:exe-not-accessible] \"%s was unable to launch the specified application as "
                "it could not access\" + \"or execute an executable:\"; " + PRTE + "help-prun.txt "
                "[prun:exe-not-accessible] \"... as it could not\" + \"access an executable:\""),
    Row("mpi", r"Error: system limit exceeded on number of (?:pipes|network connections) that can be open",
        "open-files", "system limit",
        OMPI4 + "help-orterun.txt [orterun:sys-limit-pipe] \"Error: system limit exceeded on number of pipes that can "
                "be open\", [orterun:sys-limit-sockets] \"... number of network connections that can be open\""),
    Row("mpi", r"was unable to (?:start|launch) the specified application as it encountered an", "mpi",
        "failed to start",
        OMPI4 + "help-orterun.txt [orterun:proc-failed-to-start] \"%s was unable to start the specified application "
                "as it encountered an\", [orterun:pipe-read-failure] \"%s was unable to launch the specified "
                "application as it encountered an error:\"; " + PRTE + "help-prun.txt"),
    Row("mpi", r"There are not enough slots available in the system to satisfy the \d+|"
               r"All nodes which are allocated for this job are already filled", "mpi", "not enough slots",
        OMPI4 + "orte/mca/rmaps/base/help-orte-rmaps-base.txt [orte-rmaps-base:alloc-error] \"There are not enough "
                "slots available in the system to satisfy the %d\", [orte-rmaps-base:all-available-resources-used]; "
                + PRTE + "src/mca/rmaps/base/help-prte-rmaps-base.txt [prte-rmaps-base:alloc-error]"),
    # ---- Open MPI's TCP BTL: printed as a WARNING, but the connection between ranks failed ------------------
    Row("mpi", r"Open MPI failed to TCP connect to a peer MPI process", "mpi", "tcp connect",
        OMPI4 + "opal/mca/btl/tcp/help-mpi-btl-tcp.txt [client connect fail] \"WARNING: Open MPI failed to TCP "
                "connect to a peer MPI process.  This\" + \"should not happen.\" (\"Your Open MPI job may now hang or "
                "fail.\")", warns=True),
    # ---- Open MPI's shared-memory BTL: its single copy between ranks of one node refused -----------------------
    # vader (Open MPI 4's sm) copies with process_vm_readv / writev (CMA): the kernel refuses it (errno 1, EPERM)
    # where ranks may not ptrace each other: a container without CAP_SYS_PTRACE, kernel.yama.ptrace_scope above 0
    Row("mpi", r"\b(?:Read|Wrote) -?\d+, expected \d+, errno = \d+", "ptrace", "vader CMA copy",
        OMPI4 + "opal/mca/btl/vader/btl_vader_get.c mca_btl_vader_get (CMA): \"Read %ld, expected %lu, errno = %d\" "
                "of process_vm_readv; btl_vader_put.c: \"Wrote %ld, expected %lu, errno = %d\" of process_vm_writev"),
    # ---- Open MPI's openib BTL: the InfiniBand transfer failed (rdma.py reads ibv_wc_status itself) ----------
    Row("mpi", r"error polling [LH]P CQ with (?:status [A-Z][A-Z ]+ status number \d+|-?\d+ errno says)", "ib",
        "openib completion",
        OMPI4 + "opal/mca/btl/openib/btl_openib_component.c handle_wc: BTL_PEER_ERROR \"error polling %s with status "
                "%s status number %d for wr_id %\" PRIx64 \" opcode %d  vendor error %d qp_idx %d\"; poll_device "
                "\"error polling %s with %d errno says %s\""),
    Row("mpi", r"The InfiniBand retry count between two MPI processes has been|"
               r"The OpenFabrics \"receiver not ready\" retry count", "ib", "openib retry exceeded",
        OMPI4 + "opal/mca/btl/openib/help-mpi-btl-openib.txt [pp retry exceeded] \"The InfiniBand retry count between "
                "two MPI processes has been\", [pp rnr retry exceeded] / [srq rnr retry exceeded] \"The OpenFabrics "
                "\"receiver not ready\" retry count\""),
    # ---- MPICH's Hydra: mpiexec and its proxies (HYDU_error_printf: "[%s] %s (%s:%d): " before the message) --
    Row("mpi", r"execvp error on file \S+ \(No such file or directory\)", "missing-file", "execvp ENOENT",
        HYDRA + "lib/utils/launch.c HYDU_create_process: \"execvp error on file %s (%s)\" with ENOENT"),
    Row("mpi", r"execvp error on file \S+ \(Permission denied\)", "permission", "execvp EACCES",
        HYDRA + "lib/utils/launch.c HYDU_create_process: \"execvp error on file %s (%s)\" with EACCES"),
    Row("mpi", r"unable to connect to server \S+ at port \d+ \(check for firewalls!\)|"
               r"unable to connect from \"[^\"]*\" to \"[^\"]*\"|unable to connect to the main server", "mpi",
        "proxy connect",
        HYDRA + "proxy/pmip.c \"unable to connect to server %s at port %d (check for firewalls!)\"; lib/utils/sock.c "
                "HYDU_sock_connect \"unable to connect from \\\"%s\\\" to \\\"%s\\\" (%s)\"; "
                "lib/tools/bootstrap/persist/persist_launch.c \"unable to connect to the main server\""),
    Row("mpi", r"launcher returned error while launching processes|"
               r"process manager returned error launching processes", "mpi", "launch failed",
        HYDRA + "lib/tools/bootstrap/src/bsci_launch.c \"launcher returned error while launching processes\"; "
                "mpiexec/mpiexec.c \"process manager returned error launching processes\""),
    Row("mpi", r"one of the processes terminated badly; aborting", "mpi", "proxy terminated badly",
        "pmodels/mpich v3.4.3 src/pm/hydra/tools/bootstrap/utils/bscu_wait.c HYDT_bscu_wait_for_completion: \"one of "
        "the processes terminated badly; aborting\" (a proxy ended badly: the ranks' own lines say more)",
        tier=FAILED),
]


def _signal_row(name: str) -> Row:
    """A launcher's report of a rank a signal ended, in the signal's kind (system.py's SIGNAL_KINDS)."""
    number, text = int(getattr(signal, name)), signal.strsignal(getattr(signal, name))
    forms = [rf"noticed that process rank \d+ with PID \d+ on node \S+ exited on signal {number}\b",
             rf"^\s*signal {number} \({re.escape(text)}\)\.\s*$",
             rf"YOUR APPLICATION TERMINATED WITH THE EXIT STRING: [^\n]*\(signal {number}\)"]
    return Row("mpi", "|".join(forms), SIGNAL_KINDS[name], f"exited on {name}",
               OMPI4 + "orte/tools/orterun/help-orterun.txt [orterun:proc-aborted-strsignal] \"%s noticed that process "
                       "rank %lu with PID %lu on node %s exited on signal %d (%s).\" ([orterun:proc-aborted] without "
                       "the text); " + PRTE + "src/mca/schizo/prte/help-prun.txt [prun:proc-aborted-strsignal], "
                       "wrapped: \"... exited on\" + \"signal %d (%s).\"; " + HYDRA + "mpiexec/mpiexec.c \"YOUR "
                       f"APPLICATION TERMINATED WITH THE EXIT STRING: %s (signal %d)\" (strsignal: {name}, {text!r})",
               tier=FAILED if name in WEAK_SIGNALS else -1)


ROWS += [_signal_row(name) for name in SIGNAL_KINDS]
