"""The progress a run reports: which step it is on, how many nodes answered, the ranks' last word.

A core noun, below the transport: the fan-out (every step on the nodes says its name and counts the nodes that
answered), the torchrun follower (the ranks' last word) and a stage's own printer (bench's sizes, smoke's steps)
tell the current one; how it is shown is display/progress.py's (the runner's Printer). Outside the runner (run,
plan, node-check, a library caller) the current one is a plain Progress: it counts, and a stage's own lines are
printed as plain lines on stderr. Never stdout: --json stays a document.
"""

from __future__ import annotations

import sys
import threading
from typing import Optional


class Progress:
    """One run's progress state; shows nothing but a stage's own lines (plain, on stderr)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()       # the state
        self.stage = ""
        self.what, self.total, self.answered_n, self.heard, self.counted = "starting", 0, 0, "", "answered"
        self.previous: Optional["Progress"] = None    # the one this replaced while it runs (with)

    # ---- what the runner calls (a Printer shows them) ---------------------------------------
    def begin(self, stage: str) -> None:
        pass

    def stop(self) -> None:
        pass

    def end(self, summary: str) -> None:
        pass

    def __enter__(self) -> "Progress":
        self.previous = use(self)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        use(self.previous)

    # ---- what the fan-out, the torchrun follower and a stage's printer call ---------------------
    # step, answered and hear only change the state (under `lock`): a stderr nobody reads never blocks a
    # fan-out worker.
    def step(self, what: str, total: int = 0, counted: str = "answered") -> None:
        """A new step on `total` nodes (0: not counted); `counted`: what a node that is done did."""
        with self.lock:
            self.what, self.total, self.answered_n, self.heard, self.counted = what, total, 0, "", counted

    def answered(self) -> None:
        """One node of the step answered."""
        with self.lock:
            self.answered_n += 1

    def hear(self, text: str) -> None:
        """The last word from the nodes in this step (a rank's event): part of the next line, not one itself."""
        with self.lock:
            self.heard = text

    def say(self, text: str, live: bool = False) -> None:
        """A stage's own line (a size measured, a step trained), printed as a plain line."""
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):   # a closed pipe (| head): progress is not worth a crash
            pass


_current: Progress = Progress()


def current() -> Progress:
    """The running stage's progress (a plain one outside the runner)."""
    return _current


def use(progress: Progress) -> Progress:
    """Make progress the current one; returns the one it replaces."""
    global _current
    previous, _current = _current, progress
    return previous
