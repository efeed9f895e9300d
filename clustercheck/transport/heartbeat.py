"""The tool's heartbeat to every session loop on the nodes: a line every HEARTBEAT_S seconds.

A loop that hears nothing for its LOST seconds (agent_sh.py) ends every command and itself: the tool
is gone even when its connection's end never reached the node. One thread beats for every session.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import List

from clustercheck.core import threads

HEARTBEAT_S = 5.0

_sessions: "weakref.WeakSet" = weakref.WeakSet()
_beating = threading.Lock()
_beater: List[threading.Thread] = []
_beats_stop = threading.Event()


def _beat_forever() -> None:
    while not _beats_stop.wait(HEARTBEAT_S):
        for session in list(_sessions):
            session.beat()


def stop() -> None:
    """At exit, before the interpreter tears down: a daemon thread caught inside the SSH library's native
    code then is ended by a forced unwind, which aborts the process (SIGABRT instead of its exit code)."""
    _beats_stop.set()
    for thread in _beater:
        thread.join(timeout=1.0)


def keep(session) -> None:
    """Beat for this session (its beat() is called every HEARTBEAT_S) until it is gone."""
    _sessions.add(session)
    _start()


def forget(session) -> None:
    _sessions.discard(session)


def _start() -> None:
    with _beating:
        if not _beater:
            _beater.append(threads.start(_beat_forever, "clustercheck-heartbeat", stop=_beats_stop.set))
            atexit.register(stop)
