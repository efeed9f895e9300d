"""Every thread the tool starts, with its stop: so that an interrupted run stops them in order, joins each within a
deadline, and the interpreter then exits as it normally does (no thread left in a blocking call while it shuts
down: that once aborted a run with SIGABRT in CI).

A thread is started through `start(target, name, stop=...)`; its stop is what makes it return (an event set, a
pipe or channel closed); a thread that needs none (a fan-out worker, which returns once its item's own deadline
passed) gives none. `stop_all(deadline_s)` calls every stop, newest first (a stage's progress printer before the
connections' readers before the transport's heartbeat), then joins each, and names the threads still running at
the deadline.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional, Tuple

class Stopped(Exception):
    """The run was stopped (stop_all) before this work was done: raised in the thread that waited on it."""


_lock = threading.Lock()
_started: List[Tuple[threading.Thread, Optional[Callable[[], None]]]] = []


def start(target: Callable, name: str, stop: Optional[Callable[[], None]] = None, args: tuple = ()) -> threading.Thread:
    """A daemon thread of the tool's, started and kept with its stop until it has ended."""
    thread = threading.Thread(target=target, name=name, args=args, daemon=True)
    with _lock:     # started under the lock: stop_all never sees a thread it cannot join yet
        _started[:] = [(t, s) for t, s in _started if t.is_alive()]
        _started.append((thread, stop))
        thread.start()
    return thread


def running() -> List[str]:
    """The names of the tool's threads still running."""
    with _lock:
        return [t.name for t, _ in _started if t.is_alive()]


def stop_all(deadline_s: float) -> List[str]:
    """Every thread's stop called (newest first, each at most once), then each joined within deadline_s in all;
    the names of those still running then ([] when all ended)."""
    with _lock:
        threads = list(reversed(_started))
    for thread, stop in threads:
        if stop is not None and thread.is_alive():
            try:
                stop()
            except Exception:   # noqa: BLE001 - a stop that fails leaves its thread to the join's deadline
                pass
    deadline = time.monotonic() + deadline_s
    for thread, _ in threads:
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t, _ in threads if t.is_alive() and t is not threading.current_thread()]
