"""A process's pipe read while it runs, each line with the wall-clock time it came: for tests that act on what a
job says (its stall line, its step count) before it ends; and whether the records a stall's line announced are the
ones on disk."""

import os
import threading
import time


def newer_than_stall(paths, said_at, after_s):
    """Every file written for the stall whose line came at `said_at` (each rank dumps once no step came for `after_s`,
    within a poll of the line): a record of an earlier stall is older than the stall's start by more than that."""
    return all(os.stat(path).st_mtime > said_at - after_s + 0.5 for path in paths)


class Lines:
    def __init__(self, pipe):
        self.lines = []
        self.reader = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.reader.start()

    def _read(self, pipe):
        for line in pipe:
            self.lines.append((time.time(), line))

    def said(self, text):
        """The time the first line holding `text` came, None while none has."""
        return next((at for at, line in list(self.lines) if text in line), None)

    def text(self):
        """Everything read, once the pipe closed (at most 30 s more)."""
        self.reader.join(timeout=30)
        return "".join(line for _, line in self.lines)
