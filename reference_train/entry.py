"""How clustercheck starts the trainer on a node: die with torchrun, then run train.py as __main__.

PR_SET_PDEATHSIG makes the kernel kill this rank when its parent (torchrun) dies, so a
run the tool stops leaves nothing behind even if torchrun is killed before its cleanup.
torchrun's `record` writes the rank's exception to its error file, so the failure summary
torchrun prints ("Root Cause") carries the traceback, not only an exit code.
"""

import ctypes
import os
import runpy
import signal
import sys

try:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
sys.argv[0] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")


def main():
    runpy.run_path(sys.argv[0], run_name="__main__")


try:
    from torch.distributed.elastic.multiprocessing.errors import record
except ImportError:   # no torch here: the import error itself is what the log shows
    record = None
(record(main) if record else main)()
