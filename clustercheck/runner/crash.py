"""A failure of clustercheck itself: exit 3 with one line saying what failed and where the traceback went.

Never 0 or 1 (a health-check script reads 1 as "usable, with warnings"), never a traceback on
the screen in place of a verdict. The traceback goes to a file of its own under
$XDG_STATE_HOME/clustercheck (default ~/.local/state/clustercheck), else the temp directory.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import traceback
from typing import Optional, Sequence

from clustercheck.core.errors import EXIT_UNKNOWN


def crash_directory() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "clustercheck")


def write_traceback(exc: BaseException) -> Optional[str]:
    """The traceback in a new file readable by this user only; its path, or None when no file could be written."""
    return write_text("crash", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def write_stacks(names: Sequence[str]) -> Optional[str]:
    """Where each of the named threads of this process is now (the ones an interrupted run could not stop), in a
    new file as write_traceback's; its path, or None."""
    frames = sys._current_frames()
    text = ""
    for thread in threading.enumerate():
        if thread.name in names and thread.ident in frames:
            text += f"thread {thread.name} ({thread.ident}):\n" + "".join(traceback.format_stack(frames[thread.ident]))
            text += "\n"
    return write_text("stuck", text or "no such thread is running any more\n")


def write_text(kind: str, text: str) -> Optional[str]:
    name = f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    header = f"clustercheck {' '.join(sys.argv[1:])}\n\n"
    for folder in (crash_directory(), tempfile.gettempdir()):
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            path = os.path.join(folder, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(header + text)
            return path
        except OSError:
            continue
    return None


def report_crash(exc: BaseException) -> int:
    """Say in one line what failed and where its traceback is; the exit code of a failure of the tool."""
    path = write_traceback(exc)
    what = f"{type(exc).__name__}: {exc}".splitlines()[0][:300] if str(exc) else type(exc).__name__
    where = f"the traceback is in {path}" if path else "no file could be written for the traceback"
    sys.stderr.write(f"clustercheck: internal error, nothing was judged from here on ({what}); {where}. "
                     f"Please report it.\n")
    sys.stderr.flush()
    return EXIT_UNKNOWN
