"""clustercheck storage probe: what a directory on this node does when every rank slot writes at once.

Standard library only; shipped inline to every node. Two jobs:

- measure (the default): the filesystem under --dir (type, source, free space, read-only), then
  at --start-at (the same moment on every node) one process per rank slot writes its own file
  in 4 MiB chunks, data-syncing as it goes (write_file) and once at the end, until --size bytes or
  --seconds have passed; every slot then drops the file from the page cache and reads it back
  (with other nodes in the run, at one moment for all, --seconds + 1 after the start).
  Meanwhile the parent watches each writer in /proc: a state of D (uninterruptible, waiting on
  the filesystem) for longer than --d-state seconds is recorded with its wchan and kernel stack.
  With --data, the slots then read the data directory's files as a loader would (rank r of
  --world reads files r, r + world, ...), cache dropped first, for at most --seconds.
- coherence (--coherence write|look --token T): at --start-at the writing node writes a file under
  a temporary name, syncs and renames it, and fills a small directory (removed by --coherence
  remove once everyone has looked; what a stopped run left, by the next run after an hour); the
  looking nodes looked the name up before (a cached "absent" is what goes stale) and look until
  they see the file whole and every entry of the directory, or --window passes.

It never raises: what failed is said with the path, the errno and the OS's words. SIGTERM (what
the guard sends when the tool is stopped or its deadline passes) removes what it wrote, then ends.

    python storage_probe.py --dir /ckpt --slots 8 --size 268435456 --seconds 5 --start-at EPOCH
    python storage_probe.py --dir /ckpt --coherence look --token abc --start-at EPOCH --window 10
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import sys
import time

try:  # imported as part of the clustercheck package (the tests)
    from .dstate import Watch
    from .mounts import failure, filesystem, mount_of  # noqa: F401 (mount_of: the tests read paths with it)
    from .nodelib import emit_json, sleep_until
except ImportError:  # shipped to a node: inline_command registers the helpers beside this program
    from dstate import Watch
    from mounts import failure, filesystem
    from nodelib import emit_json, sleep_until

CHUNK = 4 << 20
SYNC_FIRST, SYNC_MOST = 8 << 20, 256 << 20   # data-sync intervals: the first, and the most it grows to
WATCH_S = 0.05
COHERENCE_BYTES = 1 << 20
LISTING = 16             # entries in the coherence directory
STALE_S = 3600           # what an earlier run left (a node lost mid-run): removed by the next run after this long
OURS = (".clustercheck-storage-", ".clustercheck-coherence-")


def write_file(path, size, seconds, payload):
    """Write until size or seconds, data-syncing as it goes and at the end: (bytes, seconds).

    The page cache takes GBs at memory speed and a final sync would then run far past the time budget on
    slow storage; syncing every few MiB costs fast storage the overlap of writing and flushing. So the
    interval starts at SYNC_FIRST and doubles (up to SYNC_MOST) while a sync takes under a quarter of the
    budget left: the time budget holds on slow storage, and fast storage syncs rarely, as a bare loop does."""
    started = time.monotonic()
    done = synced = 0
    every = SYNC_FIRST
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while done < size and time.monotonic() - started < seconds:
            done += os.write(fd, payload[:min(CHUNK, size - done)])
            if done - synced >= every and done < size:
                began = time.monotonic()
                os.fdatasync(fd)
                synced = done
                if 4 * (time.monotonic() - began) < seconds - (time.monotonic() - started):
                    every = min(2 * every, SYNC_MOST)
        os.fsync(fd)
    finally:
        os.close(fd)
    return done, time.monotonic() - started


def read_file(path, seconds, started=None):
    """Read a file from the storage, not the page cache (dropped first): (bytes, seconds)."""
    started = time.monotonic() if started is None else started
    done = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while time.monotonic() - started < seconds:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            done += len(chunk)
    finally:
        os.close(fd)
    return done, time.monotonic() - started


def data_files(directory, rank, world, limit=100000):
    """The data directory's regular files in a stable order, this rank's share (every world-th)."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        found += [os.path.join(root, f) for f in sorted(files) if not f.startswith(".clustercheck-")]
        if len(found) >= limit:
            break
    return [path for i, path in enumerate(found[:limit]) if i % world == rank]


