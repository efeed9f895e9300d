"""What a torchrun launch leaves when it ends or is stopped, undone on the node (standard library only).

Run by the launch's own shell when torchrun ends, fails or is stopped: `python -c <this file> TAG RECORDS`.
1. Every process whose environment holds TAG (CLUSTERCHECK_RUN=...) is killed, children started meanwhile
   included, and the sweep waits until they are gone: torchrun's workers run in sessions of their own, out
   of reach of the guard's group kill, ninja starts each compiler in a process group of its own, and a
   killed process keeps its files open until it has exited. The sweep carries TAG too (its shell exports
   it): it spares itself and the processes that started it, and leaves the launch's process group, which
   is killed a second after the launch is stopped.
2. A DeepSpeed / torch C++ extension build (or the up-to-date check of a load) killed half way leaves its
   lock (`lock` in the op's directory under the torch extensions root, often a shared home), and every
   later start on every node that shares the directory waits on it for ever. The ranks wrote down the
   locks they held (buildlocks.py, under RECORDS, written before the lock is made); once the run's
   processes are gone, each recorded lock that still is the one recorded (the hard link of the rank's staged
   file, or the same inode and creation time) is removed. Nothing else is: a build of
   another job, or one on another node that shares the directory and still runs, keeps its lock.
"""

import os
import sys
import time

COMPILERS = (b"ninja", b"cc1plus", b"nvcc", b"cicc", b"ptxas", b"c++", b"g++", b"gcc", b"cc", b"clang++", b"ld")
GONE_WAIT_S = 10.0      # how long the killed processes may take to exit (one in a slow NFS write takes a while)


def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (state first, ppid second), None once it is gone."""
    try:
        text = open("/proc/%s/stat" % pid, "rb").read()
    except OSError:
        return None
    return text[text.rindex(b")") + 2:].split()


def running(pid, started=None):
    """The process exists and has not exited (a zombie has closed its files); the same one if `started` is
    its start time (a pid can be reused once the process is reaped)."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] not in (b"Z", b"X", b"x") and started in (None, fields[19])


def ancestors():
    """This process and the ones that started it (the launch's shell carries the run's tag too)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        fields = stat_fields(pid)
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
    spared, killed = ancestors(), {}
    deadline = time.monotonic() + wait_s
    while True:
        found = _tagged(tag, spared)
        for pid in found:
            fields = stat_fields(pid)
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


def _record(text):
    """(lock path, staged path or None, (inode, mtime_ns) or None) of one record (buildlocks.py)."""
    fields = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
    identity = tuple(int(n) for n in fields["identity"].split()) if "identity" in fields else None
    if "lock" not in fields or not (fields.get("staged") or identity) or (identity and len(identity) != 2):
        raise ValueError(text)
    return fields["lock"], fields.get("staged"), identity


def recorded_locks(folder):
    """{record file: (lock path, staged path, identity)} the run's ranks wrote and have not taken back."""
    found = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        try:
            found[os.path.join(folder, name)] = _record(open(os.path.join(folder, name)).read())
        except (OSError, ValueError):
            pass   # half written when its rank was killed: written before the lock was, so none is its
    return found


def _is_the_recorded_one(path, staged, identity):
    """The lock at `path` is the one the record names: the staged file's inode (the lock is its hard link),
    or the recorded inode and creation time. A lock released and made again by another build is not."""
    try:
        lock = os.stat(path)
    except OSError:
        return False
    if staged:
        try:
            mine = os.stat(staged)
        except OSError:
            return False   # not staged yet (the lock, if any, is another's) or released already
        return (mine.st_dev, mine.st_ino) == (lock.st_dev, lock.st_ino)
    return (lock.st_ino, lock.st_mtime_ns) == identity


def unlock(records, gone=True):
    """Remove the recorded locks that are still the ones recorded, their staged files and their records."""
    if records and not gone:
        sys.stderr.write("clustercheck: the run's processes still ran %g s after they were killed: its build "
                         "locks are left as they are\n" % GONE_WAIT_S)
        return
    for record, (path, staged, identity) in sorted(records.items()):
        if _is_the_recorded_one(path, staged, identity):
            try:
                os.remove(path)
                sys.stderr.write("clustercheck: removed the build lock %s left by the stopped run\n" % path)
            except OSError:
                pass
        for left in (staged, record):
            try:
                if left:
                    os.remove(left)
            except OSError:
                pass


if __name__ == "__main__":
    # A session of its own: the tool stops a launch by TERM to its group and KILL a second later
    # (transport/agent_sh.py), which must not cut the sweep short; the shell still waits for it.
    os.setsid()
    # read before the kill too: the transport may remove the run directory once the launch is stopped
    held = recorded_locks(sys.argv[2]) if len(sys.argv) > 2 else {}
    all_gone = kill_tagged(sys.argv[1].encode())
    if len(sys.argv) > 2:
        held.update(recorded_locks(sys.argv[2]))
        unlock(held, all_gone)
