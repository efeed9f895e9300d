"""How a running stage's progress is shown, on stderr while it runs: which step, how many nodes answered, how
long (the state is core/progress.py's).

One Printer per run, made by the runner; the fan-out and the torchrun follower tell it through
core.progress.current(). A stage still running after FIRST_S says what it does, then at least every EVERY_S: a
line per step on a pipe or in a Slurm output file, one rewritten line on a terminal; it ends with the stage's
total time. A stage done within FIRST_S prints nothing. Never stdout: --json stays a document. Its thread is
stopped and joined when the stage ends (stop()), within TICK_S.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import Callable, Optional, TextIO

from clustercheck.core import threads
from clustercheck.core.progress import Progress, current, use

__all__ = ["EVERY_S", "FIRST_S", "Printer", "Progress", "current", "running", "use"]

FIRST_S = 2.0     # a stage still running this long says what it does (the promise: within 5 s of its start)
EVERY_S = 8.0     # then a line at least this often on a pipe (the promise: every 10 s)
TICK_S = 0.5      # how often the printer looks; a terminal's live line is redrawn every second
JOIN_S = 2.0      # how long stop() waits for the printer's thread (a stderr nobody reads may block a write)


class Printer(Progress):
    """One run's progress, shown. Steps come from the fan-out and the torchrun follower, lines from a stage's own
    printer (bench's sizes, smoke's steps) through say(); the printer's thread fills the silences."""

    def __init__(self, stream: Optional[TextIO] = None, clock: Callable[[], float] = time.monotonic,
                 first_s: float = FIRST_S, every_s: float = EVERY_S, ticking: bool = True):
        super().__init__()
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.clock, self.first_s, self.every_s = clock, first_s, every_s
        self.ticking = ticking      # False: no thread, tick() is called by hand (the tests)
        self.writing = threading.Lock()     # one writer at a time, lines in the order they were made
        self.started = self.last_line = self.last_draw = 0.0
        self.shown = False          # this stage has said something (so it says its total time at the end)
        self.said_step = ""         # the step last written as a line (pipe)
        self.live = False           # a live line is on the terminal, not yet ended
        self.stop_event: Optional[threading.Event] = None
        self.thread: Optional[threading.Thread] = None

    # ---- what the runner calls ------------------------------------------------------------
    def begin(self, stage: str) -> None:
        with self.lock:
            self.stage, self.what, self.total, self.answered_n, self.heard = stage, "starting", 0, 0, ""
            self.counted = "answered"
            self.started = self.last_line = self.clock()
            self.shown, self.said_step = False, ""
            self.stop_event = threading.Event()
        if self.ticking:
            self.thread = threads.start(self._beat, "clustercheck-progress", stop=self.stop_event.set,
                                        args=(self.stop_event,))

    def stop(self) -> None:
        """No more lines of its own for this stage (its lines still end with end()): the thread is stopped and
        joined (within JOIN_S: a write to a stderr nobody reads may block it, and it is a daemon)."""
        with self.lock:
            if self.stop_event is not None:
                self.stop_event.set()
                self.stop_event = None
            thread, self.thread = self.thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_S)

    def end(self, summary: str) -> None:
        """The stage is over: its total time, if it said anything while it ran."""
        self.stop()
        with self.writing:
            with self.lock:
                out = self._line(f"{summary} in {self.clock() - self.started:.1f} s") if self.stage and self.shown \
                    else ""
                self.stage = ""
            self._write(out)

    def say(self, text: str, live: bool = False) -> None:
        """A stage's own line (a size measured, a step trained). live: on a terminal it becomes the live line
        instead (a new one replaces it); on a pipe every line is kept."""
        with self.writing:
            with self.lock:
                if not self.stage:      # outside a stage (a test, a library caller): a plain line
                    out = text + "\n"
                elif live and self.terminal:
                    prefix = f"[{self.stage}] "
                    self.shown, self.heard = True, text[len(prefix):] if text.startswith(prefix) else text
                    out = self._draw()
                else:
                    self.shown = True
                    out = self._line(text)
            self._write(out)

    # ---- the lines ----------------------------------------------------------------------
    def status_text(self) -> str:
        """'[bench] 12 s: probing the nodes, 2 of 3 answered; last: ...'"""
        text = f"[{self.stage}] {self.clock() - self.started:.0f} s: {self.what}"
        if self.total:
            text += f", {self.answered_n} of {self.total} node{'s' if self.total != 1 else ''} {self.counted}"
        return text + (f"; last: {self.heard}" if self.heard else "")

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(TICK_S):
            self.tick(stop)

    def tick(self, stop: Optional[threading.Event] = None) -> None:
        """What the printer's thread does every TICK_S: the first word after FIRST_S, then a line when the step
        changed or the stage was quiet EVERY_S (pipe), or the live line redrawn every second (terminal)."""
        with self.writing:
            with self.lock:
                out, now = "", self.clock()
                if stop is not None and stop.is_set() or not self.stage or now - self.started < self.first_s:
                    return
                if self.terminal:
                    if not self.shown or now - self.last_draw >= 1.0:
                        self.shown = True
                        out = self._draw()
                elif not self.shown or self.what != self.said_step or now - self.last_line >= self.every_s:
                    self.shown, self.said_step = True, self.what
                    out = self._line(self.status_text())
            self._write(out)

    def _draw(self) -> str:
        """The live line (terminal), redrawn."""
        self.live, self.last_draw = True, self.clock()
        return "\r\033[K" + self.status_text()[:_width()]

    def _line(self, text: str) -> str:
        """A kept line, ending the live line first on a terminal."""
        out = "\r\033[K" if self.live else ""
        self.live, self.last_line = False, self.clock()
        return out + text + "\n"

    def _write(self, text: str) -> None:
        if not text:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):   # a closed pipe (| head) or stream: progress is not worth a crash
            pass


def _width() -> int:
    return max(40, shutil.get_terminal_size((100, 20)).columns - 1)


def running() -> Printer:
    """A new printer, the current progress while the `with` block runs (the runner's)."""
    return Printer()