def slot_work(args, slot, path, report):
    """One rank slot's writing process: write, sync, read back, then (with --data) read its data share."""
    out = {"slot": slot}
    payload = os.urandom(CHUNK)   # incompressible: a filesystem that compresses must not look faster
    try:
        sleep_until(args["start_at"])
        out["write_bytes"], out["write_s"] = write_file(path, args["size"], args["seconds"], payload)
        if args["world"] > args["slots"]:     # other nodes write meanwhile: everyone reads at one moment
            sleep_until(args["read_at"])
        out["read_bytes"], out["read_s"] = read_file(path, args["seconds"])
    except OSError as exc:
        out["error"] = failure(path, exc)
    if args.get("data"):
        if args["world"] > args["slots"]:
            sleep_until(args["data_at"])
        out["data_bytes"] = out["data_files"] = 0
        started = time.monotonic()
        try:
            for name in data_files(args["data"], args["rank0"] + slot, args["world"]):
                if time.monotonic() - started >= args["seconds"]:
                    break
                got, _ = read_file(name, args["seconds"], started)
                out["data_bytes"] += got
                out["data_files"] += 1
        except OSError as exc:
            out["data_error"] = failure(getattr(exc, "filename", None) or args["data"], exc)
        out["data_s"] = time.monotonic() - started
    os.write(report, (json.dumps(out) + "\n").encode())


