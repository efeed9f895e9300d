"""The operating system's error spaces, read from the interpreter's own tables (Python's errno, os.strerror and
signal modules: the platform's names, numbers and texts), and what each value that training jobs meet means.

An errno is found by number (`[Errno 28]`, `errno 98`), by name (`ENOSPC`) or by its text ("No space left on
device"); a signal by number and name as launchers print them (`Signal 7 (SIGBUS)`, `exitcode: -9`,
`return code = -11`, `<Signals.SIGSEGV: 11>`, `killed by signal: Bus error`, `Caught signal 11`, `core dumped`).
"""

from __future__ import annotations

import errno
import os
import re
import signal
from typing import Dict, Optional, Tuple

# errno name -> kind (kinds.py); the others are known by name and text but lead to no kind of their own.
ERRNO_KINDS: Dict[str, str] = {
    "ENOSPC": "disk-full", "EDQUOT": "disk-full", "EMFILE": "open-files", "ENFILE": "open-files",
    "ENOMEM": "host-oom", "EADDRINUSE": "port-in-use", "ECONNREFUSED": "network", "EHOSTUNREACH": "network",
    "ENETUNREACH": "network", "ETIMEDOUT": "network", "EADDRNOTAVAIL": "network", "ECONNRESET": "peer-lost",
    "EPIPE": "peer-lost", "EACCES": "permission", "EPERM": "permission", "EROFS": "permission",
    "ENOENT": "missing-file",
}
# signal name -> kind; SIGTERM, SIGINT and SIGHUP are how launchers and schedulers stop ranks: never a cause alone
# (SIGABRT neither: C++'s terminate after an exception, NCCL's watchdog's own abort; the rank's lines say why)
SIGNAL_KINDS: Dict[str, str] = {"SIGKILL": "killed", "SIGSEGV": "crashed", "SIGILL": "crashed", "SIGFPE": "crashed",
                                "SIGBUS": "crashed"}
ERRNO_BY_NUMBER = {number: name for number, name in errno.errorcode.items()}
ERRNO_TEXTS = sorted(((os.strerror(getattr(errno, name)), name) for name in ERRNO_KINDS if hasattr(errno, name)),
                     key=lambda t: -len(t[0]))
_TEXT_RE = re.compile("|".join(re.escape(text) for text, _ in ERRNO_TEXTS))
_BY_TEXT = {text: name for text, name in ERRNO_TEXTS}
SIGNAL_BY_NUMBER = {int(s): s.name for s in signal.Signals}
_SIGNAL_TEXTS = {"Bus error": "SIGBUS", "Segmentation fault": "SIGSEGV", "Illegal instruction": "SIGILL",
                 "Aborted": "SIGABRT", "Floating point exception": "SIGFPE", "Killed": "SIGKILL"}


def find_errno(line: str) -> Optional[Tuple[str, str]]:
    """(name, how it was said) of the errno a line shows, among those with a meaning here."""
    match = re.search(r"\[Errno (\d+)\]|\berrno[ =:]+(\d+)|\berror (\d+)\b(?=.*(?:socket|connect))", line)
    if match:
        name = ERRNO_BY_NUMBER.get(int(next(g for g in match.groups() if g)))
        if name in ERRNO_KINDS:
            return name, match.group(0)
    match = re.search(r"\b(E[A-Z]{3,11})\b", line)
    if match and match.group(1) in ERRNO_KINDS:
        return match.group(1), match.group(0)
    match = _TEXT_RE.search(line)
    if match:
        return _BY_TEXT[match.group(0)], match.group(0)
    return None


def errno_by_text(text: str) -> Optional[str]:
    match = _TEXT_RE.search(text)
    return _BY_TEXT[match.group(0)] if match else None


_SIGNAL_FORMS = [
    re.compile(r"Signal (\d+) \((SIG[A-Z]+)\)"),
    re.compile(r"<Signals\.(SIG[A-Z]+): (\d+)>"),
    re.compile(r"exitcode\s*:\s*-(\d+)\b|exit(?:ed)? with (?:exit )?code -(\d+)\b|return code = -(\d+)\b|"
               r"exit status -(\d+)\b|died with signal (\d+)|[Cc]aught signal (\d+)|terminated by signal (\d+)"),
    re.compile(r"killed by signal:? (Bus error|Segmentation fault|Killed|Aborted|Illegal instruction)"),
    re.compile(r"\b(Bus error|Segmentation fault|Illegal instruction|Floating point exception)\b(?: \(core dumped\))?"),
]


def find_signal(line: str) -> Optional[Tuple[str, str]]:
    """(SIGNAME, how it was said) of the signal a line says ended a process, among those with a meaning here."""
    for form in _SIGNAL_FORMS:
        match = form.search(line)
        if not match:
            continue
        values = [g for g in match.groups() if g]
        name = next((v for v in values if v.startswith("SIG")), None)
        if name is None:
            first = values[0]
            name = SIGNAL_BY_NUMBER.get(int(first)) if first.isdigit() else _SIGNAL_TEXTS.get(first)
        if name in SIGNAL_KINDS:
            return name, match.group(0)
    return None
