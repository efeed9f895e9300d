"""Where an NCCL line came from, told by the text before its "NCCL INFO": NCCL's own `host:pid:tid [dev]`, a
launcher's prefix where that is gone (a rank, a host), else the file's node. Standard library only: shipped to the
nodes beside nccl_log_reader.py, which reads the lines.
"""

import re

PREFIX = re.compile(r"([\w.-]+):(\d+):(\d+) \[(\d+)\] (?:[\w/.-]+:\d+ )?$")
# what a launcher writes before a line when NCCL's own prefix is gone (stripped by the poster, or NCCL_DEBUG_FILE
# lines re-printed): Open MPI's --tag-output, srun --label, a bare "[N]", Ray's worker prefix, pdsh's "host: "
LAUNCHER = re.compile(r"^\s*(?:> ?)*(?:\[\d+,(\d+)\]<std\w+>:|(\d{1,5}): |\[(\d{1,5})\] |"
                      r"\((?:\w+ )?pid=(\d+)(?:, ip=([\d.]+))?\) ?|([a-z0-9][\w.-]*[\d-][\w.-]*): )", re.I)
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")
DIAG_PREFIX = re.compile(r"(?:^|\s)([A-Za-z][\w.-]*):(\d+) $")          # NCCL DIAG's "host:pid " (2.31)
ANSI = re.compile(r"\x1b?\[[\d;]*m")
OLD = re.compile(r"[\w.-]+:\d+:\d+ \[\d+\] (?:[\w/.-]+:\d+ )?(INFO|WARN) ")
# where each of several lines joined on one starts: its prefix whole, or cut to ":pid:tid [dev] " or "[dev] "
MARK = re.compile(r"(?:(?:[\w.-]*:\d+:\d+ )?\[\d+\] (?:[\w/.-]+:\d+ )?)?NCCL (?:INFO|WARN|DIAG) ")
# lines whose "host:pid:tid [dev] NCCL INFO " a poster removed (or a wrap carried to the next line): read when they
# start as NCCL's messages do, 2.3 to 2.30 (`NET : Using interface` and `Net/IB:` are 2.3's, `Ring 00 :` 2.4's,
# `via NET/IB/0` the second half of a connection line broken in two)
BARE_SOURCE = (r"^(?:NET/\w+ ?:|Net/IB ?:|NET : Using interface |Bootstrap ?:|Using network |Channel \d+(?:/\d+)? : |"
               r"Ring \d+ : |via (?:NET|P2P|SHM)/|comm 0x|NCCL_\w+ set (?:by environment )?to |P2P plugin |"
               r"Connected all |P2P is disabled between |libfabric:.*FI_HMEM capability)")
BARE = re.compile(BARE_SOURCE)
BARE_ANY = re.compile(r"NET/|Net/IB|NET : |Bootstrap|Using network|Channel \d|Ring \d|via |comm 0x|set by environment|"
                      r" set to |P2P plugin|Connected all|P2P is disabled|FI_HMEM")

seen = {}
heads = {}     # the same for the default node, by the prefix alone: the cheapest look-up of the common line


def where(head, default="log"):
    """((node, pid), cuda device) of the text before "NCCL INFO": NCCL's own host:pid:tid [dev] where it is
    there, else the launcher's prefix (a rank, a host), else the default (the file's node): never "?"."""
    key = seen.get((head, default))
    if key is not None:
        return key
    head = STAMP.sub(" ", head) if "T" in head else head     # a log shipper's ISO time glued to the host
    match = PREFIX.search(head) or DIAG_PREFIX.search(head)
    if match:
        key = ((match.group(1), int(match.group(2))), int(match.group(4)) if match.lastindex >= 4 else None)
    else:
        launched = LAUNCHER.match(ANSI.sub("", head))
        node = default
        if launched:
            rank = launched.group(1) or launched.group(2) or launched.group(3)
            node = (("rank " + rank) if rank else launched.group(5) or
                    ("pid " + launched.group(4) if launched.group(4) else launched.group(6)))
        key = ((node, 0), None)
    if len(seen) < 100000:
        seen[(head, default)] = key
        if default == "log":
            heads[head] = key
    return key


def old_mark(line):
    """(where the level is, the level, its length + 1) in a line of NCCL 2.2 and before, whose prefix has no
    "NCCL"; (-1, None, 0) for any other line."""
    if "] INFO " in line or " WARN " in line:
        old = OLD.search(line)
        if old:
            return old.start(1), old.group(1), len(old.group(1)) + 1
    return -1, None, 0


def stripped(line, default):
    """(where, its text) of a line whose "host:pid:tid [dev] NCCL INFO " a poster removed, read when it starts as
    NCCL's messages do after any launcher's prefix; (None, None) for any other line."""
    if not BARE_ANY.search(line):
        return None, None
    clean = ANSI.sub("", line)
    launched = LAUNCHER.match(clean)
    head = clean[:launched.end()] if launched else ""
    text = clean[len(head):].strip()
    return (where(head, default), text) if BARE.match(text) else (None, None)
