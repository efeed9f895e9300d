"""Which torch C++ extension build locks a rank holds, written down for the node's sweep (standard library only).

torch's FileBaton (torch/utils/file_baton.py, used by torch.utils.cpp_extension and so by DeepSpeed's op
builds) creates `lock` in the op's build directory with O_EXCL, holds it through the build (or the
up-to-date check of a load) and deletes it afterwards; a rank killed in between leaves it, and every later
start on every node that shares the directory waits on it for ever. Installed in each rank by
train_entry.py, this writes one record per lock the rank acquires (the lock's path and identity: inode and
creation time) into the directory CLUSTERCHECK_LOCK_RECORDS names, and deletes the record once the lock is
released. The node's sweep (sweep.py) removes exactly the recorded locks, once the run's processes are gone:
the lock of a build on another node, or of another job, is never recorded here, so it is kept.
"""

import os

ENV = "CLUSTERCHECK_LOCK_RECORDS"


def record_path(folder, baton):
    return os.path.join(folder, "%d-%d" % (os.getpid(), id(baton)))


def write_record(folder, baton):
    """`inode mtime_ns path` of the lock just created; never raises into torch's build."""
    try:
        found = os.fstat(baton.fd)
        os.makedirs(folder, exist_ok=True)
        line = "%d %d %s\n" % (found.st_ino, found.st_mtime_ns, os.path.abspath(baton.lock_file_path))
        fd = os.open(record_path(folder, baton), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except (OSError, TypeError):
        pass


def forget(folder, baton):
    try:
        os.remove(record_path(folder, baton))
    except OSError:
        pass


def install(folder=None):
    """Record this process's FileBaton locks under `folder` (default: $CLUSTERCHECK_LOCK_RECORDS).
    False when there is nowhere to record or no torch to hook (the trainer's own import says why)."""
    folder = folder or os.environ.get(ENV)
    if not folder:
        return False
    try:
        from torch.utils.file_baton import FileBaton
    except Exception:   # a broken torch fails the trainer's own import, with its own message
        return False
    acquire, release = FileBaton.try_acquire, FileBaton.release

    def try_acquire(baton):
        acquired = acquire(baton)
        if acquired:
            write_record(folder, baton)
        return acquired

    def release_and_forget(baton):
        try:
            release(baton)
        finally:
            forget(folder, baton)

    FileBaton.try_acquire, FileBaton.release = try_acquire, release_and_forget
    return True