def measure(args):
    directory = os.path.abspath(args["dir"])
    doc = {"schema": 1, "started": time.time(), "host": socket.gethostname(), "dir": directory,
           "slots": args["slots"], "size": args["size"], "filesystem": filesystem(directory)}
    if "error" in doc["filesystem"]:
        doc["write_error"] = doc["filesystem"]["error"]
        return doc
    # never more than a tenth of the free space between all slots of all nodes: the check must not fill the disk
    args["size"] = doc["size"] = max(CHUNK, min(args["size"], doc["filesystem"]["free_bytes"] // (10 * args["world"])))
    work = os.path.join(directory, f".clustercheck-storage-{args['token']}-{doc['host']}")
    try:
        os.mkdir(work, 0o700)
        made_at = os.stat(work).st_mtime      # the filesystem's clock: what an earlier run's age is told by
    except OSError as exc:
        doc["write_error"] = failure(work, exc)
        return doc
    read, report = os.pipe()
    children, reaped = {}, set()
    try:
        for slot in range(args["slots"]):
            pid = os.fork()
            if pid == 0:
                os.close(read)
                try:
                    slot_work(args, slot, os.path.join(work, f"slot{slot}"), report)
                finally:
                    os._exit(0)
            children[slot] = pid
        os.close(report)
        doc["slot_results"], doc["d_state"], doc["unfinished"] = collect(args, children, read, reaped)
    finally:     # also on SIGTERM: the slots killed and reaped (for at most half a second: one in D state dies
        # when it leaves it), then the files removed (one still open on NFS would stay as .nfsXXXX)
        if signal.getsignal(signal.SIGTERM) is stop:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)    # a second TERM must not cut the cleanup short
        left = [pid for pid in children.values() if pid not in reaped]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        reap(left, grace_s=0.5)
        shutil.rmtree(work, ignore_errors=True)
        doc["removed_stale"] = remove_stale(directory, made_at)     # after the timed part: it delays nobody
    doc["finished"] = time.time()
    return doc


def remove_stale(directory, now):
    """Remove what runs of this probe left in directory over STALE_S before `now` (the filesystem's clock;
    stopped by SIGKILL, a node lost); the names removed. Only this probe's own names; a run in progress is
    minutes old."""
    removed = []
    try:
        names = [n for n in os.listdir(directory) if n.startswith(OURS)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(directory, name)
        try:
            if now - os.lstat(path).st_mtime < STALE_S:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed.append(name)
        except OSError:
            pass     # another node of a shared filesystem removed it first, or it is not ours to remove
    return removed


def collect(args, children, read, reaped):
    """The slots' answers, watching them until they answer or the deadline passes; `reaped` gets the pids
    reaped (never to be signalled again: the kernel may give the number to another process)."""
    watch = Watch(children, args["d_state"])
    results, buffered, alive = [], b"", set(children)
    os.set_blocking(read, False)
    deadline = time.time() + max(0.0, args["deadline_at"] - time.time())
    while alive and time.time() < deadline:
        watch.sample(time.monotonic())
        try:
            buffered += os.read(read, 65536) or b""
        except BlockingIOError:
            pass
        for slot, pid in list(children.items()):
            if slot in alive and os.waitpid(pid, os.WNOHANG)[0]:
                alive.discard(slot)
                reaped.add(pid)
        time.sleep(WATCH_S)
    try:
        buffered += os.read(read, 65536) or b""
    except (BlockingIOError, OSError):
        pass
    for line in buffered.decode(errors="replace").splitlines():
        try:
            results.append(json.loads(line))
        except ValueError:
            pass
    return results, watch.finish(alive), sorted(alive)


def reap(pids, grace_s=1.0):
    """Reap the killed slots; one in D state dies only when it leaves it: not waited for past grace_s in all."""
    deadline, left = time.monotonic() + grace_s, set(pids)
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    left.discard(pid)
            except ChildProcessError:
                left.discard(pid)
        time.sleep(0.02)


def content(token, size):
    """The coherence file's bytes: the same on every node for one token."""
    block = hashlib.sha256(token.encode()).digest() * 2048
    return (block * (size // len(block) + 1))[:size]


def coherence(args):
    directory = os.path.abspath(args["dir"])
    name = os.path.join(directory, f".clustercheck-coherence-{args['token']}")
    doc = {"schema": 1, "host": socket.gethostname(), "dir": directory, "role": args["coherence"],
           "filesystem": filesystem(directory)}
    body = content(args["token"], COHERENCE_BYTES)
    if args["coherence"] == "write":    # the files stay for the others to look at: the stage removes them after
        try:
            sleep_until(args["start_at"])
            write_coherent(name, body)
            doc["written_at"] = time.time()
        except OSError as exc:
            doc["write_error"] = failure(name, exc)
            remove_coherent(name)
        except BaseException:       # SIGTERM while writing: nobody will ask for the removal
            remove_coherent(name)
            raise
        return doc
    os.path.exists(name), os.path.isdir(name + ".d")    # looked up before it exists: what a cache keeps
    sleep_until(args["start_at"])
    doc.update(look(name, body, args["window"]))
    return doc


def remove_coherent(name):
    shutil.rmtree(name + ".d", ignore_errors=True)
    for leftover in (name, name + ".tmp"):
        try:
            os.unlink(leftover)
        except OSError:
            pass


def write_coherent(name, body):
    os.mkdir(name + ".d")
    for i in range(LISTING):
        with open(os.path.join(name + ".d", f"entry{i}"), "w") as handle:
            handle.write(str(i))
    with open(name + ".tmp", "wb") as handle:
        handle.write(body)
        handle.flush()
        os.fsync(handle.fileno())
    os.rename(name + ".tmp", name)


def look(name, body, window):
    """Look until the file is there with its size and content and the directory lists every entry."""
    started = time.monotonic()
    wanted = hashlib.sha256(body).hexdigest()
    saw = "absent"
    while True:
        try:
            size = os.stat(name).st_size
            if size != len(body):
                saw = f"size {size} of {len(body)}"
            else:
                with open(name, "rb") as handle:
                    got = hashlib.sha256(handle.read()).hexdigest()
                listed = len(os.listdir(name + ".d"))
                saw = ("other content" if got != wanted else
                       f"{listed} of {LISTING} directory entries" if listed != LISTING else "")
        except FileNotFoundError:
            saw = "absent"
        except OSError as exc:
            return {"looked_s": round(time.monotonic() - started, 3), "saw": "error", "error": failure(name, exc)}
        if not saw:
            return {"seen_after_s": round(time.monotonic() - started, 3)}
        if time.monotonic() - started >= window:
            return {"looked_s": round(time.monotonic() - started, 3), "saw": saw}
        time.sleep(0.05)


def parse(argv):
    args = {"dir": ".", "slots": 1, "size": 64 << 20, "seconds": 5.0, "start_at": 0.0, "d_state": 3.0,
            "data": "", "rank0": 0, "world": 1, "token": "t", "coherence": "", "window": 10.0}
    numbers = {"slots": int, "size": int, "rank0": int, "world": int, "seconds": float, "start_at": float,
               "d_state": float, "window": float}
    for flag, value in zip(argv[::2], argv[1::2]):
        key = flag.lstrip("-").replace("-", "_")
        if key not in args:
            raise ValueError(f"unknown option {flag}")
        args[key] = numbers[key](value) if key in numbers else value
    args["start_at"] = args["start_at"] or time.time()
    phase = args["seconds"] + 1.0
    args["read_at"] = args["start_at"] + phase
    args["data_at"] = args["read_at"] + phase
    args["deadline_at"] = args["data_at"] + (phase if args["data"] else 0) + 2 * phase
    return args


def probe(argv):
    args = parse(argv)
    if args["coherence"] == "remove":
        remove_coherent(os.path.join(os.path.abspath(args["dir"]), f".clustercheck-coherence-{args['token']}"))
        return {"schema": 1, "removed": True}
    return coherence(args) if args["coherence"] else measure(args)


PARENT = []


def stop(signum, frame):
    """SIGTERM: the probe unwinds through the finally blocks that remove its files; a slot process (forked,
    the handler inherited) just ends: the parent's cleanup is the parent's."""
    if os.getpid() not in PARENT:
        os._exit(128 + signum)
    raise SystemExit(128 + signum)


def main():
    PARENT.append(os.getpid())
    signal.signal(signal.SIGTERM, stop)
    emit_json(lambda: probe(sys.argv[1:]))
    sys.stdout.flush()
    os._exit(0)     # slot processes are gone; nothing to tear down


if __name__ == "__main__":
    main()
