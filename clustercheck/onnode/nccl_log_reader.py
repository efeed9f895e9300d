"""Which path NCCL really took, read from its own INFO and WARN lines: a pure reader of NCCL's whole log, standard
library only (Python 3.6+), run on the nodes over their ranks' NCCL_DEBUG_FILE logs (only a summary crosses the
network) and on any log a user hands `clustercheck explain`.

    python3 nccl_log_reader.py FILE...      # one JSON summary of the files' lines

Each line is given to its rank (nccl_log_prefix.py tells where it came from: NCCL's `host:pid:tid [dev]`, a
launcher's prefix, the file's node) and read by its level: an INFO line for what it says of NCCL's set-up
(nccl_log_info.py: version, bootstrap, plugin, network, devices, GPUDirect, settings), a connection line for its
transport and peers (nccl_log_connections.py), a WARN for a net that could not start or was in use, a DIAG line
kept for its judge. A line cut mid-way or interleaved with another rank's is read for what it holds; the lines a
large job repeats by the thousand (its connections) are counted in bulk (read_nccl_lines). The helpers travel with
this file: onnode.HELPERS names them, and a copy run by hand finds them beside it.
"""

import json
import re
import sys
from collections import Counter
from itertools import islice

try:
    from .nccl_log_prefix import MARK, heads, old_mark, stripped, where
except ImportError:     # shipped to a node: inline_command registers nccl_log_prefix beside this program
    from nccl_log_prefix import MARK, heads, old_mark, stripped, where
try:
    from .nccl_log_info import MAX_WARNS, P2P_OFF, VERSION, p2p_off, read_info, tally
except ImportError:     # shipped to a node: inline_command registers nccl_log_info beside this program
    from nccl_log_info import MAX_WARNS, P2P_OFF, VERSION, p2p_off, read_info, tally
try:
    from .nccl_log_connections import add_peer, via_kind
except ImportError:     # shipped to a node: inline_command registers nccl_log_connections beside this program
    from nccl_log_connections import add_peer, via_kind

# WARNs that say the net NCCL wanted could not start: libibverbs absent (2.3 to 2.30), verbs that failed to open or
# list the devices (misc/ibvwrap.cc), an IB device that could not be opened or no IP interface for its out-of-band,
# aws-ofi-nccl failing (NET/OFI); a fallback only where the job then shows sockets (nccl/network.py)
_NET_WARN = re.compile(r"Failed to open libibverbs|Call to ibv_(?:open_device|get_device_list|query_\w+) failed|"
                       r"NET/IB ?: (?:Unable to open|Unable to query|No IP interface|No device)|"
                       r"NET/OFI .*(?:[Ff]ailed|[Cc]ouldn't|[Uu]nable|No eligible|not supported)")
# WARNs of a net's own connections or transfers (transport/net_ib, net_socket.cc): that net was the one in use
_NET_USED_WARN = re.compile(r"^NET/(IB|Socket)\w*(?:/GIN)? ?: ?(?:Got completion|.*async|req \d|Attempted to connect|"
                            r"Remote |peer |socket progress)")


def _rank(ranks, key, device):
    if key not in ranks:
        ranks[key] = {"host": key[0], "pid": key[1], "device": device, "rank": None, "nranks": None,
                      "nnodes": None, "version": None, "cuda": None, "bootstrap": None, "network": None,
                      "plugin": None, "collnet": None, "net_devices": [], "link_layers": [], "socket_ifs": [],
                      "env": {}, "gdr": {}, "inter": {}, "intra": {}, "nvls": None, "p2p_disabled": [],
                      "net_failures": [], "warns": [], "diag": [], "lines": 0, "peers": {}}
    return ranks[key]


def read_nccl_line(line, ranks, job, default="log"):
    """One line into the per-rank summaries (ranks: (host, pid) -> summary) and the job's (version lines with
    no host: up to 2.22 only rank 0 prints it, bare). Several NCCL lines joined on one (a pasted log) are each
    read; a line whose NCCL prefix was stripped is read when it starts as NCCL's messages do."""
    at = line.find("NCCL INFO ")
    if at >= 0 and line.find("NCCL ", at + 10) < 0:     # one INFO line, most of a log: the short way
        head = line[:at]
        key = (heads.get(head) if default == "log" else None) or where(head, default)
        rank = ranks.get(key[0]) or _rank(ranks, key[0], key[1])
        rank["lines"] += 1
        via = line.find(" via ", at)
        if via < 0:
            read_info(line[at + 10:].strip(), rank)
            return
        kind = via_kind(line[via + 5:].strip())     # a connection: one line per channel and peer
        if kind:
            table = rank[kind[0]]
            table[kind[1]] = table.get(kind[1], 0) + 1
            add_peer(rank, kind, line, at + 10, via)
        return
    at = line.find("NCCL ")
    if at >= 0 and line.find("NCCL ", at + 10) >= 0:
        starts = [m.start() for m in MARK.finditer(line)]
        if len(starts) > 1:
            cuts = starts[1:] + [len(line)]
            _read_one(line[:cuts[0]], ranks, job, default)
            for start, end in zip(cuts, cuts[1:]):
                _read_one(line[start:end], ranks, job, default)
            return
    _read_one(line, ranks, job, default)


