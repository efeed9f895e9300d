"""Node-side programs: standard-library files run on the nodes with the node's interpreter.

They travel inside the command line itself (compressed, base64), together with the
helpers they share (nodelib.py), so running one costs a single exec on the node and
leaves no file behind to clean up.
"""

import base64
import functools
import os
import shlex
import zlib
from typing import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
# The helper modules each program imports, in the order they must be registered.
HELPERS = {"env_probe": ("nodelib", "gpuprobe", "kernlog", "fabric"), "net_probe": ("nodelib",)}

# argv[1] is "name:blob,name:blob,...": the helpers become importable modules, the last
# entry runs as __main__ with argv as if the file itself had been run.
_BOOTSTRAP = (
    "import sys,zlib,base64,types\n"
    "parts=[p.split(':',1) for p in sys.argv[1].split(',')]\n"
    "src=lambda b:zlib.decompress(base64.b64decode(b))\n"
    "for n,b in parts[:-1]:\n"
    " m=types.ModuleType(n);exec(compile(src(b),n+'.py','exec'),m.__dict__);sys.modules[n]=m\n"
    "n,b=parts[-1];sys.argv=[n+'.py']+sys.argv[2:]\n"
    "exec(compile(src(b),n+'.py','exec'),{'__name__':'__main__'})"
)


def source(name: str) -> bytes:
    """The bytes of node-side program `name` (e.g. "env_probe.py")."""
    with open(os.path.join(HERE, name), "rb") as handle:
        return handle.read()


@functools.lru_cache(maxsize=None)
def _packed(name: str) -> str:
    return base64.b64encode(zlib.compress(source(name + ".py"), 9)).decode("ascii")


def inline_command(python: str, name: str, args: Sequence[str] = ()) -> str:
    """A shell command that runs program `name` ("env_probe") with `python` and `args` on the node."""
    name = name[:-3] if name.endswith(".py") else name
    bundle = ",".join(f"{n}:{_packed(n)}" for n in (*HELPERS.get(name, ("nodelib",)), name))
    argv = [python, "-c", _BOOTSTRAP, bundle, *args]
    return " ".join(shlex.quote(a) for a in argv)
