"""The operating system's error spaces, read from the interpreter's own tables (Python's errno, os.strerror and
signal modules: the platform's names, numbers and texts), and what each value that training jobs meet means.

An errno is found by number (`[Errno 28]`, `errno 98`), by name (`ENOSPC`) or by its text ("No space left on
device"); a signal by number and name as launchers print them (`Signal 7 (SIGBUS)`, `exitcode: -9`,
`return code = -11`, `<Signals.SIGSEGV: 11>`, `killed by signal: Bus error`, `Caught signal 11`, `core dumped`).
The kernel's own log lines that name a cause (a full neighbour table) are rows of their own space, "kernel".
"""

from __future__ import annotations

import errno
import os
import re
import signal
from typing import Dict, List

from clustercheck.vocabulary.kinds import FAILED
from clustercheck.vocabulary.spaces import Row

# errno name -> kind (kinds.py); the others are known by name and text but lead to no kind of their own.
ERRNO_KINDS: Dict[str, str] = {
    "ENOSPC": "disk-full", "EDQUOT": "disk-full", "EMFILE": "open-files", "ENFILE": "open-files",
    "ENOMEM": "host-oom", "EADDRINUSE": "port-in-use", "ECONNREFUSED": "network", "EHOSTUNREACH": "network",
    "ENETUNREACH": "network", "ETIMEDOUT": "network", "EADDRNOTAVAIL": "network", "ECONNRESET": "peer-lost",
    "EPIPE": "peer-lost", "EACCES": "permission", "EPERM": "permission", "EROFS": "permission",
    "ENOENT": "missing-file",
}
NEIGHBOUR_OVERFLOW = "neighbour table overflow"
# errnos whose text alone is no failure: "df: /root/.triton/autotune: No such file or directory" is a script's
# aside in a healthy log; the same text after an error, a failed call or from the shell that could not start a
# program is one
CONTEXT_ONLY = {"ENOENT"}
# signal name -> kind; SIGTERM, SIGINT and SIGHUP are how launchers and schedulers stop ranks: never a cause
# (SIGABRT is C++'s terminate after an exception, NCCL's watchdog's own abort: a crash only where nothing says why)
SIGNAL_KINDS: Dict[str, str] = {"SIGKILL": "killed", "SIGSEGV": "crashed", "SIGILL": "crashed", "SIGFPE": "crashed",
                                "SIGBUS": "crashed", "SIGABRT": "crashed"}
# ...but a SIGABRT proves only that the rank failed (the launcher's tier): a cause its lines show says more
WEAK_SIGNALS = {"SIGABRT"}
_SIGNAL_TEXTS = {"SIGBUS": "Bus error", "SIGSEGV": "Segmentation fault", "SIGILL": "Illegal instruction",
                 "SIGFPE": "Floating point exception", "SIGKILL": "Killed", "SIGABRT": "Aborted"}


def _errno_row(name: str) -> Row:
    number = getattr(errno, name)
    text = re.escape(os.strerror(number))
    if name in CONTEXT_ONLY:    # said by every tool of a script (df, ls, cat): a cause only where something failed on it
        text = (rf"(?:[Ee]rror|[Ee]rrno|cannot|can't|[Ff]ailed|FAILED|[Ff]atal)[^\n]*{text}|"
                rf"^\s*(?:[\w./-]*/)?(?:(?:ba|z)?sh|python[\d.]*|srun|torchrun|deepspeed|exec|env): [^\n]*{text}")
    forms = [rf"\[Errno {number}\]", rf"\berrno[ =:]+{number}\b", rf"\berror {number}\b[^\n]*(?:socket|connect)",
             rf"\b{name}\b", text]
    return Row("errno", "|".join(forms), ERRNO_KINDS[name], name,
               f"the platform's errno {name} ({number}, os.strerror: {os.strerror(number)!r})")


def _signal_row(name: str) -> Row:
    number = int(getattr(signal, name))
    forms = [rf"Signal {number} \({name}\)", rf"<Signals\.{name}: {number}>",
             rf"exitcode\s*:\s*-{number}\b|exit(?:ed)? with (?:exit )?code -{number}\b|return code = -{number}\b|"
             rf"exit status -{number}\b|died with signal {number}\b|[Cc]aught signal {number}\b|"
             rf"terminated by signal {number}\b|terminated with signal {name}\b",
             rf"killed by signal:? {_SIGNAL_TEXTS[name]}"]
    if name not in ("SIGKILL", "SIGABRT"):   # "Killed" alone is any word; the others are the shell's report of a crash
        forms.append(rf"\b{_SIGNAL_TEXTS[name]}\b")
    if name == "SIGABRT":
        forms.append(r"\bAborted \(core dumped\)|terminate called after throwing an instance of")
    if name == "SIGKILL":      # the shell's own report of a killed child: "Killed" alone on its line, or bash's
        forms.append(r"^\s*Killed\s*$|\d+ Killed\s+\S")
    return Row("signal", "|".join(forms), SIGNAL_KINDS[name], name,
               f"the platform's signal {name} ({number}) as torchrun, multiprocessing and the shell print it",
               tier=FAILED if name in WEAK_SIGNALS else -1)


ROWS: List[Row] = ([_errno_row(name) for name in ERRNO_KINDS if hasattr(errno, name)] +
                   [_signal_row(name) for name in SIGNAL_KINDS])
# glibc's malloc aborts the process on a corrupted heap (malloc/malloc.c malloc_printerr): a native crash
ROWS.append(Row("signal", r"free\(\): invalid (?:pointer|size)|double free or corruption|malloc\(\): corrupted|"
                          r"corrupted size vs\. prev_size|munmap_chunk\(\): invalid pointer", "crashed",
                "heap corruption",
                "glibc malloc/malloc.c malloc_printerr: \"free(): invalid pointer\", \"double free or corruption\""))
# the kernel's neighbour (ARP / NDP) table full: past gc_thresh3 it refuses new peers and drops their packets, so
# ranks cannot reach each other (clustercheck env judges the gc_thresh sysctls: node/neighbours.py)
ROWS.append(Row("kernel", r"\b(?:arp|ndisc)_cache: neighbou?r table overflow|Neighbou?r table overflow\.", "network",
                NEIGHBOUR_OVERFLOW,
                "torvalds/linux net/core/neighbour.c neigh_alloc: net_info_ratelimited(\"%s: neighbor table "
                "overflow!\", tbl->id) (\"neighbour: arp_cache: ...\"); older kernels' net/ipv4/route.c and "
                "net/ipv6/route.c (the routing cache, gone in 3.6): printk(KERN_WARNING \"Neighbour table "
                "overflow.\")"))
