"""Ctrl-C (or SIGTERM, SIGHUP) ends the tool within seconds, whatever its cleanup is doing.

The first Ctrl-C raises KeyboardInterrupt as usual: the runner keeps what the finished stages
found (the stage in progress UNKNOWN), the connections close, every remote command's guard
kills it, the run's files are removed, and the findings so far are shown and written. That cleanup gets CLEANUP_S; past
that (or at a second Ctrl-C) the process exits at once, and the kernel closing its sockets
still ends every remote command (their guards watch the connection, not the tool). A
kernel timer backs this up should the interpreter itself be wedged.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from clustercheck.core.errors import EXIT_INTERRUPTED

CLEANUP_S = 5.0
_interrupted = threading.Event()
_reason: list = []
SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


def reason() -> str:
    """What stopped the run: "Ctrl-C", "SIGTERM" or "SIGHUP" ("" while nothing did)."""
    return _reason[0] if _reason else ""


def _exit_after_cleanup_deadline() -> None:
    time.sleep(CLEANUP_S)
    try:
        sys.stderr.write(f"Interrupted: cleanup took over {CLEANUP_S:g} s; exiting now (remote commands end with "
                         f"their connections).\n")
        sys.stderr.flush()
    finally:
        os._exit(EXIT_INTERRUPTED)


def _on_sigint(signum, frame) -> None:
    if _interrupted.is_set():
        os._exit(EXIT_INTERRUPTED)      # a second Ctrl-C: no more waiting
    _interrupted.set()
    _reason.append(SIGNALS.get(signum, f"signal {signum}"))
    threading.Thread(target=_exit_after_cleanup_deadline, name="clustercheck-interrupt", daemon=True).start()
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, CLEANUP_S + 2.0)   # the kernel's backstop: SIGALRM ends the process
    raise KeyboardInterrupt


def install() -> None:
    """For the command-line tool only (a library must not take over its host's signals). SIGTERM (Slurm's
    time limit, `timeout`, systemd) and SIGHUP (a closed terminal) stop the tool as Ctrl-C does: what was
    found so far is shown and written, what runs on the nodes is stopped."""
    for signum in SIGNALS:
        signal.signal(signum, _on_sigint)
