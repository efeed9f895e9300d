"""Which torch C++ extension build locks a rank holds, written down for the node's sweep (standard library only).

torch's FileBaton (torch/utils/file_baton.py, used by torch.utils.cpp_extension and so by DeepSpeed's op
builds) creates `lock` in the op's build directory with O_EXCL, holds it through the build (or the
up-to-date check of a load) and deletes it afterwards; a rank killed in between leaves it, and every later
start on every node that shares the directory waits on it for ever. Installed in each rank by
train_entry.py, this takes the lock in a way that leaves no moment where the rank holds a lock the node's
sweep (sweep.py) cannot tell from another's:
1. a record naming the lock and a staged file beside it (`.lock.clustercheck-HOST-PID-ID`, this baton's
   own name) is written into the directory CLUSTERCHECK_LOCK_RECORDS names, before anything is created;
2. the staged file is created, then hard-linked to `lock` (link fails if `lock` exists, as O_EXCL does):
   the lock, once it exists, is the staged file's inode;
3. on release `lock` goes first, then the staged file, then the record.
A rank killed at any point leaves a record whose staged file is the lock (removed by the sweep) or is not
(another job's lock, or none: kept). A record written after an O_EXCL create, as before, left a lock no
record named when the kill landed between the two (found by a SIGKILL the moment the lock appeared, on a
loaded host). Where the file system has no hard links, the lock is taken as torch takes it and its
identity (inode, creation time) recorded right after, the old way, with its short window.
"""

import errno
import os
import socket

ENV = "CLUSTERCHECK_LOCK_RECORDS"
# a file system that makes no hard links (some FUSE ones) says one of these
_UNLINKABLE = {getattr(errno, name) for name in ("EPERM", "ENOTSUP", "EOPNOTSUPP", "EXDEV", "EMLINK", "ENOSYS")
               if hasattr(errno, name)}


def record_path(folder, baton):
    return os.path.join(folder, "%d-%d" % (os.getpid(), id(baton)))


def staged_path(baton):
    lock = os.path.abspath(baton.lock_file_path)
    return os.path.join(os.path.dirname(lock), ".lock.clustercheck-%s-%d-%d" % (
        socket.gethostname(), os.getpid(), id(baton)))


def _write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def write_record(folder, baton, identity=None):
    """`lock PATH` and `staged PATH` (or `identity INODE MTIME_NS`) for the sweep; never raises into torch."""
    try:
        os.makedirs(folder, exist_ok=True)
        line = "identity %d %d" % identity if identity else "staged %s" % staged_path(baton)
        _write(record_path(folder, baton), "lock %s\n%s\n" % (os.path.abspath(baton.lock_file_path), line))
        return True
    except (OSError, TypeError):
        return False


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def forget(folder, baton):
    _remove(record_path(folder, baton))


def _acquire_by_link(baton, folder, fallback):
    """True / False as FileBaton.try_acquire; `fallback` (torch's own) where links cannot be made."""
    staged = staged_path(baton)
    if not write_record(folder, baton):
        return fallback(baton)     # nowhere to write: torch's own lock, unrecorded
    try:
        fd = os.open(staged, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    except OSError:
        forget(folder, baton)
        return fallback(baton)
    try:
        os.link(staged, baton.lock_file_path)
    except FileExistsError:
        os.close(fd)
        _remove(staged)
        forget(folder, baton)
        return False
    except OSError as error:
        os.close(fd)
        _remove(staged)
        if error.errno in _UNLINKABLE:
            acquired = fallback(baton)
            if acquired:
                found = os.fstat(baton.fd)
                write_record(folder, baton, (found.st_ino, found.st_mtime_ns))
            else:
                forget(folder, baton)
            return acquired
        forget(folder, baton)
        raise
    baton.fd = fd
    return True


def install(folder=None):
    """Take and record this process's FileBaton locks under `folder` (default: $CLUSTERCHECK_LOCK_RECORDS).
    False when there is nowhere to record or no torch to hook (the trainer's own import says why)."""
    folder = folder or os.environ.get(ENV)
    if not folder:
        return False
    try:
        from torch.utils.file_baton import FileBaton   # torch only where the trainer runs
    except Exception:   # a broken torch fails the trainer's own import, with its own message
        return False
    acquire, release = FileBaton.try_acquire, FileBaton.release

    def try_acquire(baton):
        return _acquire_by_link(baton, folder, acquire)

    def release_and_forget(baton):
        try:
            release(baton)       # closes the fd and removes `lock`
        finally:
            _remove(staged_path(baton))
            forget(folder, baton)

    FileBaton.try_acquire, FileBaton.release = try_acquire, release_and_forget
    return True
