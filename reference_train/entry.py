"""How clustercheck starts the trainer on a node: die with torchrun, then run train.py as __main__.

PR_SET_PDEATHSIG makes the kernel kill this rank when its parent (torchrun) dies, so a
run the tool stops leaves nothing behind even if torchrun is killed before its cleanup.
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
runpy.run_path(sys.argv[0], run_name="__main__")
