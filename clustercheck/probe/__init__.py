"""Node-side programs: standard-library files run on the nodes with the node's interpreter.

They travel inside the command line itself (compressed, base64), so running one costs a
single exec on the node and leaves no file behind to clean up.
"""

import base64
import functools
import os
import shlex
import zlib
from typing import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))

# Runs the shipped source as __main__ with argv as if the file itself had been run.
_BOOTSTRAP = ("import sys,zlib,base64;s=sys.argv[1];sys.argv=[%r]+sys.argv[2:];"
              "exec(compile(zlib.decompress(base64.b64decode(s)),%r,'exec'),{'__name__':'__main__'})")


def source(name: str) -> bytes:
    """The bytes of node-side program `name` (e.g. "env_probe.py")."""
    with open(os.path.join(HERE, name), "rb") as handle:
        return handle.read()


@functools.lru_cache(maxsize=None)
def _packed(name: str) -> str:
    return base64.b64encode(zlib.compress(source(name), 9)).decode("ascii")


def inline_command(python: str, name: str, args: Sequence[str] = ()) -> str:
    """A shell command that runs program `name` with `python` and `args` on the node."""
    argv = [python, "-c", _BOOTSTRAP % (name, name), _packed(name), *args]
    return " ".join(shlex.quote(a) for a in argv)
