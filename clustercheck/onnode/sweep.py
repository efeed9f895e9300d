"""What a torchrun launch leaves when it ends or is stopped, undone on the node (standard library only).

Run by the launch's own shell when torchrun ends, fails or is stopped: `python -c <this file> TAG STAMP [RC]`,
RC torchrun's exit status when it ended by itself (none when the launch was stopped).
1. Every process whose environment holds TAG (CLUSTERCHECK_RUN=...) is killed, children started meanwhile
   included, and the sweep waits until they are gone: torchrun's workers run in sessions of their own, out
   of reach of the guard's group kill, and a killed process keeps its files open until it has exited. The
   sweep itself and the shell that runs it carry TAG too: they are spared, and the sweep leaves the launch's
   process group, which is killed a second after it is stopped.
2. A DeepSpeed / torch C++ extension build (or the up-to-date check of a load) killed half way leaves its
   lock (`lock` in the op's directory under the torch extensions root, often a shared home): torch's
   FileBaton creates it with O_EXCL, keeps it open until the build ends, then deletes it; every later start
   on every node that shares the directory polls until it disappears, for ever. Once the run's processes
   are gone, a lock made since the launch started (newer than STAMP) by this user is removed unless a live
   process on this node owns it: it holds the lock open (a load or build of another job), or a compiler
   works in its directory (ninja and the compilers it starts run there). Another user's lock is kept, and so
   is every lock after a run that ended well (RC 0): its ranks released theirs, and one left belongs to
   someone else, perhaps on another node that shares the directory, whose processes this node cannot see.
"""

import os
import sys
import time

COMPILERS = (b"ninja", b"cc1plus", b"nvcc", b"cicc", b"ptxas", b"c++", b"g++", b"gcc", b"cc", b"clang++", b"ld")
GONE_WAIT_S = 10.0      # how long the killed processes may take to exit (one in a slow NFS write takes a while)
SETTLE_S = 0.2          # a second look at an unowned lock: its owner may be between close() and remove()


def _stat(pid):
    """The fields of /proc/PID/stat after the command name (state first, ppid second), None once it is gone."""
    try:
        text = open("/proc/%s/stat" % pid, "rb").read()
    except OSError:
        return None
    return text[text.rindex(b")") + 2:].split()


def running(pid, started=None):
    """The process exists and has not exited (a zombie has closed its files); the same one if `started` is
    its start time (a pid can be reused once the process is reaped)."""
    fields = _stat(pid)
    return bool(fields) and fields[0] not in (b"Z", b"X", b"x") and started in (None, fields[19])


def _ancestors():
    """This process and the ones that started it (the launch's shell carries the run's tag too)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        fields = _stat(pid)
        pid = int(fields[1]) if fields else 0
    return pids


def _tagged(tag, spared):
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and int(pid) not in spared and \
                    tag in open("/proc/%s/environ" % pid, "rb").read().split(b"\0"):
                found.append(int(pid))
        except OSError:
            pass
    return found


def kill_tagged(tag, wait_s=GONE_WAIT_S):
    """SIGKILL every process of the run, again for any it started meanwhile, until none is left running.
    True once all are gone, False when some still run at the deadline (stuck in the kernel)."""
    spared, killed = _ancestors(), {}
    deadline = time.monotonic() + wait_s
    while True:
        found = _tagged(tag, spared)
        for pid in found:
            fields = _stat(pid)
            try:
                os.kill(pid, 9)
            except OSError:
                continue
            if fields:
                killed.setdefault(pid, fields[19])
        if not found and not any(running(pid, started) for pid, started in killed.items()):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


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


def owners(paths):
    """{lock path: pid} for the locks a live process on this node owns: it holds the lock open, or it is a
    compiler whose working directory is the lock's. Processes this user may not look into are skipped:
    their locks are another user's, kept anyway."""
    real = {os.path.realpath(path): path for path in paths}
    folders = {os.path.dirname(path): original for path, original in real.items()}
    owned = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or not running(pid):
            continue
        try:
            if open("/proc/%s/comm" % pid, "rb").read().strip() in COMPILERS:
                cwd = os.readlink("/proc/%s/cwd" % pid)
                if cwd in folders:
                    owned.setdefault(folders[cwd], int(pid))
            for fd in os.listdir("/proc/%s/fd" % pid):
                target = os.readlink("/proc/%s/fd/%s" % (pid, fd))
                if target in real:
                    owned.setdefault(real[target], int(pid))
        except OSError:
            pass
    return owned


def _identity(path):
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_ino, found.st_mtime, found.st_uid


def stale_locks(root, since):
    """The locks this user made since `since` that no live process on this node owns, seen so twice."""
    candidates = {path: _identity(path) for path, mtime in build_locks(root) if mtime >= since}
    candidates = {path: seen for path, seen in candidates.items() if seen and seen[2] == os.geteuid()}
    for path, pid in owners(candidates).items():
        sys.stderr.write("clustercheck: kept the build lock %s: process %d owns it\n" % (path, pid))
        del candidates[path]
    if candidates:
        time.sleep(SETTLE_S)
        owned = owners(candidates)
        candidates = {p: seen for p, seen in candidates.items() if p not in owned and _identity(p) == seen}
    return sorted(candidates)


def unlock(stamp, gone=True):
    try:
        since = os.stat(stamp).st_mtime
    except OSError:
        return
    root = extensions_root()
    if not os.path.isdir(root):
        return
    if not gone:
        sys.stderr.write("clustercheck: the run's processes still ran %g s after they were killed: its build "
                         "locks under %s are left as they are\n" % (GONE_WAIT_S, root))
        return
    for path in stale_locks(root, since):
        try:
            os.remove(path)
            sys.stderr.write("clustercheck: removed the build lock %s left by the stopped run\n" % path)
        except OSError:
            pass


if __name__ == "__main__":
    # A session of its own: the tool stops a launch by TERM to its group and KILL a second later
    # (transport/agent_sh.py), which must not cut the sweep short; the shell still waits for it.
    os.setsid()
    all_gone = kill_tagged(sys.argv[1].encode())
    if len(sys.argv) > 2 and sys.argv[3:4] != ["0"]:
        unlock(sys.argv[2], all_gone)
