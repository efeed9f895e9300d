"""What a torchrun launch leaves when it ends or is stopped, undone on the node (standard library only).

Run by the launch's own shell when torchrun ends, fails or is stopped: `python -c <this file> TAG STAMP`.
1. Every process whose environment holds TAG (CLUSTERCHECK_RUN=...) is killed: torchrun's workers run
   in sessions of their own, out of reach of the guard's group kill.
2. A DeepSpeed / torch C++ extension build killed half way leaves its lock (`lock` in the op's
   directory under the torch extensions root, often a shared home), and every later DeepSpeed start
   on every node that shares it waits on it for ever. Locks made since the launch started (newer
   than STAMP) are removed once no compiler runs on the node: a build still running elsewhere keeps
   its lock.
"""

import os
import sys

COMPILERS = (b"ninja", b"cc1plus", b"nvcc", b"cicc", b"ptxas", b"c++", b"g++", b"gcc", b"cc", b"clang++", b"ld")


def kill_tagged(tag):
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and tag in open("/proc/%s/environ" % pid, "rb").read().split(b"\0"):
                os.kill(int(pid), 9)
        except OSError:
            pass


def compiling():
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and open("/proc/%s/comm" % pid, "rb").read().strip() in COMPILERS:
                return True
        except OSError:
            pass
    return False


def extensions_root():
    """Where torch builds C++ extensions (DeepSpeed's ops): TORCH_EXTENSIONS_DIR, else ~/.cache/torch_extensions."""
    return os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                  "torch_extensions")


def build_locks(root):
    """[(path, mtime)] of the build locks under the extensions root (<root>/<py/cuda tag>/<op>/lock at most)."""
    found = []
    for folder, dirs, files in os.walk(root):
        if folder[len(root):].count(os.sep) >= 3:
            dirs[:] = []
        if "lock" in files:
            path = os.path.join(folder, "lock")
            try:
                found.append((path, os.stat(path).st_mtime))
            except OSError:
                pass
    return found


def stale_locks(root, since):
    return [path for path, mtime in build_locks(root) if mtime >= since]


def unlock(stamp):
    try:
        since = os.stat(stamp).st_mtime
    except OSError:
        return
    root = extensions_root()
    if not os.path.isdir(root) or compiling():
        return
    for path in stale_locks(root, since):
        try:
            os.remove(path)
            sys.stderr.write("clustercheck: removed the build lock %s left by the stopped run\n" % path)
        except OSError:
            pass


if __name__ == "__main__":
    kill_tagged(sys.argv[1].encode())
    if len(sys.argv) > 2:
        unlock(sys.argv[2])
