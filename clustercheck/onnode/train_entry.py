"""How clustercheck starts the reference trainer on a node: its hooks installed from outside, then main().

Shipped into the node's run directory beside the trainer's files, hang.py and rank_faults.py.
PR_SET_PDEATHSIG makes the kernel kill this rank when its parent (torchrun) dies, so a run the
tool stops leaves nothing behind even if torchrun is killed before its cleanup. The trainer's
Callbacks get the hang hook (the phase and step the rank is in, answered when clustercheck asks)
and the sandbox's rank faults; the C++ op build locks the rank holds are written down (buildlocks.py) for
the node's sweep. torchrun's `record` writes the rank's exception to its error file,
so the failure summary torchrun prints ("Root Cause") carries the traceback, not only an exit code.
"""

import ctypes
import os
import signal
import sys

try:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.argv[0] = os.path.join(HERE, "train.py")

import buildlocks  # noqa: E402
import hang  # noqa: E402
import rank_faults  # noqa: E402
import train  # noqa: E402

buildlocks.install()   # the op build locks this rank holds, for the sweep if it is killed holding one

hang.install()   # clustercheck asks stuck ranks for their stacks and last collectives
train.CALLBACKS.phase.append(hang.phase)
train.CALLBACKS.step.append(hang.step)
rank_faults.install(train.CALLBACKS)

try:
    from torch.distributed.elastic.multiprocessing.errors import record
except ImportError:   # no torch here: the import error itself is what the log shows
    record = None
(record(train.main) if record else train.main)()
