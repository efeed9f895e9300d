"""What a rank says about itself when clustercheck asks why a run stopped moving.

Installed from outside the reference trainer by train_entry.py (through the trainer's
Callbacks), and loaded by bench's worker (shipped beside it as clustercheck_hang.py). `install()` does two things, both cheap while the run goes well:

- faulthandler is registered on SIGUSR2: the kernel-level handler writes every thread's
  Python stack to hang/stack.RANK.txt even while the main thread is blocked inside a
  collective (C++ code) or holds the GIL;
- a daemon thread watches hang/request (a stat every 0.25 s); when clustercheck writes a
  new token there, the thread writes hang/state.RANK.json: the step and phase the rank last
  reported and the last collectives the flight recorder holds (torch's record of every
  collective a process group issued: its name, sequence number and state), and hang/fr.RANK,
  the whole record as torch pickles it, for the judge of the ranks' records.

The directory is CLUSTERCHECK_HANG_DIR, which clustercheck sets to the run directory's hang/ (and the check
inside a user's job to nodelib.job_hook_directory, which the stacks probe finds from the rank's environment);
without it (the trainer run by hand) nothing is installed. Nothing here raises: a rank that
cannot install the hook trains all the same.
"""

import atexit
import faulthandler
import importlib
import json
import os
import pickle
import signal
import threading
import time

STACK_SIGNAL = signal.SIGUSR2
POLL_S = 0.25
FLIGHT_ENTRIES = 4     # the last collectives kept in the answer
progress = {"step": None, "phase": "starting"}
_installed = []


def directory() -> str:
    return os.environ.get("CLUSTERCHECK_HANG_DIR", "")


def rank() -> str:
    return os.environ.get("RANK", str(os.getpid()))


def prepare_dumps() -> None:
    """torch's first Flight Recorder dump that holds entries imports torch._dynamo (and some 800 modules with it)
    to symbolise the frames. Done first in the watcher's or the stall dump's thread, that import races the main
    thread's own (DDP's constructor imports torch._dynamo too) and the job dies of an ImportError ("cannot import
    name 'IndentedBuffer' from 'torch._inductor.utils'", seen on the sandbox). So it is done here, in the thread that
    installs the hook, before any other thread can dump."""
    try:
        importlib.import_module("torch._dynamo")
    except Exception:   # noqa: BLE001 - no torch, or one without it: its dumps import nothing of it either
        pass


def install() -> None:
    where = directory()
    if _installed or not where:
        return
    prepare_dumps()
    try:
        os.makedirs(where, exist_ok=True)
        stack_file = open(os.path.join(where, f"stack.{rank()}.txt"), "w")
        faulthandler.register(STACK_SIGNAL, file=stack_file, all_threads=True, chain=False)
        _installed.append(stack_file)
        watcher = threading.Thread(target=_watch, args=(where,), name="clustercheck-hang", daemon=True)
        watcher.start()
        atexit.register(_stop_watching, watcher)
    except (OSError, RuntimeError, ValueError):
        pass


def phase(text: str) -> None:
    progress["phase"] = text


def step(number: int) -> None:
    """The rank finished step `number` (a size, for bench)."""
    progress["step"] = number
    progress["at"] = time.time()


_stop = threading.Event()


def _stop_watching(watcher: threading.Thread) -> None:
    """At exit: the watcher must not be inside torch's C++ (a flight-recorder dump) when the interpreter
    tears down, where a daemon thread is ended by a forced unwind that aborts the rank (SIGABRT). This rank's
    files go with it (a job's folder under /tmp is not the tool's run directory, which goes whole)."""
    _stop.set()
    watcher.join(timeout=2.0)
    where = directory()
    for name in (f"state.{rank()}.json", f"fr.{rank()}", f"stack.{rank()}.txt"):
        try:
            os.remove(os.path.join(where, name))
        except OSError:
            pass
    try:
        os.rmdir(where)       # the last rank of the job on this node
    except OSError:
        pass


def _watch(where: str) -> None:
    request, seen = os.path.join(where, "request"), None
    while not _stop.wait(POLL_S):
        try:
            with open(request) as handle:
                token = handle.read().strip()
        except OSError:
            continue
        if token and token != seen:
            seen = token
            _answer(where, token)


def _answer(where: str, token: str) -> None:
    record = _record()
    doc = {"token": token, "rank": rank(), "pid": os.getpid(), **progress, "collectives": last_collectives(record)}
    if record:     # the whole record beside the answer, for the judge of the ranks' records (flight/)
        try:
            with open(os.path.join(where, f"fr.{rank()}.tmp"), "wb") as handle:
                handle.write(record[1])
            os.replace(os.path.join(where, f"fr.{rank()}.tmp"), os.path.join(where, f"fr.{rank()}"))
            doc["record"] = f"fr.{rank()}"
        except OSError:
            pass
    path = os.path.join(where, f"state.{rank()}.json")
    try:
        with open(path + ".tmp", "w") as handle:
            json.dump(doc, handle)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def dumps():
    """The pickles of this rank's Flight Recorder (TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE), one per
    binding this torch has that dumps without raising (none where torch has no recorder bindings)."""
    try:
        import torch._C._distributed_c10d as c10d   # optional: a torch without the Flight Recorder's bindings
    except ImportError:
        return
    for name in ("_dump_nccl_trace", "_dump_fr_trace"):
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            data = dump(True, True, False)
        except Exception:   # no recorder for this backend, or it is off: try the other
            continue
        yield data


def _record():
    """(the record, its pickle) of the first binding whose record holds entries, None when there is none."""
    for data in dumps():
        try:
            trace = pickle.loads(data)     # torch's own, from this very process
        except Exception:
            continue
        if trace.get("entries"):
            return trace, data
    return None


def last_collectives(record):
    """The last collectives of this rank's process groups, short: name, sequence number, group, state."""
    if not record:
        return None
    return [{"name": str(e.get("profiling_name", "")).split(":")[-1], "seq": e.get("collective_seq_id"),
             "group": (e.get("process_group") or ("", ""))[1] or str(e.get("pg_id")),
             "state": e.get("state")} for e in record[0]["entries"][-FLIGHT_ENTRIES:]]

