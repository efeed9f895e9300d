"""Faults a rank makes on itself on purpose, for the sandbox cluster and the tests.

Each is off unless its variable is set in the rank's environment (the sandbox's `env` fault
or a test sets it); RANK and STEP are numbers:

- CLUSTERCHECK_TEST_LR_SCALE=RANK:FACTOR  that rank trains with FACTOR times the learning rate;
- CLUSTERCHECK_TEST_NAN_AT=STEP:RANK      that rank's loss turns NaN at that step;
- CLUSTERCHECK_TEST_FREEZE_AT=STEP:RANK   that rank stops itself (SIGSTOP) after that step
                                          (for bench, the step is the message size);
- CLUSTERCHECK_TEST_KILL_AT=PHASE:RANK   that rank kills itself (SIGKILL) as the check inside the job
                                          (clustercheck.injob) enters that phase (device, bench);
- CLUSTERCHECK_TEST_STDERR_BYTES=N        every rank writes N bytes to stderr when training starts,
                                          as NCCL_DEBUG=INFO or TORCH_DISTRIBUTED_DEBUG=DETAIL do;
- CLUSTERCHECK_TEST_NCCL_LOG=FILE          every rank writes FILE (a recorded NCCL INFO log) where its
                                          NCCL_DEBUG_FILE says, as NCCL does on GPUs (on Gloo NCCL writes
                                          nothing): the capture's plumbing proven on the sandbox.

train_entry.py registers them on the trainer's Callbacks; bench's worker calls freeze_if_due.
Nothing here raises on a malformed value: the fault is simply off.
"""

import os
import signal
import socket
import sys


def _pair(name: str):
    """(first, second) of NAME=A:B as strings, or None."""
    parts = os.environ.get(name, "").split(":")
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _rank() -> str:
    return os.environ.get("RANK", "")


def freeze_if_due(step) -> None:
    knob = _pair("CLUSTERCHECK_TEST_FREEZE_AT")
    if knob and knob == (str(step), _rank()):
        os.kill(os.getpid(), signal.SIGSTOP)


def kill_if_due(phase) -> None:
    knob = _pair("CLUSTERCHECK_TEST_KILL_AT")
    if knob and knob == (str(phase), _rank()):
        os.kill(os.getpid(), signal.SIGKILL)


def scaled_lr(lr: float) -> float:
    knob = _pair("CLUSTERCHECK_TEST_LR_SCALE")
    try:
        return lr * float(knob[1]) if knob and knob[0] == _rank() else lr
    except ValueError:
        return lr


def poisoned_loss(step: int, loss):
    knob = _pair("CLUSTERCHECK_TEST_NAN_AT")
    return loss * float("nan") if knob and knob == (str(step), _rank()) else loss


def loud(phase: str) -> None:
    value = os.environ.get("CLUSTERCHECK_TEST_STDERR_BYTES", "")
    if phase != "training" or not value.isdigit() or loud.done:
        return
    loud.done = True
    line = f"[rank{_rank()}] noise " + "x" * 100 + "\n"
    for _ in range(int(value) // len(line)):
        sys.stderr.write(line)
    sys.stderr.flush()


loud.done = False


def install(callbacks) -> None:
    """Register every fault on the trainer's Callbacks (each is a no-op while its variable is unset)."""
    callbacks.step.append(freeze_if_due)
    callbacks.lr.append(scaled_lr)
    callbacks.loss.append(poisoned_loss)
    callbacks.phase.append(loud)


def write_nccl_log() -> None:
    """CLUSTERCHECK_TEST_NCCL_LOG: the recorded log written to NCCL_DEBUG_FILE (%h: host, %p: pid), only where
    the rank's environment asks NCCL for a file."""
    recorded, target = os.environ.get("CLUSTERCHECK_TEST_NCCL_LOG"), os.environ.get("NCCL_DEBUG_FILE")
    if not recorded or not target:
        return
    path = target.replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
    try:
        with open(recorded) as source, open(path, "w") as handle:
            handle.write(source.read())
    except OSError:
        pass
