"""What a rank says about itself when clustercheck asks why a run stopped moving.

Installed from outside the reference trainer by train_entry.py (through the trainer's
Callbacks), and loaded by bench's worker (shipped beside it as clustercheck_hang.py). `install()` does two things, both cheap while the run goes well:

- faulthandler is registered on SIGUSR2: the kernel-level handler writes every thread's
  Python stack to hang/stack.RANK.txt even while the main thread is blocked inside a
  collective (C++ code) or holds the GIL;
- a daemon thread watches hang/request (a stat every 0.25 s); when clustercheck writes a
  new token there, the thread writes hang/state.RANK.json: the step and phase the rank last
  reported and the last collectives the flight recorder holds (torch's record of every
  collective a process group issued: its name, sequence number and state).

The directory is CLUSTERCHECK_HANG_DIR, which clustercheck sets to the run directory's hang/;
without it (the trainer run by hand) nothing is installed. Nothing here raises: a rank that
cannot install the hook trains all the same.
"""

import atexit
import faulthandler
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


def install() -> None:
    where = directory()
    if _installed or not where:
        return
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
    tears down, where a daemon thread is ended by a forced unwind that aborts the rank (SIGABRT)."""
    _stop.set()
    watcher.join(timeout=2.0)


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
    doc = {"token": token, "rank": rank(), "pid": os.getpid(), **progress, "collectives": flight_recorder()}
    path = os.path.join(where, f"state.{rank()}.json")
    try:
        with open(path + ".tmp", "w") as handle:
            json.dump(doc, handle)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def flight_recorder():
    """The last collectives of this rank's process groups (TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE)."""
    try:
        import torch._C._distributed_c10d as c10d   # optional: a torch without the Flight Recorder's bindings
    except ImportError:
        return None
    for name in ("_dump_nccl_trace", "_dump_fr_trace"):
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            trace = pickle.loads(dump(True, False, False))
        except Exception:   # no recorder for this backend, or it is off: try the other
            continue
        entries = trace.get("entries") or []
        if entries:
            return [{"name": str(e.get("profiling_name", "")).split(":")[-1], "seq": e.get("collective_seq_id"),
                     "group": (e.get("process_group") or ("", ""))[1] or str(e.get("pg_id")),
                     "state": e.get("state")} for e in entries[-FLIGHT_ENTRIES:]]
    return None