def _read_one(line, ranks, job, default):
    at, level = line.find("NCCL INFO"), "INFO"
    if at < 0:
        at, level = line.find("NCCL WARN"), "WARN"
    if at < 0:
        at, level = line.find("NCCL DIAG"), "DIAG"
    skip = 10
    if at < 0:
        at, level, skip = old_mark(line)
    if at < 0:
        bare = VERSION.search(line)
        if bare:
            job.setdefault("versions", {})
            tally(job["versions"], bare.group(1))
            job["cuda"] = bare.group(2)
            return
        key, text = stripped(line, default)
        if key is None:
            return
        level = "INFO"
    else:
        head, text = line[:at], line[at + skip:]
        key = where(head, default)
    rank = ranks.get(key[0]) or _rank(ranks, key[0], key[1])
    rank["lines"] += 1
    if level == "WARN":
        if len(rank["warns"]) < MAX_WARNS:
            rank["warns"].append(text.strip()[:300])
        if _NET_WARN.search(text) and len(rank["net_failures"]) < 5:
            rank["net_failures"].append("NCCL WARN " + text.strip()[:300])
        used = _NET_USED_WARN.match(text.strip())
        if used:
            rank["warned_net"] = used.group(1)
        off = P2P_OFF.search(text) if "P2P is disabled" in text else None     # paths.cc: a WARN between NVLinks
        if off:
            p2p_off(off, rank, text.strip())
        return
    if level == "DIAG":
        if len(rank["diag"]) < 200:
            rank["diag"].append(text.strip()[:400])
        return
    if " via " in text or text.lstrip().startswith("via "):    # most of a big job's lines: one per channel and peer
        via = text.find("via ")
        kind = via_kind(text[via + 4:].strip())
        if kind:
            tally(rank[kind[0]], kind[1])
            add_peer(rank, kind, text, 0, via - 1)
        return
    read_info(text.strip(), rank)


def _shape(line, default):
    """(rank key, connection kind or None) of a one-INFO line whose reading is a count (a connection, or a line
    that sets nothing: `Connected all rings`, `Trees`); None for any other line, read in order."""
    at = line.find("NCCL INFO ")
    if at < 0 or line.find("NCCL ", at + 10) >= 0:
        return None
    key = (heads.get(line[:at]) if default == "log" else None) or where(line[:at], default)
    via = line.find(" via ", at)
    if via >= 0:
        return key, via_kind(line[via + 5:].strip()), at, via
    return None if read_info(line[at + 10:].strip(), None, True) else (key, None, at, via)     # no pattern reads it


def read_nccl_lines(lines, ranks, job, default="log", wanted=None, text=None):
    """A block of lines into the summaries, the same as read_line on each: a line repeated in the block (a large
    job's connections and `Connected all rings`, by the thousand) is read once and counted where its rank and
    connection kind are known from the lines before, the others are read in order. wanted: which lines are
    NCCL's (all); text: the str of a line given as bytes."""
    for start in range(0, len(lines), 8192):      # a rank's first lines are read in order, the later ones counted
        block, slow = lines[start:start + 8192], set()
        for line, count in Counter(block).items():
            if wanted and not wanted(line):
                continue
            said = text(line) if text else line.rstrip("\r")
            shape = _shape(said, default)
            rank, kind = (ranks.get(shape[0][0]), shape[1]) if shape else (None, None)
            if rank is None or (kind and kind[1] not in rank[kind[0]]):
                slow.add(line)
                continue
            rank["lines"] += count
            if kind:
                rank[kind[0]][kind[1]] += count
                add_peer(rank, kind, said, shape[2] + 10, shape[3])
        for i, line in enumerate(block) if slow else ():
            if line not in slow:
                continue
            said = text(line) if text else line.rstrip("\r")
            if i and said.lstrip().startswith("via ") and "NCCL" not in said:
                before = text(block[i - 1]) if text else block[i - 1].rstrip("\r")
                if "NCCL" in before and " via " not in before:      # a connection line broken in two before "via"
                    said = before.rstrip() + " " + said.strip()
            read_nccl_line(said, ranks, job, default)


def summarize(lines):
    """{"ranks": [each rank's summary], "job": {...}} of an iterable of NCCL log lines."""
    lines = iter(lines)
    return _summary(batch for batch in iter(lambda: [line.rstrip("\n") for line in islice(lines, 4096)], []))


def _summary(blocks):
    ranks, job = {}, {}
    for lines in blocks:       # a debug file's lines are all NCCL's: a stripped prefix is read too
        read_nccl_lines(lines, ranks, job)
    for rank in ranks.values():
        if rank["version"] is None and len(job.get("versions") or {}) == 1:
            rank["version"] = next(iter(job["versions"]))
            rank["cuda"] = rank["cuda"] or job.get("cuda")
    return {"ranks": [r for r in ranks.values() if r["lines"]], "job": job}


def summarize_files(paths):
    """The summary of the ranks' NCCL_DEBUG_FILE logs (never raises: an unreadable file is said)."""
    problems = []

    def blocks():           # whole lines, 256 KB at a time
        for path in paths:
            try:
                with open(path, errors="replace") as handle:
                    for block in iter(lambda: handle.read(1 << 18), ""):
                        yield (block if block.endswith("\n") else block + handle.readline()).split("\n")
            except OSError as exc:
                problems.append("%s: %s" % (path, exc.strerror))
    summary = _summary(blocks())
    summary["unreadable"] = problems
    summary["files"] = len(paths) - len(problems)
    return summary


if __name__ == "__main__":
    json.dump(summarize_files(sys.argv[1:]), sys.stdout)
    sys.stdout.write("\n")
